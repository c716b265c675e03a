# A generator and a coroutine, each running when the stack is taken.
import asyncio
import sys
import time


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
    asyncio.run(top())  # @module_coro
