# py-spy's recursive.py: a loop calling a 20-deep recursion, so the top of the stack changes
# every few dozen nanoseconds and a reader that does not stop the thread sees it move.
import sys

DEPTH = int(sys.argv[1]) if len(sys.argv) > 1 else 20


def recurse(x):  # @recurse_def
    if x == 0:
        return
    recurse(x - 1)  # @recurse


print("ready", flush=True)
while True:
    recurse(DEPTH)  # @module
