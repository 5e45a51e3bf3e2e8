"""Metrics for people who already have dashboards: OTLP export of loki's counters and gauges (docs/metrics.md).
Nothing here is imported unless an OTLP endpoint is configured."""
