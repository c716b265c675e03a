"""Loads big_frame.c's library (the first argument) and spends its time in it, half through
`burn_big` (a C frame larger than a native sample's stack copy) and half through
`burn_small`. Prints "ready" once both have run."""
import ctypes
import sys

LIB = ctypes.CDLL(sys.argv[1])
for name in ("big_frame_entry", "small_frame_entry"):
    getattr(LIB, name).argtypes = [ctypes.c_uint64]
    getattr(LIB, name).restype = ctypes.c_uint64


def burn_big():
    LIB.big_frame_entry(2_000_000)


def burn_small():
    LIB.small_frame_entry(2_000_000)


def main():
    burn_big()
    burn_small()
    print("ready", flush=True)
    while True:
        burn_big()
        burn_small()


if __name__ == "__main__":
    main()
