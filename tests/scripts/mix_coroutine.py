# Chains that differ only inside coroutines: await chains a_outer→a_mid→a_leaf and
# b_outer→b_mid→b_leaf, made afresh on every turn (freed coroutine frames come back at the same
# addresses), awaited one after the other and as two tasks that interleave at each
# `asyncio.sleep(0)`. A stack naming an `a_` coroutine above a `b_` one (or the reverse) never
# happened. argv[1]: each leaf's loop.
import asyncio
import sys

N = int(sys.argv[1]) if len(sys.argv) > 1 else 200


async def a_leaf():
    x = 0
    for i in range(N):
        x += i
    await asyncio.sleep(0)
    return x


async def b_leaf():
    x = 0
    for i in range(N):
        x -= i
    await asyncio.sleep(0)
    return x


async def a_mid():
    return await a_leaf()


async def b_mid():
    return await b_leaf()


async def a_outer():
    return await a_mid()


async def b_outer():
    return await b_mid()


async def main():
    print("ready", flush=True)
    while True:
        await a_outer()
        await b_outer()
        await asyncio.gather(a_outer(), b_outer())


asyncio.run(main())
