# One thread stuck on a lock for 40 s (a stall), while the main thread naps in 0.2 s steps
# (many short waits, never a stall). Prints "ready" once the stuck thread is blocked.
import threading
import time

held = threading.Lock()
held.acquire()


def stuck():
    held.acquire()  # @stuck


t = threading.Thread(target=stuck, name="stuck")
t.start()
time.sleep(0.5)
print("ready", flush=True)
deadline = time.monotonic() + 40
while time.monotonic() < deadline:
    time.sleep(0.2)
held.release()
t.join()
print("released", flush=True)
while True:
    time.sleep(0.2)
