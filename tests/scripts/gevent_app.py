"""Real gunicorn with one gevent worker, serving a WSGI app whose handler, `do_request`, burns
a little CPU and then waits in `gevent.sleep`: at any moment most requests are greenlets
parked in that sleep, which no thread's stack shows. Five client greenlets of the worker keep
a request in flight each.

Usage: gevent_app.py SITE (where gunicorn and gevent were installed). The worker prints
"worker PID" once its clients had a response; the master sleeps in its arbiter loop.
"""

import sys

sys.path.insert(0, sys.argv[1])

from gunicorn.app.base import BaseApplication  # noqa: E402

CLIENTS = 5


def burn():
    return sum(i * i for i in range(20_000))


def do_request():
    burn()
    import gevent

    gevent.sleep(0.2)  # @request-sleep
    return b"ok\n"


def app(environ, start_response):
    body = do_request()
    start_response("200 OK", [("Content-Length", str(len(body)))])
    return [body]


def client(port, answered):
    import socket

    while True:
        conn = socket.create_connection(("127.0.0.1", port))
        conn.sendall(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n")
        while conn.recv(4096):
            pass
        conn.close()
        answered.set()


def post_worker_init(worker):
    import gevent
    from gevent.event import Event

    port = worker.sockets[0].getsockname()[1]
    answered = Event()
    for _ in range(CLIENTS):
        gevent.spawn(client, port, answered)

    def say_ready():
        answered.wait()
        print("worker", worker.pid, flush=True)

    gevent.spawn(say_ready)


class App(BaseApplication):
    def load_config(self):
        self.cfg.set("bind", "127.0.0.1:0")
        self.cfg.set("workers", 1)
        self.cfg.set("worker_class", "gevent")
        self.cfg.set("post_worker_init", post_worker_init)
        self.cfg.set("loglevel", "warning")

    def load(self):
        return app


App().run()
