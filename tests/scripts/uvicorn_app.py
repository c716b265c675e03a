"""uvicorn on uvloop serving an ASGI app, as an async server runs: `app` calls `compute_part`,
which calls `cpu_work` (both from async_running.py), a plain loop burning CPU for a few
milliseconds, inside the task uvicorn makes for each request (`RequestResponseCycle.run_asgi`,
named `Task-N` by asyncio).
Two client threads of the same process keep a request in flight each, over keep-alive
connections.

Usage: uvicorn_app.py SITE (the directory uvicorn and uvloop were installed into). Prints
"ready" once a client had a response, then serves until killed.
"""

import http.client
import socket
import sys
import threading

sys.path.insert(0, sys.argv[1])

import uvicorn  # noqa: E402

# The plain functions a request calls, shared with the plain asyncio target.
from async_running import compute_part  # noqa: E402


async def app(scope, receive, send):
    await receive()
    compute_part(50_000)  # @app-work
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def client(port, answered):
    conn = http.client.HTTPConnection("127.0.0.1", port)
    conn.connect()
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while True:
        conn.request("GET", "/")
        conn.getresponse().read()
        answered.set()


def main():
    sock = socket.socket()
    # Accepted connections inherit it: a response's headers and body are two writes, and the
    # second would wait for the client's delayed ACK (40 ms) while the server idles.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    port = sock.getsockname()[1]
    answered = threading.Event()
    for _ in range(2):
        threading.Thread(target=client, args=(port, answered), daemon=True).start()

    def say_ready():
        answered.wait()
        print("ready", flush=True)

    threading.Thread(target=say_ready, daemon=True).start()
    config = uvicorn.Config(
        app,
        fd=sock.fileno(),
        loop="uvloop",
        lifespan="off",
        log_level="warning",
        access_log=False,
    )
    uvicorn.Server(config).run()


if __name__ == "__main__":
    main()
