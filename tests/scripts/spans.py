# Switches OpenTelemetry thread contexts (OTEP 4947) on a known schedule: argv[1] is the library
# built from otel_thread_ctx.c. Span A is current while `in_span_a` runs, span B while
# `in_span_b` runs, each ~50 ms at a time, for argv[2] seconds; the main thread and a second
# thread both do it.
import ctypes
import sys
import threading
import time

lib = ctypes.CDLL(sys.argv[1])
deadline = time.monotonic() + float(sys.argv[2])
TRACE = bytes.fromhex("0af7651916cd43dd8448eb211c80319c")
SPANS = {
    "a": bytes.fromhex("b7ad6b7169203331"),
    "b": bytes.fromhex("00f067aa0ba902b7"),
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


def run():
    while time.monotonic() < deadline:
        lib.set_span(TRACE, SPANS["a"])
        in_span_a()
        lib.set_span(TRACE, SPANS["b"])
        in_span_b()
        lib.clear_span()


worker = threading.Thread(target=run, name="worker")
worker.start()
print("ready", flush=True)
run()
worker.join()
