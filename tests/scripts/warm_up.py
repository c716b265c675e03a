# A start-up phase, then steady work: `warm_up` runs for the first 2 s after "ready" and never
# again, `steady` from then on (for argv[1] s in all). A live view of the last second loses
# `warm_up` after the first refreshes; a cumulative one keeps it.
import sys
import time

deadline = time.monotonic() + float(sys.argv[1])


def warm_up(until):
    n = 0
    while time.monotonic() < until:
        n += 1


def steady():
    n = 0
    while time.monotonic() < deadline:
        n += 1


print("ready", flush=True)
warm_up(time.monotonic() + 2)
steady()
