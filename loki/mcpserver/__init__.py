"""loki's Model Context Protocol server (docs/mcp.md): the queue's holder verbs as a few small tools.

:mod:`loki.mcpserver.tools` is the tool set itself (names, descriptions, input schemas, and each call as
a thin use of the library the CLI uses), with no dependency on the SDK; :mod:`loki.mcpserver.server` puts
it on the official ``mcp`` SDK (the ``loki-state[mcp]`` extra), over stdio or as a streamable-HTTP ASGI app.
"""
