# Collects garbage in a loop on the main thread (py-spy's gc.py, with cycles to find), while a
# second thread sleeps: `<GC>` belongs on the main thread's stack, above churn.
import gc
import threading
import time


class Node:
    def __init__(self):
        self.me = self


def park_worker():
    time.sleep(100000)  # @park_worker


def churn():
    print("ready", flush=True)
    while True:
        nodes = [Node() for _ in range(20000)]
        del nodes
        gc.collect()  # @collect


threading.Thread(target=park_worker, name="worker", daemon=True).start()
churn()
