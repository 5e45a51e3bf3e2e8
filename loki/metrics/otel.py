"""loki's counters and gauges, exported with the OpenTelemetry SDK over OTLP/HTTP (docs/metrics.md).

Imported only when :func:`loki.metrics.endpoint.configured` names an endpoint (the ``loki[otel]`` extra
provides the SDK): ``loki work`` makes one :class:`Metrics` and reports what happens to each claim; the gauges
are read from the store when the SDK collects (at the end of ``loki work``, and every minute meanwhile).

Counters (cumulative, per ``loki work`` process): ``loki.claims`` {agent, type}, ``loki.completions``
{agent, type}, ``loki.failures`` {agent, type, class}, ``loki.dead_letters`` {type}, ``loki.spend`` (USD)
{agent, type, model}, ``loki.tokens`` {agent, type, model, kind}. Gauges (the shared state, from any machine):
``loki.queue.depth`` {state}, ``loki.breakers`` {state}, ``loki.strikes`` (tool calls with strikes),
``loki.leases.expired`` (tasks held past their lease, not yet requeued).

An endpoint that cannot be reached never stops loki: the export fails, ``notify`` says so once, the work goes
on, and the SDK's own log lines are kept off the terminal.
"""

from __future__ import annotations

import logging

from loki.clock import format_ts
from loki.storage import layout

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import Any

    from loki.storage.state import StateStore as Store

QUEUE_STATES = (*layout.QUEUE_STATES, "dead-letter", "abandoned")
TOKEN_KINDS = ("input", "output", "cache_read", "cache_creation")


class Metrics:
    """The instruments of one process, exporting to ``endpoint``."""

    def __init__(self, store: Store, endpoint: str, notify: Callable[[str], None]) -> None:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.metrics import CallbackOptions, Observation
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import MetricExportResult, PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource

        quiet = logging.getLogger("opentelemetry")  # its failures are said once, by notify, not per batch
        quiet.addHandler(logging.NullHandler())
        quiet.propagate = False
        self.store = store
        self.endpoint = endpoint
        self._notify = notify
        self._said = False
        exporter = OTLPMetricExporter(endpoint=endpoint)
        original = exporter.export

        def export(metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any) -> Any:
            try:
                result = original(metrics_data, timeout_millis=timeout_millis, **kwargs)
            except Exception:  # the SDK's contract is a result; a transport that raises is a failure too
                result = MetricExportResult.FAILURE
            if result != MetricExportResult.SUCCESS:
                self._unreachable()
            return result

        exporter.export = export  # type: ignore[method-assign,assignment]
        self._reader = PeriodicExportingMetricReader(exporter, export_interval_millis=60_000)
        self._provider = MeterProvider(resource=Resource.create({"service.name": "loki"}),
                                       metric_readers=[self._reader])
        meter = self._provider.get_meter("loki")
        self.claims = meter.create_counter("loki.claims", unit="{claim}", description="tasks claimed")
        self.completions = meter.create_counter("loki.completions", unit="{task}", description="tasks completed")
        self.failures = meter.create_counter("loki.failures", unit="{attempt}", description="failed attempts")
        self.dead_letters = meter.create_counter("loki.dead_letters", unit="{task}",
                                                 description="tasks moved to the dead-letter queue")
        self.spend = meter.create_counter("loki.spend", unit="USD", description="dollars the agents reported")
        self.tokens = meter.create_counter("loki.tokens", unit="{token}", description="tokens the agents reported")

        def depth(options: CallbackOptions) -> Iterable[Observation]:
            view = self.store.tasks().view(QUEUE_STATES)
            return [Observation(len(view[state]), {"state": state}) for state in QUEUE_STATES]

        def breakers(options: CallbackOptions) -> Iterable[Observation]:
            from loki.breakers.breakers import Breakers

            counts = {"CLOSED": 0, "OPEN": 0, "HALF_OPEN": 0}
            for status in Breakers(self.store).status():
                counts[status.state.value] += 1
            return [Observation(count, {"state": state}) for state, count in counts.items()]

        def strikes(options: CallbackOptions) -> Iterable[Observation]:
            total = 0
            for name in self.store.list(layout.STRIKES_DIR):
                if name.endswith(".json"):
                    doc = self.store.read(f"{layout.STRIKES_DIR}/{name}")
                    keys = doc.get("keys", {}) if isinstance(doc, dict) else {}
                    total += sum(1 for entry in keys.values() if isinstance(entry, dict)
                                 and entry.get("strike_count", 0) > 0)
            return [Observation(total)]

        def expired(options: CallbackOptions) -> Iterable[Observation]:
            now = format_ts(self.store.clock.now())
            held = self.store.tasks().view(["in-progress"])["in-progress"]
            return [Observation(sum(1 for t in held if str(t.get("lease_until") or "9") < now))]

        meter.create_observable_gauge("loki.queue.depth", [depth], unit="{task}", description="tasks per state")
        meter.create_observable_gauge("loki.breakers", [breakers], unit="{breaker}", description="breakers per state")
        meter.create_observable_gauge("loki.strikes", [strikes], unit="{call}", description="tool calls with strikes")
        meter.create_observable_gauge("loki.leases.expired", [expired], unit="{task}",
                                      description="tasks held past their lease, not yet requeued")

    def _unreachable(self) -> None:
        if not self._said:
            self._said = True
            self._notify(f"metrics: could not export to {self.endpoint}; loki goes on without them (said once)")

    # -- what happens to a claim ---------------------------------------------------------------------

    def claimed(self, agent: str, task: dict[str, Any]) -> None:
        self.claims.add(1, {"agent": agent, "type": str(task.get("type") or "general")})

    def completed(self, agent: str, task: dict[str, Any], usage: dict[str, Any] | None) -> None:
        self.completions.add(1, {"agent": agent, "type": str(task.get("type") or "general")})
        self.spent(agent, task, usage)

    def failed(self, agent: str, task: dict[str, Any], error_class: str, state: str | None,
               usage: dict[str, Any] | None) -> None:
        type_ = str(task.get("type") or "general")
        self.failures.add(1, {"agent": agent, "type": type_, "class": error_class})
        if state == "dead-letter":
            self.dead_letters.add(1, {"type": type_})
        self.spent(agent, task, usage)

    def spent(self, agent: str, task: dict[str, Any], usage: dict[str, Any] | None) -> None:
        if not usage:
            return
        labels = {"agent": agent, "type": str(task.get("type") or "general"), "model": str(usage.get("model") or "")}
        if usage.get("usd") is not None:
            self.spend.add(float(usage["usd"]), labels)
        for kind in TOKEN_KINDS:
            count = int(usage.get(f"{kind}_tokens") or 0)
            if count:
                self.tokens.add(count, {**labels, "kind": kind})

    def shutdown(self) -> None:
        """Collect and export once more (the gauges read now), then stop the SDK's thread."""
        try:
            self._provider.shutdown()
        except Exception:  # an exporter that fails at the end must not change loki work's exit
            self._unreachable()
