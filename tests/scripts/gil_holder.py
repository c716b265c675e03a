"""One thread holds the GIL while three others keep wanting it.

`python gil_holder.py [python|c]`: the holder runs `hold_gil_spin`, a pure-Python loop (the
default), or `hold_gil_in_c`, which keeps the GIL through long C calls (`sum` over a range:
no bytecode runs inside, so the GIL is handed over only between calls). Either way the
interpreter hands the GIL over only when a waiter has asked for it for a switch interval
(5 ms). The `wanter` threads do a few additions, then sleep a tenth of a millisecond
(releasing the GIL), then want it back: each spends nearly all its time blocked on the GIL's
condition variable while the holder holds it. Prints "ready" once every thread runs.
"""
import sys
import threading
import time


def hold_gil_spin():
    n = 0
    while True:
        n += 1  # @spin


def hold_gil_in_c():
    while True:
        sum(range(10_000_000))  # @in_c


def wanter(started):
    started.release()
    n = 0
    while True:
        n += 1
        time.sleep(0.0001)


def main():
    hold = hold_gil_in_c if sys.argv[1:] == ["c"] else hold_gil_spin
    started = threading.Semaphore(0)
    threading.Thread(target=hold, name="holder", daemon=True).start()
    for i in range(3):
        threading.Thread(target=wanter, args=(started,), name=f"wanter-{i}", daemon=True).start()
    for _ in range(3):
        started.acquire()
    print("ready", flush=True)
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main()
