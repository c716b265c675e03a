# Loads libbz2 through ctypes, compresses in it, unloads it (dlclose), again and again: the
# library's mappings come and go while the process is sampled (`compress_loop` → ctypes →
# libbz2). Until killed, or for argv[1] s.
import _ctypes
import ctypes
import sys
import time

deadline = time.monotonic() + float(sys.argv[1]) if len(sys.argv) > 1 else None
data = bytes(range(256)) * 1024
out = ctypes.create_string_buffer(len(data) * 2)


def compress_loop():
    lib = ctypes.CDLL("libbz2.so.1.0")
    for _ in range(3):
        size = ctypes.c_uint(len(out))
        lib.BZ2_bzBuffToBuffCompress(out, ctypes.byref(size), data, len(data), 9, 0, 0)
    handle = lib._handle
    del lib
    _ctypes.dlclose(handle)


print("ready", flush=True)
while deadline is None or time.monotonic() < deadline:
    compress_loop()
