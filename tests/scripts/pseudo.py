# Python re-entered from C (a sort key) or from the garbage collector (a finalizer), parked there.
import gc
import sys
import time


def park():
    print("ready", flush=True)
    time.sleep(1000)  # @park


def from_c():
    return sorted([1], key=lambda x: park())  # @sorted


class Finalized:
    def __del__(self):
        park()  # @del

    def cycle(self):
        self.me = self


def from_gc():
    gc.disable()
    Finalized().cycle()
    gc.collect()  # @collect


if sys.argv[1] == "native":
    from_c()  # @module_native
else:
    from_gc()  # @module_gc
