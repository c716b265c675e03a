"""One thread holds the GIL in a pure-Python loop while three others keep wanting it.

`hold_gil_spin` never releases the GIL on its own: the interpreter hands it over only when a
waiter has asked for it for a switch interval (5 ms). The `wanter` threads do a few additions,
then sleep a tenth of a millisecond (releasing the GIL), then want it back: each spends nearly
all its time blocked on the GIL's condition variable while `hold_gil_spin` holds it. Prints
"ready" once every thread runs.
"""
import threading
import time


def hold_gil_spin():
    n = 0
    while True:
        n += 1  # @spin


def wanter(started):
    started.release()
    n = 0
    while True:
        n += 1
        time.sleep(0.0001)


def main():
    started = threading.Semaphore(0)
    threading.Thread(target=hold_gil_spin, name="holder", daemon=True).start()
    for i in range(3):
        threading.Thread(target=wanter, args=(started,), name=f"wanter-{i}", daemon=True).start()
    for _ in range(3):
        started.acquire()
    print("ready", flush=True)
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main()
