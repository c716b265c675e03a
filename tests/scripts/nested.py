# Nested functions and methods, parked at a known line (time.sleep is C: no frame above it).
import sys
import time


class Shop:
    def checkout(self):
        print("ready", flush=True)
        time.sleep(1000)  # @checkout


def outer():
    def inner():
        Shop().checkout()  # @inner

    inner()  # @outer


outer()  # @module
