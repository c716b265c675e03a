# Bench target: one thread DEPTH Python frames deep (the module frame included), then
#   park: parked in time.sleep (a C call: the stack does not change), or
#   busy: looping on the CPU in the innermost frame (only its line changes), or
#   block: sleeping 1 ms at a time, about a thousand blocking calls a second, or
#   native: looping on sorted() with a Python key function that spends its time in zlib.crc32,
#     so the leaf is in C (libz) under C (the sort) under Python: about 20 native frames,
#     the interpreter's own included.
# Prints "ready" once at depth. Usage: deep.py DEPTH [park|busy|block|native]
import sys
import time
import zlib

sys.setrecursionlimit(100000)
DEPTH = int(sys.argv[1])
KIND = sys.argv[2] if len(sys.argv) > 2 else "park"


DATA = bytes(range(256)) * 256  # 64 KiB: crc32 takes tens of microseconds


def slow_key(x):
    return zlib.crc32(DATA, x)


def recurse(n):
    if n > 1:
        return recurse(n - 1)
    print("ready", flush=True)
    if KIND == "busy":
        i = 0
        while True:
            i += 1
            i ^= 5
    if KIND == "native":
        while True:
            sorted(range(64), key=slow_key)
    if KIND == "block":
        while True:
            time.sleep(0.001)
    time.sleep(1e9)


recurse(DEPTH - 1)
