"""procrastinate's own API, for the side-by-side throughput row (bench/bench_pg_team.py).

usage: python -m bench.procrastinate_worker setup CONNINFO COUNT   (schema + COUNT jobs deferred)
       python -m bench.procrastinate_worker work CONNINFO NAME      (fetch+finish until the queue is empty)
"""

from __future__ import annotations

import sys

import procrastinate


def app_for(conninfo: str) -> procrastinate.App:
    app = procrastinate.App(connector=procrastinate.SyncPsycopgConnector(conninfo=conninfo))

    @app.task(name="noop", queue="bench")
    def noop() -> None:
        return None

    return app


def main() -> None:
    action, conninfo = sys.argv[1], sys.argv[2]
    app = app_for(conninfo)
    with app.open():
        if action == "setup":
            app.schema_manager.apply_schema()
            count = int(sys.argv[3])
            task = app.tasks["noop"]
            for start in range(0, count, 1000):
                task.batch_defer(*[{} for _ in range(min(1000, count - start))])
            return
    async_app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=conninfo))
    async_app.task(name="noop", queue="bench")(lambda: None)
    async_app.run_worker(queues=["bench"], wait=False, concurrency=1, name=sys.argv[3], listen_notify=False,
                         install_signal_handlers=False, delete_jobs="never")


if __name__ == "__main__":
    main()
