"""CPU-bound target for the toggled slowdown of `cargo xtask bench compare`.

Usage: compare_toggle.py SECONDS

Prints `ready PID` at once, then calls a fixed function for SECONDS and cuts its time into
slices of about 2 ms of wall-clock time: for each, the monotonic clock at its start and end
(`CLOCK_MONOTONIC`, the clock the harness stamps its pauses and resumes with), the calls made and
the CPU time this thread used. At exit it prints one JSON line, `{"slices": [[start_ns, end_ns,
calls, cpu_ns], ...]}`: the harness sums the slices inside each of its windows.
"""

import json
import os
import sys
import time


def work(n):
    # A linear congruential generator: pure bytecode, no allocation, the same work every call.
    x = 1
    for _ in range(n): x = (x * 1103515245 + 12345) & 0x7FFFFFFF
    return x


def main():
    secs = float(sys.argv[1])
    print("ready", os.getpid(), flush=True)
    mono, cpu = time.monotonic_ns, time.thread_time_ns
    slice_ns = 2_000_000
    start, cpu_start = mono(), cpu()
    end = start + int(secs * 1e9)
    cut = start + slice_ns
    slices = []
    calls = 0
    while True:
        work(500)
        calls += 1
        now = mono()
        if now >= cut:
            c = cpu()
            slices.append([start, now, calls, c - cpu_start])
            start, cpu_start, calls = now, c, 0
            cut = now + slice_ns
            if now >= end:
                break
    print(json.dumps({"slices": slices}), flush=True)


main()
