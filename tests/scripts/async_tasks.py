"""asyncio target for task-aware stacks: a root task gathers three named tasks.

- `producer` burns CPU in `crunch` and puts results on a queue;
- `sleeper` awaits `asyncio.sleep` in `nap`;
- `consumer` awaits the queue in `drain`.

Prints "ready" once every task has started, then runs until killed.
"""

import asyncio
import sys

# `asyncio.run` is 3.7+; before it, the default loop runs the coroutine.
run = getattr(asyncio, "run", None) or asyncio.get_event_loop().run_until_complete


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


def named_task(coro, name):
    # `create_task(name=)` is 3.8+: the refusal test runs this on 3.7 too.
    task = asyncio.ensure_future(coro)
    task.set_name(name) if hasattr(task, "set_name") else None
    return task


async def main():
    queue = asyncio.Queue(maxsize=1)
    tasks = [
        named_task(produce(queue), "producer"),
        named_task(nap(), "sleeper"),
        named_task(drain(queue), "consumer"),
    ]
    await asyncio.sleep(0)
    print("ready", flush=True)
    await asyncio.gather(*tasks)  # @main-await


if __name__ == "__main__":
    sys.setswitchinterval(0.001)
    run(main())
