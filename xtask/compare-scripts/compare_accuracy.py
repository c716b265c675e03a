"""Target of known CPU shares for `cargo xtask bench compare`: 60/30/10 across three functions.

Usage: compare_accuracy.py LEAD_S WINDOW_S

`hot_a`, `hot_b` and `hot_c` run the same loop, called from different stack depths (1, 2 and 4
frames below `run`) in slots of equal work, 6:3:1 in a fixed interleaved pattern. The script
measures the truth itself: the CPU time (`time.process_time()`) spent in each function from
`ready` to exit, since the profiler samples only part of that span and the pattern is the same
throughout. At exit it prints one JSON line: `{"cpu_secs", "share", "lines", "spans"}`, `lines`
giving the line of each function's hot loop (marked by a `HOT` comment below), `spans` the first
and last line of each function.
"""

import json
import os
import sys
import time

UNITS = 4000


def hot_a(n):
    x = 1
    for _ in range(n): x = (x * 1103515245 + 12345) & 0x7FFFFFFF  # HOT hot_a
    return x


def hot_b(n):
    x = 1
    for _ in range(n): x = (x * 1103515245 + 12345) & 0x7FFFFFFF  # HOT hot_b
    return x


def hot_c(n):
    x = 1
    for _ in range(n): x = (x * 1103515245 + 12345) & 0x7FFFFFFF  # HOT hot_c
    return x


def b1(n):
    return hot_b(n)


def c1(n):
    return c2(n)


def c2(n):
    return c3(n)


def c3(n):
    return hot_c(n)


def hot_lines():
    # Built at run time so that this line does not carry the marker itself.
    marker = "# " + "HOT "
    lines = {}
    with open(__file__) as f:
        for number, text in enumerate(f, 1):
            if marker in text:
                lines[text.rsplit(marker, 1)[1].strip()] = number
    return lines


def run(seconds):
    # Six slots of hot_a, three of hot_b, one of hot_c per period of ten, interleaved so that no
    # sampling period lines up with one function.
    pattern = [("hot_a", hot_a), ("hot_a", hot_a), ("hot_b", b1), ("hot_a", hot_a),
               ("hot_c", c1), ("hot_a", hot_a), ("hot_b", b1), ("hot_a", hot_a),
               ("hot_a", hot_a), ("hot_b", b1)]
    spent = {"hot_a": 0.0, "hot_b": 0.0, "hot_c": 0.0}
    cpu = time.process_time
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for name, fn in pattern:
            t0 = cpu()
            fn(UNITS)
            spent[name] += cpu() - t0
    return spent


def spans():
    # First and last line of each hot function: a sample on its `def` line (entry) or its
    # `return` is right, one outside the span is wrong.
    return {f.__name__: [f.__code__.co_firstlineno,
                         max(line for _, _, line in f.__code__.co_lines() if line)]
            for f in (hot_a, hot_b, hot_c)}


def main():
    lead, window = float(sys.argv[1]), float(sys.argv[2])
    print("ready", os.getpid(), flush=True)
    spent = run(lead + window)
    total = sum(spent.values())
    print(json.dumps({"cpu_secs": spent,
                      "share": {k: v / total for k, v in spent.items()},
                      "lines": hot_lines(),
                      "spans": spans()}), flush=True)


main()
