"""The README's worked example: a small web app with one path that contends for the GIL and
one that waits on a socket.

`python3 slow_app.py serve PORT` serves from a pool of 8 worker threads (`worker_0` ...):
- `/report` renders a report in pure Python: CPU time holding the GIL, so concurrent reports
  wait for each other's GIL;
- `/quote` asks an upstream service on PORT+1 and waits on its socket for the answer.
Prints "ready" once it serves.

`python3 slow_app.py load PORT` is the rest of the world: the upstream service (answers after
50 ms) and 8 clients, 4 asking `/report` and 4 asking `/quote` in a loop.
"""
import http.client
import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, HTTPServer


def render_report():
    total = 0
    for i in range(300_000):
        total += i * i % 7
    return str(total).encode()


def fetch_quote(port):
    with socket.create_connection(("127.0.0.1", port + 1)) as upstream:
        upstream.sendall(b"quote?\n")
        return upstream.recv(64)


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/report":
            body = render_report()
        elif self.path == "/quote":
            body = fetch_quote(self.server.server_address[1])
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class PooledServer(HTTPServer):
    """Hands each connection to a fixed pool of worker threads, as app servers do."""

    pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="worker")

    def process_request(self, request, client_address):
        self.pool.submit(self._handle, request, client_address)

    def _handle(self, request, client_address):
        try:
            self.finish_request(request, client_address)
        finally:
            self.shutdown_request(request)


def serve(port):
    server = PooledServer(("127.0.0.1", port), Handler)
    print("ready", flush=True)
    server.serve_forever()


def upstream(port):
    listener = socket.create_server(("127.0.0.1", port + 1), backlog=64)

    def answer(conn):
        with conn:
            conn.recv(64)
            time.sleep(0.05)
            conn.sendall(b"42\n")

    while True:
        conn, _ = listener.accept()
        threading.Thread(target=answer, args=(conn,), daemon=True).start()


def client(port, path):
    while True:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", path)
            conn.getresponse().read()
            conn.close()
        except OSError:
            time.sleep(0.1)


def load(port):
    threading.Thread(target=upstream, args=(port,), daemon=True).start()
    for path in ["/report"] * 4 + ["/quote"] * 4:
        threading.Thread(target=client, args=(port, path), daemon=True).start()
    print("ready", flush=True)
    while True:
        time.sleep(1)


if __name__ == "__main__":
    mode, port = sys.argv[1], int(sys.argv[2])
    serve(port) if mode == "serve" else load(port)
