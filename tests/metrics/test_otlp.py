"""OTLP metrics (loki/metrics/, docs/metrics.md): a real ``loki work`` process exports to an OTLP/HTTP receiver on
127.0.0.1 that decodes the protobuf (opentelemetry-proto); names, attributes and values checked. An endpoint
that cannot be reached: loki keeps working and says so once. Without an endpoint, OpenTelemetry is never
imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from loki.metrics.endpoint import configured
from tests.helpers import cli

pytestmark = pytest.mark.slow  # real loki work processes exporting over HTTP: ~5 s

PY = sys.executable
REPO = Path(__file__).resolve().parents[2]
AGENT = """
import json, os, sys
n = int(os.environ["LOKI_TASK_ID"][1:])
print(json.dumps({"type": "result", "total_cost_usd": 0.25, "modelUsage": {"claude-sonnet-4-5": {}},
                  "usage": {"input_tokens": 10, "output_tokens": 20, "cache_read_input_tokens": 300}}))
sys.exit(1 if n == 3 else 0)
"""


class Receiver:
    """An OTLP/HTTP metrics receiver: every POST /v1/metrics decoded as an ExportMetricsServiceRequest."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
            ExportMetricsServiceRequest,
            ExportMetricsServiceResponse,
        )

        self.requests: list[Any] = []
        self.paths: list[str] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                receiver.paths.append(self.path)
                receiver.requests.append(ExportMetricsServiceRequest.FromString(body))
                reply = ExportMetricsServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def points(self) -> dict[str, list[tuple[dict[str, str], float]]]:
        """metric name -> [(attributes, value)] of the last export (cumulative counters, gauges read last)."""
        found: dict[str, list[tuple[dict[str, str], float]]] = {}
        last = self.requests[-1]
        for resource in last.resource_metrics:
            service = {a.key: a.value.string_value for a in resource.resource.attributes}
            assert service["service.name"] == "loki"
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    data = metric.sum if metric.HasField("sum") else metric.gauge
                    found[metric.name] = [
                        ({a.key: a.value.string_value for a in p.attributes},
                         p.as_double if p.HasField("as_double") else p.as_int) for p in data.data_points]
        return found


def spawn_work(root: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PY, "-m", "loki", "--root", str(root), "work", "--agent", "eng-1", "--", PY, "-c", AGENT],
                          cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env, "TMPDIR": str(root.parent)})


def test_loki_work_exports_counters_and_gauges_to_a_real_otlp_receiver(root: Path) -> None:
    for n in range(1, 5):
        extra = ["--max-attempts", "1"] if n == 3 else []
        assert cli(["queue", "add", f"task {n}", "--id", f"t{n}", "--type", "docs" if n % 2 else "feature",
                    *extra], root=root).code == 0
    assert cli(["breaker", "trip", "api/x"], root=root).code == 0
    with Receiver() as receiver:
        done = spawn_work(root, {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url})
    assert done.returncode == 1, done.stderr  # t3 failed (and dead-lettered)
    assert receiver.paths and set(receiver.paths) == {"/v1/metrics"}
    points = receiver.points()
    assert {(a["agent"], a["type"]): v for a, v in points["loki.claims"]} == {("eng-1", "docs"): 2,
                                                                              ("eng-1", "feature"): 2}
    assert {(a["agent"], a["type"]): v for a, v in points["loki.completions"]} == {("eng-1", "docs"): 1,
                                                                                   ("eng-1", "feature"): 2}
    assert points["loki.failures"] == [({"agent": "eng-1", "type": "docs", "class": "exit_status"}, 1)]
    assert points["loki.dead_letters"] == [({"type": "docs"}, 1)]
    spend = {(a["type"], a["model"]): v for a, v in points["loki.spend"]}
    assert spend == {("docs", "claude-sonnet-4-5"): 0.5, ("feature", "claude-sonnet-4-5"): 0.5}
    tokens = {(a["type"], a["kind"]): v for a, v in points["loki.tokens"]}
    assert tokens[("docs", "cache_read")] == 600 and tokens[("feature", "output")] == 40
    depth = {a["state"]: v for a, v in points["loki.queue.depth"]}
    assert depth["completed"] == 3 and depth["dead-letter"] == 1 and depth["pending"] == 0
    assert {a["state"]: v for a, v in points["loki.breakers"]}["OPEN"] == 1
    assert points["loki.leases.expired"] == [({}, 0)] and points["loki.strikes"] == [({}, 0)]


def test_an_unreachable_endpoint_is_said_once_and_loki_keeps_working(root: Path) -> None:
    for n in (1, 2):
        assert cli(["queue", "add", f"task {n}", "--id", f"t{n}"], root=root).code == 0
    with Receiver() as closed:
        url = closed.url  # a port that was just freed: nothing listens there any more
    done = spawn_work(root, {"OTEL_EXPORTER_OTLP_ENDPOINT": url, "OTEL_EXPORTER_OTLP_TIMEOUT": "1"})
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.splitlines() if "metrics:" in line]
    assert said == [f"loki work: metrics: could not export to {url}/v1/metrics; loki goes on without them "
                    "(said once)"]
    assert "Traceback" not in done.stderr and "Failed to export" not in done.stderr
    assert cli(["queue", "show", "t2", "--json"], root=root).json()["state"] == "completed"


def test_without_an_endpoint_opentelemetry_is_never_imported(root: Path) -> None:
    assert cli(["queue", "add", "t", "--id", "t1"], root=root).code == 0
    script = ("import sys, json\n"
              "from loki.storage.store import Store\n"
              "from loki.work.loop import Worker, WorkOptions\n"
              f"Worker(Store({str(root)!r}), WorkOptions(agent='a', command=['true'])).run_unguarded()\n"
              "from loki.cli.fast import queue_claim\n"
              "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('opentelemetry', 'google', "
              "'loki.metrics.otel')))))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run([PY, "-c", script], cwd=REPO, capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
    assert cli(["queue", "show", "t1", "--json"], root=root).json()["state"] == "completed"


@pytest.mark.parametrize(("env", "endpoint"), [
    ({}, None),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4318"}, "http://h:4318/v1/metrics"),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4318/"}, "http://h:4318/v1/metrics"),
    ({"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://m:9/x", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://h"}, "http://m:9/x"),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h", "OTEL_METRICS_EXPORTER": "none"}, None),
])
def test_the_endpoint_follows_the_standard_variables(env: dict[str, str], endpoint: str | None) -> None:
    assert configured(env) == endpoint
