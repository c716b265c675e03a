# Eight threads, thread i parked under i+1 nested calls of `level`, plus the main thread.
import threading
import time

N = 8
started = threading.Barrier(N + 1)


def level(n):
    if n == 0:
        started.wait()
        time.sleep(1000)  # @sleep
    return level(n - 1)  # @level


def worker(i):
    level(i)  # @worker


threads = [threading.Thread(target=worker, args=(i,), name=f"worker-{i}", daemon=True) for i in range(N)]
for t in threads:
    t.start()
started.wait()
print("ready", flush=True)
time.sleep(1000)  # @main_sleep
