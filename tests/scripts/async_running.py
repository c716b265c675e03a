"""asyncio target for running tasks' whole stacks: two tasks, `worker-a` and `worker-b`, each
run `handle_work`, which calls `compute_part`, which calls `cpu_work`, a plain loop burning
CPU for a few milliseconds before the task awaits again and the other one runs. At almost any
moment one of them is its thread's running task, with the two plain functions on the thread's
stack above its coroutine's frame, and the other waits in `asyncio.sleep(0)`.

Prints "ready" once both have run a round, then runs until killed.
"""

import asyncio


def cpu_work(n):
    total = 0
    for i in range(n):
        total += i * i  # @cpu-work
    return total


def compute_part(n):
    return cpu_work(n)  # @compute-part


async def handle_work(rounds):
    while True:
        compute_part(50_000)  # @handle-work
        rounds.append(None)
        await asyncio.sleep(0)  # @handle-await


async def main():
    rounds = []
    workers = [
        asyncio.create_task(handle_work(rounds), name=name) for name in ("worker-a", "worker-b")
    ]
    while len(rounds) < 2:
        await asyncio.sleep(0)
    print("ready", flush=True)
    await asyncio.gather(*workers)  # @main-await


if __name__ == "__main__":
    asyncio.run(main())
