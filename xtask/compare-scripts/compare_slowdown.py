"""CPU-bound target for `cargo xtask bench compare`: its own throughput under a profiler.

Usage: compare_slowdown.py LEAD_S WINDOW_S

Prints `ready PID` at once, runs the fixed function for LEAD_S seconds (the profiler attaches
meanwhile and CPython's specializing interpreter warms up), then counts calls of it for
WINDOW_S seconds of wall-clock time and prints one JSON line, `{"calls", "secs", "per_sec",
"cpu_secs"}`, before it exits. Wall-clock time, not CPU time: a profiler that stops the target
(py-spy's default) costs throughput without costing CPU time.
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
    lead, window = float(sys.argv[1]), float(sys.argv[2])
    print("ready", os.getpid(), flush=True)
    clock = time.perf_counter
    end = clock() + lead
    while clock() < end:
        work(500)
    calls = 0
    cpu0 = time.process_time()
    start = clock()
    end = start + window
    while True:
        work(500)
        calls += 1
        now = clock()
        if now >= end:
            break
    secs = now - start
    print(json.dumps({"calls": calls, "secs": secs, "per_sec": calls / secs,
                      "cpu_secs": time.process_time() - cpu0}), flush=True)


main()
