"""``loki serve``: one resident process per tree and machine answering Claude Code's hooks over HTTP
(docs/serve.md). Needs the ``serve`` extra (Starlette, uvicorn); nothing on a cold path imports it.
"""
