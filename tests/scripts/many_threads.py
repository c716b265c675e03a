# N parked threads (default 4200), then the main thread burns CPU in `main_burn` for SECONDS.
# The main thread is the oldest thread state: last in the interpreter's thread list.
import sys
import threading
import time

N = int(sys.argv[1]) if len(sys.argv) > 1 else 4200
SECONDS = float(sys.argv[2]) if len(sys.argv) > 2 else 60.0
threading.stack_size(64 * 1024)
release = threading.Event()
started = threading.Semaphore(0)


def parked():
    started.release()
    release.wait()  # @parked


threads = [threading.Thread(target=parked, daemon=True) for _ in range(N)]
for t in threads:
    t.start()
for _ in range(N):
    started.acquire()
print("ready", flush=True)


def main_burn():
    deadline = time.perf_counter() + SECONDS
    while time.perf_counter() < deadline:
        pass  # @main_burn


main_burn()
release.set()
