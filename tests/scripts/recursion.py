# A 1000-deep recursion parked at the bottom.
import sys
import time

sys.setrecursionlimit(10000)
DEPTH = int(sys.argv[1]) if len(sys.argv) > 1 else 1000


def recurse(n):
    if n == 0:
        print("ready", flush=True)
        time.sleep(1000)  # @sleep
    return recurse(n - 1)  # @recurse


recurse(DEPTH)  # @module
