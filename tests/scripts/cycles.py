# A target whose frame chains the test corrupts from outside: the main thread spins in
# spin_main (its frame never returns, so a `previous` written by the test is never followed by
# CPython itself); with "threads", a second thread parks in park_worker.
import sys
import threading
import time


def park_worker():
    time.sleep(100000)  # @park_worker


def worker():
    park_worker()


def spin_main():
    print("ready", flush=True)
    while True:  # @spin_main
        pass


def main():
    if "threads" in sys.argv[1:]:
        threading.Thread(target=worker, name="worker", daemon=True).start()
    spin_main()


main()
