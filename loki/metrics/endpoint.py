"""Is an OTLP metrics endpoint configured? The standard variables, read without importing OpenTelemetry."""

from __future__ import annotations

import os

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Mapping


def configured(environ: Mapping[str, str] | None = None) -> str | None:
    """The metrics endpoint: ``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`` as it is, else
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` + ``/v1/metrics`` (the OTLP/HTTP specification's rule); None when neither is
    set, or ``OTEL_METRICS_EXPORTER`` is ``none``."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_METRICS_EXPORTER", "").strip().lower() == "none":
        return None
    own = env.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "").strip()
    if own:
        return own
    base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    return base.rstrip("/") + "/v1/metrics" if base else None
