# A pre-forking parent: on SIGUSR1 it forks a worker (os.fork, no exec) that spends its time in
# `worker_hot` until killed or for argv[1] s, and prints "forked PID". Never reaps them (an
# exited worker stays a zombie until the parent ends).
import os
import signal
import sys
import time

deadline = time.monotonic() + float(sys.argv[1])


def worker_hot(n):
    total = 0
    for i in range(n):
        total += i * i
    return total


def worker():
    while time.monotonic() < deadline:
        worker_hot(20000)
    os._exit(0)


def fork_worker(signum, frame):
    pid = os.fork()
    if pid == 0:
        worker()
    print("forked", pid, flush=True)


signal.signal(signal.SIGUSR1, fork_worker)
print("ready", flush=True)
while time.monotonic() < deadline:
    time.sleep(0.05)
