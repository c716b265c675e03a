"""asyncio target shaped like a server: one task per request, unnamed (asyncio names them
`Task-N`), each running the coroutine `handle`, which burns CPU in `compute` between awaits.
A few requests are in flight at once and new ones keep coming.

Prints "ready" once the first request is done, then runs until killed.
"""

import asyncio


def compute():
    return sum(i * i for i in range(20000))


async def handle():
    for _ in range(3):
        compute()
        await asyncio.sleep(0)


async def main():
    first = True
    while True:
        await asyncio.gather(*(asyncio.ensure_future(handle()) for _ in range(4)))
        if first:
            print("ready", flush=True)
            first = False


if __name__ == "__main__":
    asyncio.run(main())
