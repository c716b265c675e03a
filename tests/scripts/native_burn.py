"""Loads the C library given as argument (native_burn.c, built by the test) through ctypes and
spends its time in it under the Python function `burn`: Python -> ctypes -> fixture_entry ->
fixture_outer -> fixture_middle -> fixture_leaf. Prints "ready" once it has run once.
"""
import ctypes
import sys

LIB = ctypes.CDLL(sys.argv[1])
LIB.fixture_entry.argtypes = [ctypes.c_uint64]
LIB.fixture_entry.restype = ctypes.c_uint64


def burn():
    LIB.fixture_entry(5_000_000)


def main():
    burn()
    print("ready", flush=True)
    while True:
        burn()


if __name__ == "__main__":
    main()
