# Two threads with Python names longer than the OS allows (15 bytes), both burning CPU in
# `spin`, so that on-CPU samples come from them.
import threading

started = threading.Barrier(3)


def spin():
    started.wait()
    while True:
        pass  # @spin


for name in ["CustomThreadName-1", "CustomThreadName-2"]:
    threading.Thread(target=spin, name=name, daemon=True).start()
started.wait()
print("ready", flush=True)
threading.Event().wait()  # @main_wait
