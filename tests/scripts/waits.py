# Threads that wait in different ways, each in its own function, for off-CPU profiling:
# sleeping, blocked on a socket, blocked on a lock, two threads fighting over the GIL (`gil`),
# and one on the CPU without the GIL, hashing large buffers (`hash`: hashlib releases the GIL
# while it hashes more than 2 KiB).
import hashlib
import socket
import sys
import threading
import time


def sleeper():
    while True:
        time.sleep(0.05)  # @sleep


def reader(sock):
    while True:
        sock.recv(1)  # @recv


def locker(lock):
    lock.acquire()  # @lock


def spinner():
    while True:
        for _ in range(1000):  # @spin
            pass


def hasher():
    data = bytes(1 << 20)
    while True:
        hashlib.sha256(data)  # @hash


held = threading.Lock()
held.acquire()
a, b = socket.socketpair()
threads = [
    threading.Thread(target=sleeper, name="sleeper", daemon=True),
    threading.Thread(target=reader, args=(a,), name="reader", daemon=True),
    threading.Thread(target=locker, args=(held,), name="locker", daemon=True),
]
if "gil" in sys.argv[1:]:
    threads += [threading.Thread(target=spinner, name=f"spinner{i}", daemon=True) for i in range(2)]
if "hash" in sys.argv[1:]:
    threads.append(threading.Thread(target=hasher, name="hasher", daemon=True))
for t in threads:
    t.start()
print("ready", flush=True)
time.sleep(1000)  # @main
