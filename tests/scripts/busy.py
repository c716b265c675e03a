# CPU-bound: spends its time in `hot` (called through `warm`), until killed or for argv[1] s.
import sys
import time

deadline = time.monotonic() + float(sys.argv[1]) if len(sys.argv) > 1 else None


def hot(n):  # @hot_def
    total = 0
    for i in range(n):  # @hot_loop
        total += i * i  # @hot_body
    return total  # @hot_end


def warm():  # @warm_def
    return hot(20000)  # @warm


print("ready", flush=True)
while deadline is None or time.monotonic() < deadline:  # @module_loop
    warm()  # @module
