# Real gunicorn, imported from argv[1] (where the test pip-installed it), serving a WSGI app
# with argv[2] sync workers forked by its master, as `gunicorn app:app -w N` runs. Each worker
# prints "worker PID" once booted and burns CPU in `worker_hot` on a thread of its own, so
# that it has samples; the master sleeps in its arbiter loop.
import sys
import threading

sys.path.insert(0, sys.argv[1])

from gunicorn.app.base import BaseApplication  # noqa: E402

WORKERS = int(sys.argv[2])


def worker_hot():
    n = 0
    while True:
        n += 1


def post_worker_init(worker):
    threading.Thread(target=worker_hot, daemon=True).start()
    print("worker", worker.pid, flush=True)


def app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok\n"]


class App(BaseApplication):
    def load_config(self):
        self.cfg.set("bind", "127.0.0.1:0")
        self.cfg.set("workers", WORKERS)
        self.cfg.set("post_worker_init", post_worker_init)
        self.cfg.set("loglevel", "warning")

    def load(self):
        return app


App().run()
