# Switches OpenTelemetry thread contexts (OTEP 4947) on a known schedule: argv[1] is the library
# built from otel_thread_ctx.c. Span A is current while `in_span_a` runs, span B while
# `in_span_b` runs, each ~50 ms at a time, for argv[2] seconds. The main thread does it with
# spans a and b of one trace, a second thread ("worker") with its own spans c and d of another
# trace: a context read from the wrong thread shows, in the span id and in the trace id.
import ctypes
import sys
import threading
import time

lib = ctypes.CDLL(sys.argv[1])
deadline = time.monotonic() + float(sys.argv[2])
TRACES = {
    "main": bytes.fromhex("0af7651916cd43dd8448eb211c80319c"),
    "worker": bytes.fromhex("4bf92f3577b34da6a3ce929d0e0e4736"),
}
SPANS = {
    "a": bytes.fromhex("b7ad6b7169203331"),
    "b": bytes.fromhex("00f067aa0ba902b7"),
    "c": bytes.fromhex("c0c0c0c0c0c0c0c0"),
    "d": bytes.fromhex("d0d0d0d0d0d0d0d0"),
}


def spin(seconds):
    end = time.monotonic() + seconds
    total = 0
    while time.monotonic() < end:
        for i in range(1000):
            total += i
    return total


def in_span_a():
    return spin(0.05)


def in_span_b():
    return spin(0.05)


def run(trace, first, second):
    while time.monotonic() < deadline:
        lib.set_span(TRACES[trace], SPANS[first])
        in_span_a()
        lib.set_span(TRACES[trace], SPANS[second])
        in_span_b()
        lib.clear_span()


worker = threading.Thread(target=run, args=("worker", "c", "d"), name="worker")
worker.start()
print("ready", flush=True)
run("main", "a", "b")
worker.join()
