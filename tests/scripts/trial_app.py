# The issue-39 trial's service, rebuilt: real gunicorn (sync workers forked by its master)
# serving a WSGI app whose requests multiply numpy matrices and query sqlite, with clients
# keeping every worker busy on a small host.
#
#   trial_app.py serve SITE... PORT WORKERS   prints "worker PID" per booted worker
#   trial_app.py load PORT CLIENTS            prints "ready" once a request was answered
#
# SITE...: directories the test pip-installed gunicorn and numpy into, put on sys.path.
import sys
import threading
import urllib.request

MODE = sys.argv[1]


def serve(sites, port, workers):
    for site in sites:
        sys.path.insert(0, site)
    import sqlite3

    import numpy as np
    from gunicorn.app.base import BaseApplication

    a = np.random.rand(120, 120)
    db = {}

    def conn():
        # One in-memory database per worker, made after the fork.
        if "c" not in db:
            c = sqlite3.connect(":memory:")
            c.execute("create table t (k integer primary key, v text)")
            c.executemany("insert into t (v) values (?)", ((str(i),) for i in range(2000)))
            db["c"] = c
        return db["c"]

    def report(n):
        total = 0.0
        for _ in range(n):
            total += float((a @ a).trace())
        return total

    def query():
        return conn().execute("select count(*), max(v) from t where v like '%7%'").fetchone()

    def app(environ, start_response):
        body = f"{report(3):.1f} {query()}\n".encode()
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [body]

    def post_worker_init(worker):
        print("worker", worker.pid, flush=True)

    class App(BaseApplication):
        def load_config(self):
            self.cfg.set("bind", f"127.0.0.1:{port}")
            self.cfg.set("workers", workers)
            self.cfg.set("post_worker_init", post_worker_init)
            self.cfg.set("loglevel", "warning")

        def load(self):
            return app

    App().run()


def load(port, clients):
    url = f"http://127.0.0.1:{port}/"
    first = threading.Event()

    def client():
        while True:
            try:
                urllib.request.urlopen(url, timeout=10).read()
                first.set()
            except OSError:
                pass

    for _ in range(clients):
        threading.Thread(target=client, daemon=True).start()
    first.wait()
    print("ready", flush=True)
    threading.Event().wait()


if MODE == "serve":
    serve(sys.argv[2:-2], int(sys.argv[-2]), int(sys.argv[-1]))
else:
    load(int(sys.argv[2]), int(sys.argv[3]))
