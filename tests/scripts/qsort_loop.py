# Sorts with libc's qsort through ctypes, with a Python comparison function: Python
# (`sort_loop`) → ctypes → qsort (libc) → ctypes' callback → Python (`comparator`). Until
# killed, or for argv[1] s.
import ctypes
import ctypes.util
import sys
import time

deadline = time.monotonic() + float(sys.argv[1]) if len(sys.argv) > 1 else None
libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
Compare = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int))
N = 512
values = ctypes.c_int * N


def comparator(a, b):
    return a[0] - b[0]


compare = Compare(comparator)


def sort_loop():
    items = values(*range(N, 0, -1))
    libc.qsort(items, N, ctypes.sizeof(ctypes.c_int), compare)


print("ready", flush=True)
while deadline is None or time.monotonic() < deadline:
    sort_loop()
