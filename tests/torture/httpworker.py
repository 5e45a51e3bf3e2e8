"""The crash harness's client of `loki serve`: hook requests and board actions over HTTP, until it is killed.

The server is killed (SIGKILL) with the workers, at a random point, often in the middle of a request. Every
request is written to the op log (``begin``/``end``, as tests/torture/worker.py does); a refused connection
(the server is gone, or not up yet) is simply tried again. What the harness checks after each round is the
tree: a killed server must leave it whole, exactly as a killed command hook would.

usage: python -m tests.torture.httpworker ROOT SEED WORKER OPLOG
"""

from __future__ import annotations

import http.client
import json
import os
import random
import sys
import time
import urllib.parse

from loki.resident import files
from loki.serve.tokens import derived
from loki.storage import layout
from loki.storage.store import Store


class HttpWorker:
    def __init__(self, root: str, seed: int, name: str, oplog: str) -> None:
        self.root = root
        self.rng = random.Random(seed)
        self.name = name
        self.store = Store(root, validate_all=False, lock_timeout=30)
        self.log_fd = os.open(oplog, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.serial = 0

    def log(self, *words: str) -> None:
        os.write(self.log_fd, (" ".join(words) + "\n").encode())

    def run(self) -> None:
        while True:
            run = files.probe(self.root, timeout=2.0)
            if run is None:
                time.sleep(0.01)  # the server is starting (or was killed): its client waits, as an agent would
                continue
            token = files.token(self.root)
            assert token is not None
            try:
                while True:
                    (self.hook if self.rng.random() < 0.7 else self.action)(int(run["port"]), token)
            except (OSError, http.client.HTTPException):
                continue

    def _post(self, port: int, path: str, body: bytes, headers: dict[str, str]) -> int:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            connection.request("POST", path, body=body, headers=headers)
            response = connection.getresponse()
            response.read()
            return response.status
        finally:
            connection.close()

    def hook(self, port: int, token: str) -> None:
        self.serial += 1
        event = self.rng.choice(["post-tool-use-failure"] * 3 + ["pre-tool-use", "post-tool-use"])
        payload = {"session_id": self.name, "cwd": os.path.dirname(self.root), "tool_name": "Bash",
                   "tool_input": {"command": f"make serve-{self.rng.randrange(3)}"}}
        if event == "post-tool-use-failure":
            payload["error"] = f"make: *** [serve] Error {self.rng.randrange(1, 3)}"
        elif event == "post-tool-use":
            payload["tool_response"] = {"stdout": "ok", "stderr": "", "interrupted": False}
        op = f"{self.name}-h{self.serial}"
        self.log("begin", "hook", op)
        status = self._post(port, f"/hook/{event}", json.dumps(payload).encode(), {files.TOKEN_HEADER: token})
        self.log("end", "hook", op) if status == 200 else self.log("refused", "hook", op, str(status))

    def action(self, port: int, token: str) -> None:
        pending = self.store.read(layout.queue_file("pending"))["tasks"]
        if not pending:
            return
        task = self.rng.choice(pending)
        kind = self.rng.choice(["priority", "priority", "cancel"])
        fields = {"id": task["id"], "csrf": derived(token, "csrf"), "priority": self.rng.choice(["high", "low"]),
                  "reason": "torture", "force": "yes"}
        op = f"{self.name}-a{self.serial}"
        self.serial += 1
        self.log("begin", "action", op)
        status = self._post(port, f"/action/{kind}", urllib.parse.urlencode(fields).encode(), {
            "Cookie": f"loki_session={derived(token, 'session')}", "Origin": f"http://127.0.0.1:{port}",
            "Host": f"127.0.0.1:{port}", "Content-Type": "application/x-www-form-urlencoded"})
        self.log("end", "action", op) if status in (303, 404, 409) else self.log("refused", "action", op, str(status))


if __name__ == "__main__":
    root, seed, name, oplog = sys.argv[1:5]
    HttpWorker(root, int(seed), name, oplog).run()
