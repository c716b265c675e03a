# Eight threads, thread i parked under i+1 nested calls of `level`, plus the main thread.
# Thread i is named `worker-i`, except thread 3: `CustomThreadName-3`.
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


def name(i):
    # One name longer than the 15 characters an OS thread name can hold.
    return "CustomThreadName-3" if i == 3 else f"worker-{i}"


threads = [threading.Thread(target=worker, args=(i,), name=name(i), daemon=True) for i in range(N)]
for t in threads:
    t.start()
started.wait()
print("ready", flush=True)
time.sleep(1000)  # @main_sleep
