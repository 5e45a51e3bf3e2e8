"""What the command hooks say about ``loki serve`` on a tree whose Claude Code hooks go to it (docs/serve.md).

With ``loki hooks install --via http`` the tool-call events are answered by the server. Claude Code treats an
HTTP hook that cannot connect, or that is refused, as a non-blocking error: the call runs, nothing is
recorded, nothing is stopped. So the two hooks that stay commands keep the protocol from going quiet:

* SessionStart starts the server when none answers, and warns the model and the person when it cannot, or
  when the session's ``LOKI_SERVE_TOKEN`` is not the tree's (every HTTP hook would be refused);
* Stop tells the person when the server is not answering at the end of the session.
"""

from __future__ import annotations

import os

from loki.resident import files

OFF = "the 3-strike protocol is OFF for this session's tool calls (no failure recorded, no call stopped)"


def session_start_note(root: str) -> str | None:
    """Start the server if the tree wants one and none answers; the warning to give, if any."""
    if not files.wants_server(root):
        return None
    lines = []
    run, started, problem = files.ensure(root)
    if problem is not None:
        lines.append(f"WARNING: loki serve is not running and could not be started ({problem}): {OFF} until "
                     "`loki serve --detach` runs.")
    elif started and run is not None:
        lines.append(f"loki serve was not running: started it (pid {run.get('pid')}).")
    try:
        secret = files.token(root, create=False)
    except files.ServeFileError as exc:
        secret, lines = None, [*lines, f"WARNING: {exc.message}"]
    given = os.environ.get(files.TOKEN_ENV)
    if secret is not None and given != secret:
        state = "not set" if not given else "not this tree's token"
        lines.append(f"WARNING: {files.TOKEN_ENV} is {state} in this session's environment, so loki serve refuses "
                     f"its HTTP hooks: {OFF}. Start Claude Code from a shell that ran `eval \"$(loki serve --env)\"`.")
    return "\n".join(lines) or None


def stop_note(root: str) -> str | None:
    """The server's silence at the end of a session, in words (None: it answers, or the tree has none)."""
    if not files.wants_server(root) or files.probe(root) is not None:
        return None
    return ("loki serve is not answering: the tool calls since it went down ran without loki's hooks (no failure "
            "recorded, no call stopped). `loki serve --detach` starts it again; so does the next session.")
