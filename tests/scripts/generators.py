# A generator and a coroutine, each running when the stack is taken.
import asyncio
import sys
import time

# `asyncio.run` is 3.7+; before it, the default loop runs the coroutine.
run = getattr(asyncio, "run", None) or asyncio.get_event_loop().run_until_complete


def consume():
    print("ready", flush=True)
    time.sleep(1000)  # @consume


def produce():
    while True:
        yield consume()  # @yield


def drive():
    for _ in produce():  # @drive
        pass


async def leaf():
    print("ready", flush=True)
    time.sleep(1000)  # @leaf


async def middle():
    await leaf()  # @middle


async def top():
    await middle()  # @top


if sys.argv[1] == "generator":
    drive()  # @module_gen
else:
    run(top())  # @module_coro
