# One thread whose caller chain never changes while its leaf spends alternate 200 ms phases on
# two loops of its own: only the top frame's line moves. Records that repeat the thread's last
# stack below the top frame must still carry the line of their moment.
import time


def leaf():
    n = 0
    while True:
        end = time.monotonic() + 0.2
        while time.monotonic() < end:  # @one-loop
            n += 1  # @one-body
        end = time.monotonic() + 0.2
        while time.monotonic() < end:  # @two-loop
            n -= 1  # @two-body


def caller():
    leaf()


print("ready", flush=True)
caller()
