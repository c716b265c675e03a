"""Spends its time in C called from Python, and in Python called back from C.

`compress_loop` calls zlib.compress (the zlib module's C function, then libz's deflate) on a
buffer that takes milliseconds to compress. `sort_loop` sorts with a Python key function:
list.sort (C) calls `slow_key` (Python), which spends its time in zlib.crc32 (C, libz). So a
stack reads Python -> C -> Python -> C. Argument: `compress`, `sort` or `both` (default).
Prints "ready" once both have run.
"""
import os
import sys
import zlib

DATA = os.urandom(1 << 16) * 8  # 512 KiB, incompressible enough to keep deflate busy


def compress_loop():
    zlib.compress(DATA, 6)


def slow_key(x):
    # A Python frame called back by list.sort, itself spending time in C.
    return zlib.crc32(DATA, x)


def sort_loop():
    sorted(range(64), key=slow_key)


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "both"
    compress_loop()
    sort_loop()
    print("ready", flush=True)
    while True:
        if mode in ("both", "compress"):
            compress_loop()
        if mode in ("both", "sort"):
            sort_loop()


if __name__ == "__main__":
    main()
