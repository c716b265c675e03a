# Threads that wait in different ways, each in its own function, for off-CPU profiling:
# sleeping, blocked on a socket, blocked on a lock, two threads fighting over the GIL (`gil`;
# `spin`: one thread on the CPU holding it), one sleeping a millisecond at a time (`tick`),
# one on the CPU without the GIL, hashing (or compressing) large buffers (`hash`: OpenSSL's
# hashes and zlib release the GIL while they work on more than 2 KiB), and one that naps in turn from two callers through the same
# function (`alternate`: 60 ms from short_naps, 120 ms from long_naps).
import hashlib
import socket
import sys
import threading
import time
import zlib


def sleeper():
    while True:
        time.sleep(0.05)  # @sleep


def reader(sock):
    while True:
        sock.recv(1)  # @recv


def locker(lock):
    lock.acquire()  # @lock


def ticker():
    while True:
        time.sleep(0.001)  # @tick


def nap(seconds):
    time.sleep(seconds)  # @nap


def short_naps():
    nap(0.06)  # @short


def long_naps():
    nap(0.12)  # @long


def alternator():
    while True:
        short_naps()
        long_naps()


def spinner():
    while True:
        for _ in range(1000):  # @spin
            pass


try:
    import _hashlib  # noqa: F401  OpenSSL's hashes, which let the GIL go while they hash

    work_without_gil = hashlib.sha256
except ImportError:
    # A build without OpenSSL (pyenv's 3.6 on OpenSSL 3) hashes with its own sha256, which
    # keeps the GIL; zlib lets it go while it compresses.
    work_without_gil = zlib.compress


def hasher():
    data = bytes(16 << 20)  # tens of ms per call without the GIL, against 5 ms to take it back
    while True:
        work_without_gil(data)  # @hash


held = threading.Lock()
held.acquire()
a, b = socket.socketpair()
threads = [
    threading.Thread(target=sleeper, name="sleeper", daemon=True),
    threading.Thread(target=reader, args=(a,), name="reader", daemon=True),
    threading.Thread(target=locker, args=(held,), name="locker", daemon=True),
]
spinners = 2 if "gil" in sys.argv[1:] else 1 if "spin" in sys.argv[1:] else 0
threads += [threading.Thread(target=spinner, name=f"spinner{i}", daemon=True) for i in range(spinners)]
if "tick" in sys.argv[1:]:
    threads.append(threading.Thread(target=ticker, name="ticker", daemon=True))
if "alternate" in sys.argv[1:]:
    threads.append(threading.Thread(target=alternator, name="alternator", daemon=True))
if "hash" in sys.argv[1:]:
    threads.append(threading.Thread(target=hasher, name="hasher", daemon=True))
for t in threads:
    t.start()
print("ready", flush=True)
time.sleep(1000)  # @main
