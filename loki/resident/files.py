"""``.loki/serve/``: this machine's resident server for this tree (docs/serve.md).

* ``server.json``: ``{"version": 1, "port": N, "hooks": "http"|"command"}``, the tree's port, chosen once
  (or by ``--port``) and kept, since Claude Code's HTTP hook settings name it; ``hooks`` says whether the
  tree's Claude Code hooks go to the server (then SessionStart starts it when it is down).
* ``token``: the per-tree secret every request carries (mode 0600; never written into agent settings).
* ``run.json``: the running server (pid, host, port, start time), written once it listens, removed when it
  stops. A server killed with SIGKILL leaves it behind: :func:`probe` never trusts it without an answer.
* ``serve.lock``: held (``flock``) by the running server for its whole life: a second one on this tree
  cannot take it and says where the first one is; the kernel drops it with the process.
* ``serve.log``: what a detached server says.

Machine-local like ``cache/``: nothing here is shared state, ``loki migrate`` leaves it alone.
"""

from __future__ import annotations

import json
import os
import secrets
import time

from loki.errors import LokiError

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any

SERVE_DIR = "serve"
SETTINGS_FILE = f"{SERVE_DIR}/server.json"
TOKEN_FILE = f"{SERVE_DIR}/token"
RUN_FILE = f"{SERVE_DIR}/run.json"
LOCK_FILE = f"{SERVE_DIR}/serve.lock"
LOG_FILE = f"{SERVE_DIR}/serve.log"
TOKEN_ENV = "LOKI_SERVE_TOKEN"
"""The environment variable Claude Code's HTTP hooks read the token from (``allowedEnvVars``)."""
TOKEN_HEADER = "X-Loki-Token"
AGENT_ENV = "LOKI_AGENT"
AGENT_HEADER = "X-Loki-Agent"
"""The header Claude Code's HTTP hooks fill from the session's ``LOKI_AGENT``: the server answers for that
agent (its own environment names none: :func:`start` removes ``LOKI_AGENT`` from it)."""
DEFAULT_HOST = "127.0.0.1"
PROBE_TIMEOUT = 1.0
CONFLICT_EXIT = 4
"""``loki serve``'s exit when another server holds the tree (:class:`loki.errors.Conflict`)."""
START_TIMEOUT = 15.0
"""How long ``start_detached`` waits for a new server to answer (imports + bind: ~0.5 s here)."""


class ServeFileError(LokiError):
    """A file in ``.loki/serve/`` is not what loki wrote, or the server would not start; the message says which."""

    def __init__(self, message: str) -> None:
        super().__init__(message)


def path(root: str, rel: str) -> str:
    return os.path.join(root, *rel.split("/"))


def _write(root: str, rel: str, text: str) -> None:
    from loki.storage.store import atomic_write

    target = path(root, rel)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    atomic_write(target, text.encode("utf-8"))  # a temp file, fsynced, renamed over it (0644: not a secret)


def _read_json(root: str, rel: str) -> dict[str, Any] | None:
    try:
        with open(path(root, rel), "rb") as handle:
            data = handle.read(64 * 1024)
    except FileNotFoundError:
        return None
    try:
        doc = json.loads(data)
    except ValueError:
        raise ServeFileError(f"{path(root, rel)} is not valid JSON; delete it (loki serve writes it again)") from None
    if not isinstance(doc, dict):
        raise ServeFileError(f"{path(root, rel)} is not a JSON object; delete it (loki serve writes it again)")
    return doc


# -- the token ------------------------------------------------------------------------------------


def token(root: str, *, create: bool = True) -> str | None:
    """The tree's token: 32 random bytes, URL-safe; made on first use (``create``)."""
    try:
        with open(path(root, TOKEN_FILE), encoding="ascii") as handle:
            if os.fstat(handle.fileno()).st_mode & 0o077:
                # A token file from before it was made 0600 (or chmod'ed since): readable by others, it opens
                # the board and the hooks to them. Tightened where it is read, so every use closes it.
                os.fchmod(handle.fileno(), 0o600)
            found = handle.read(200).strip()
    except FileNotFoundError:
        found = ""
    except UnicodeDecodeError:
        raise ServeFileError(f"{path(root, TOKEN_FILE)} is not a token; delete it to make a new one") from None
    if found:
        return found
    if not create:
        return None
    made = secrets.token_urlsafe(32)
    return _create_token(root, made, replace=os.path.exists(path(root, TOKEN_FILE)))


def _create_token(root: str, made: str, *, replace: bool) -> str:
    """Publish ``made`` as the token: written to a temp file created 0600 (never readable by others, even for
    an instant), then linked into place, which fails if a racer published first: then the racer's token is
    the one (two first callers end with one token). ``replace``: the file there is empty, written over."""
    from loki.storage.store import fsync_dir

    target = path(root, TOKEN_FILE)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    tmp = f"{target}.{os.getpid()}.{secrets.token_hex(6)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            os.write(fd, (made + "\n").encode("ascii"))
            os.fsync(fd)
        finally:
            os.close(fd)
        if replace:
            os.replace(tmp, target)
        else:
            try:
                os.link(tmp, target)
            except FileExistsError:
                found = token(root, create=False)
                if found is None:  # published empty by something else: ours replaces it
                    os.replace(tmp, target)
                    found = made
                return found
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
    fsync_dir(os.path.dirname(target))
    return made


def token_matches(expected: str, given: str | None) -> bool:
    import hmac

    return given is not None and hmac.compare_digest(expected.encode(), given.encode("utf-8", "replace"))


# -- the tree's port and hook mode --------------------------------------------------------------


def settings(root: str) -> dict[str, Any]:
    return _read_json(root, SETTINGS_FILE) or {}


def configured_port(root: str) -> int | None:
    port = settings(root).get("port")
    return port if isinstance(port, int) and not isinstance(port, bool) and 0 < port < 65536 else None


def choose_port(root: str, port: int | None = None, host: str = DEFAULT_HOST) -> int:
    """``port`` (kept as the tree's), else the tree's, else a free one the OS picks (kept)."""
    known = configured_port(root)
    if port is None and known is not None:
        return known
    if port is None:
        import socket

        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host if host != "0.0.0.0" else DEFAULT_HOST, 0))
            port = int(sock.getsockname()[1])
    if port != known:
        _write(root, SETTINGS_FILE, json.dumps({**settings(root), "version": 1, "port": port}, indent=2) + "\n")
    return port


def set_hooks_mode(root: str, mode: str) -> None:
    """``"http"``: the tree's Claude Code hooks go to the server (SessionStart keeps it running)."""
    current = settings(root)
    if current.get("hooks") != mode and (mode == "http" or current):
        _write(root, SETTINGS_FILE, json.dumps({**current, "version": 1, "hooks": mode}, indent=2) + "\n")


def wants_server(root: str) -> bool:
    try:
        return settings(root).get("hooks") == "http"
    except ServeFileError:
        return True  # a broken file must not turn the warnings off


# -- the running server -------------------------------------------------------------------------


def write_run(root: str, pid: int, host: str, port: int) -> None:
    doc = {"version": 1, "pid": pid, "host": host, "port": port,
           "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    _write(root, RUN_FILE, json.dumps(doc, indent=2) + "\n")


def read_run(root: str) -> dict[str, Any] | None:
    try:
        return _read_json(root, RUN_FILE)
    except ServeFileError:
        return None


def remove_run(root: str, pid: int) -> None:
    """Remove ``run.json`` if it is ``pid``'s (a newer server's is left alone)."""
    run = read_run(root)
    if run is not None and run.get("pid") == pid:
        import contextlib

        with contextlib.suppress(FileNotFoundError):
            os.unlink(path(root, RUN_FILE))


def url_of(run: dict[str, Any]) -> str:
    host = str(run.get("host") or DEFAULT_HOST)
    shown = DEFAULT_HOST if host in ("0.0.0.0", "") else (f"[{host}]" if ":" in host else host)
    return f"http://{shown}:{run.get('port')}/"


def probe(root: str, timeout: float = PROBE_TIMEOUT) -> dict[str, Any] | None:
    """The running server's ``run.json`` if a server answers for this tree with its token, else None."""
    run = read_run(root)
    if run is None or not isinstance(run.get("port"), int):
        return None
    secret = token(root, create=False)
    if secret is None:
        return None
    import http.client

    host = str(run.get("host") or DEFAULT_HOST)
    connection = http.client.HTTPConnection(DEFAULT_HOST if host == "0.0.0.0" else host, run["port"], timeout=timeout)
    try:
        connection.request("GET", "/health", headers={TOKEN_HEADER: secret})
        response = connection.getresponse()
        body = response.read(64 * 1024)
        if response.status != 200:
            return None
        answer = json.loads(body)
    except (OSError, ValueError, http.client.HTTPException):
        return None
    finally:
        connection.close()
    if not isinstance(answer, dict) or answer.get("root") != os.path.realpath(root):
        return None
    return {**run, "pid": answer.get("pid", run.get("pid"))}


def start_detached(root: str, *, port: int | None = None, host: str | None = None,
                   timeout: float = START_TIMEOUT) -> dict[str, Any]:
    """Start ``loki serve`` for ``root`` in its own session, its output in ``serve.log``; wait until it
    answers. Raises :class:`ServeFileError` with the log's last line when it does not."""
    import subprocess
    import sys

    command = [sys.executable, "-m", "loki", "--root", root, "serve"]
    if port is not None:
        command += ["--port", str(port)]
    if host is not None:
        command += ["--host", host]
    os.makedirs(path(root, SERVE_DIR), exist_ok=True)
    with open(path(root, LOG_FILE), "ab") as log:
        # The server answers every session's hooks: no session's agent name may be its own (leasegate).
        env = {key: value for key, value in os.environ.items() if key != AGENT_ENV}
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                                 start_new_session=True, close_fds=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe(root, timeout=0.5)
        if found is not None:
            return found
        if child.poll() is not None and child.returncode != CONFLICT_EXIT:
            found = probe(root, timeout=0.5)
            if found is not None:
                return found
            raise ServeFileError(f"loki serve exited with status {child.returncode}: {_last_line(root)}")
        # Exit 4: another server holds the tree's lock (eight sessions starting at once each try): wait for it.
        time.sleep(0.05)
    raise ServeFileError(f"loki serve did not answer within {timeout:g} s (pid {child.pid}); see "
                         f"{path(root, LOG_FILE)}")


def _last_line(root: str) -> str:
    try:
        with open(path(root, LOG_FILE), "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 4096))
            lines = [line for line in handle.read().decode("utf-8", "replace").splitlines() if line.strip()]
    except OSError:
        return "no log"
    return lines[-1].strip() if lines else "no output"


def ensure(root: str) -> tuple[dict[str, Any] | None, bool, str | None]:
    """``(run, started, problem)``: the answering server (started now if none answered), or the reason."""
    found = probe(root)
    if found is not None:
        return found, False, None
    try:
        return start_detached(root), True, None
    except (ServeFileError, OSError) as exc:
        return None, False, str(exc)


def server_problem(root: str) -> str | None:
    """What ``loki doctor`` reports: the tree's hooks go to a server that does not answer (None: all well)."""
    if not wants_server(root) or probe(root) is not None:
        return None
    return ("loki serve is not answering, and this tree's Claude Code hooks go to it (`loki hooks install --via "
            "http`): tool calls run without the 3-strike protocol; `loki serve --detach` starts it")
