"""The resident server's files in ``.loki/serve/`` and how to reach it, with the standard library only.

``loki serve`` (:mod:`loki.serve`) needs Starlette and uvicorn; the commands that only ask whether it runs,
start it, or name its port (the SessionStart and Stop hooks, ``loki doctor``, ``loki hooks install --via
http``) must not pay for them: they use this package (docs/serve.md).
"""
