# Bench target for asyncio task-aware stacks: a root task gathers TASKS tasks, each DEPTH
# coroutines deep (`nest` awaiting `nest`). The first loops on the CPU in its innermost coroutine
# and never yields again; the others wait on an event that is never set.
# Prints "ready" once every task is at depth. Usage: async_deep.py TASKS DEPTH
import asyncio
import sys

TASKS = int(sys.argv[1])
DEPTH = int(sys.argv[2])


async def nest(n, busy, started):
    if n > 1:
        return await nest(n - 1, busy, started)
    started.append(None)
    if busy:
        while len(started) < TASKS:
            await asyncio.sleep(0)
        print("ready", flush=True)
        i = 0
        while True:
            i += 1
            i ^= 5
    await asyncio.Event().wait()


async def main():
    started = []
    await asyncio.gather(
        *(
            asyncio.create_task(nest(DEPTH, k == 0, started), name=f"task-{k}")
            for k in range(TASKS)
        )
    )


asyncio.run(main())
