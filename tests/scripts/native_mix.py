"""Spends its time in C called from Python, and in Python called back from C.

`compress_loop` calls zlib.compress (the zlib module's C function, then libz's deflate) on a
buffer that takes milliseconds to compress. `sort_loop` sorts with a Python key function, so
list.sort (C) calls `slow_key` (Python), which itself calls zlib.crc32... no: it hashes in C
too, so the leaf is native above a Python frame above C above Python.
Prints "ready" once both are warm.
"""
import os
import sys
import zlib

DATA = os.urandom(1 << 16) * 8  # 512 KiB, incompressible enough to keep deflate busy


def compress_loop():
    for _ in range(2):
        zlib.compress(DATA, 6)


def slow_key(x):
    # A Python frame called back by list.sort, itself spending time in C.
    return zlib.crc32(DATA[: 1 << 15], x)


def sort_loop():
    sorted(range(32), key=slow_key)


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
