# Imports ctypes and, given a path, dlopens a second libpython (never initialised) before being
# sampled: discovery must pick the live runtime, not the copy.
import ctypes
import sys
import time

if len(sys.argv) > 1:
    ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_LOCAL)


def parked():
    print("ready", flush=True)
    time.sleep(1000)  # @parked


parked()  # @module
