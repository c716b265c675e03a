# Publishes an OpenTelemetry process context (OTEP 4719) in a memfd mapping named OTEL_CTX, as
# an SDK would: argv[1] is the protobuf payload in hex. Then spins in `work` for argv[2] s.
# With argv[3], a path: publishes only once that file exists (an SDK that starts late).
import ctypes
import mmap
import os
import struct
import sys
import time

payload = bytes.fromhex(sys.argv[1])
trigger = sys.argv[3] if len(sys.argv) > 3 else None
region = None


def publish():
    global region
    fd = os.memfd_create("OTEL_CTX")
    os.ftruncate(fd, 4096)
    region = mmap.mmap(fd, 4096)
    base = ctypes.addressof(ctypes.c_char.from_buffer(region))
    region[32 : 32 + len(payload)] = payload
    published = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
    region[0:32] = b"OTEL_CTX" + struct.pack("<IIQQ", 2, len(payload), published, base + 32)


if trigger is None:
    publish()
deadline = time.monotonic() + float(sys.argv[2])


def work():
    total = 0
    for i in range(20000):
        total += i
    return total


print("ready", flush=True)
while time.monotonic() < deadline:
    work()
    if region is None and os.path.exists(trigger):
        publish()
        print("published", flush=True)
