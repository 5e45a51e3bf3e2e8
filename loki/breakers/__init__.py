"""Circuit breakers (``loki breaker``) and ``loki run``, the command wrapped in one.

Empty on purpose: ``loki breaker check`` has a cold-start budget and imports only the modules it needs
(docs/STYLE.md).
"""
