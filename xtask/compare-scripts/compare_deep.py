"""Target with a steady stack of known depth for `cargo xtask bench compare`'s throughput runs.

Usage: compare_deep.py DEPTH SECONDS

Recurses until DEPTH Python frames are on the stack (counting `<module>` and `main`), prints
`ready PID` there and spins in the innermost frame for SECONDS, so every sample should have
exactly DEPTH frames.
"""

import os
import sys
import time


def descend(left, seconds):
    if left > 0:
        return descend(left - 1, seconds)
    print("ready", os.getpid(), flush=True)
    end = time.perf_counter() + seconds
    x = 1
    while time.perf_counter() < end:
        for _ in range(2000): x = (x * 1103515245 + 12345) & 0x7FFFFFFF
    return x


def main():
    depth, seconds = int(sys.argv[1]), float(sys.argv[2])
    sys.setrecursionlimit(depth + 100)
    # <module> and main are two frames; descend(k) adds k + 1.
    descend(depth - 3, seconds)


main()
