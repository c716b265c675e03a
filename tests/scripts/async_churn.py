"""asyncio task churn: a task named `parent` gathers 50 short tasks named `child-N`, again and
again (thousands of tasks a second), each burning a little CPU in `work`.

Prints "ready" once the first round has run, then runs until killed.
"""

import asyncio
import itertools

counter = itertools.count()


def work():
    return sum(i * i for i in range(300))


async def child():  # @child-def
    work()
    await asyncio.sleep(0)
    work()


async def parent():
    first = True
    while True:
        await asyncio.gather(
            *(asyncio.create_task(child(), name=f"child-{next(counter)}") for _ in range(50))
        )
        if first:
            print("ready", flush=True)
            first = False


async def main():
    await asyncio.create_task(parent(), name="parent")


if __name__ == "__main__":
    asyncio.run(main())
