# Bench target of `bench scale`: a mostly idle service. DEPTH Python frames deep (the module
# frame included), it wakes 10 times a second, does a little work (about 0.1 ms) and sleeps
# again: 10 blocking calls and 10 context switches a second. Prints "ready" once at depth.
# Usage: sleeper.py [DEPTH]
import sys
import time

DEPTH = int(sys.argv[1]) if len(sys.argv) > 1 else 20


def work():
    return sum(i * i for i in range(200))


def recurse(n):
    if n > 1:
        return recurse(n - 1)
    print("ready", flush=True)
    while True:
        work()
        time.sleep(0.1)


recurse(DEPTH - 1)
