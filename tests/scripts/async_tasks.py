"""asyncio target for task-aware stacks: a root task gathers three named tasks.

- `producer` burns CPU in `crunch` and puts results on a queue;
- `sleeper` awaits `asyncio.sleep` in `nap`;
- `consumer` awaits the queue in `drain`.

Prints "ready" once every task has started, then runs until killed.
"""

import asyncio
import sys


def crunch(n):
    total = 0
    for i in range(n):
        total += i * i
    return total


async def produce(queue):
    while True:
        await queue.put(crunch(20000))
        # Yield to the loop so the others run, without leaving the CPU.
        await asyncio.sleep(0)


async def nap():
    while True:
        await asyncio.sleep(0.5)  # @nap-await


async def drain(queue):
    while True:
        await queue.get()  # @drain-await


async def main():
    queue = asyncio.Queue(maxsize=1)
    tasks = [
        asyncio.create_task(produce(queue), name="producer"),
        asyncio.create_task(nap(), name="sleeper"),
        asyncio.create_task(drain(queue), name="consumer"),
    ]
    await asyncio.sleep(0)
    print("ready", flush=True)
    await asyncio.gather(*tasks)  # @main-await


if __name__ == "__main__":
    sys.setswitchinterval(0.001)
    asyncio.run(main(), debug=False)
