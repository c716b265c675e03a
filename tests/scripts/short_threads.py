# Threads living LIFETIME_MS each, one after another, burning CPU in `short_burn`, beside the main
# thread burning in `steady`. After SECONDS, prints the CPU seconds the short threads got in
# `short_burn` and the main thread got in all, measured by the threads themselves
# (time.thread_time), and exits.
import sys
import threading
import time

# `time.thread_time` is 3.7+; the clock it reads is older.
thread_time = getattr(time, "thread_time", None) or (
    lambda: time.clock_gettime(time.CLOCK_THREAD_CPUTIME_ID)
)

LIFETIME = float(sys.argv[1]) / 1000.0
SECONDS = float(sys.argv[2]) if len(sys.argv) > 2 else 60.0
short_cpu = 0.0
lock = threading.Lock()


def short_burn():
    global short_cpu
    start, cpu0 = time.perf_counter(), thread_time()
    while time.perf_counter() - start < LIFETIME:
        pass  # @short_burn
    with lock:
        short_cpu += thread_time() - cpu0


def steady(t):
    # Burns until thread t ends.
    while t.is_alive():
        pass  # @steady


print("ready", flush=True)
main_cpu0 = thread_time()
deadline = time.perf_counter() + SECONDS
while time.perf_counter() < deadline:
    t = threading.Thread(target=short_burn)
    t.start()
    steady(t)
    t.join()
main_cpu = thread_time() - main_cpu0
print(f"cpu short_burn={short_cpu:.4f} main={main_cpu:.4f}", flush=True)
