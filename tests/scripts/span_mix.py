# Spans with a known mix of CPU, socket and lock time, for `pyagent spans`: argv[1] is the
# library built from otel_thread_ctx.c (OpenTelemetry thread context, OTEP 4947), argv[2] how
# long to run, in seconds. The main thread takes turns in two spans of one trace:
#   span a (1111111111111111): 100 ms of CPU in `compute`, 200 ms in `call_service` waiting
#     for a socket, 50 ms in `take_lock` waiting for a lock;
#   span b (2222222222222222): 150 ms of CPU, 50 ms on the socket, 150 ms on the lock.
# A peer thread (no span) answers the socket after the asked delay and holds the lock for the
# asked time. CPU time is counted with thread_time, so a preempted `compute` still does its
# share of CPU, whatever else runs on the machine.
import ctypes
import socket
import sys
import threading
import time

# `time.thread_time` is 3.7+; the clock it reads is older.
thread_time = getattr(time, "thread_time", None) or (
    lambda: time.clock_gettime(time.CLOCK_THREAD_CPUTIME_ID)
)

lib = ctypes.CDLL(sys.argv[1])
deadline = time.monotonic() + float(sys.argv[2])
TRACE = bytes.fromhex("5b8efff798038103d269b633813fc60c")
SPANS = {
    "a": (bytes.fromhex("1111111111111111"), 0.100, 0.200, 0.050),
    "b": (bytes.fromhex("2222222222222222"), 0.150, 0.050, 0.150),
}

mine, theirs = socket.socketpair()
lock = threading.Lock()


def peer():
    """Serves `s<ms>` (answer after ms) and `l<ms>` (take the lock, say so, hold it ms)."""
    while True:
        request = theirs.recv(16).decode()
        kind, ms = request[0], int(request[1:])
        if kind == "s":
            time.sleep(ms / 1000)
            theirs.send(b".")
        else:
            with lock:
                theirs.send(b".")
                time.sleep(ms / 1000)


def compute(seconds):
    """Spends `seconds` of this thread's CPU time holding the GIL (sum runs under it)."""
    start = thread_time()
    while thread_time() - start < seconds:
        sum(range(1000))


def call_service(seconds):
    mine.send(b"s%d" % round(seconds * 1000))
    return mine.recv(1)


def take_lock(seconds):
    mine.send(b"l%d" % round(seconds * 1000))
    mine.recv(1)  # the peer holds the lock now
    with lock:
        pass


threading.Thread(target=peer, name="peer", daemon=True).start()
print("ready", flush=True)
while time.monotonic() < deadline:
    for span, cpu, io, held in SPANS.values():
        lib.set_span(TRACE, span)
        compute(cpu)
        call_service(io)
        take_lock(held)
        lib.clear_span()
