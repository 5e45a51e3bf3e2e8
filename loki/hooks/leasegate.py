"""The PreToolUse hook's path-lease check (docs/leases.md, "Enforced where the edit happens").

Before a file-writing tool runs, the hook reads the live path leases and the claims of tasks with paths,
lock-free, from the tree (``state/path-leases.json``, ``queue/in-progress.json``, ``queue/landing.json``: a
verified task waiting to land keeps its paths), and decides from the target
path: free or held by this agent, nothing to say; held by someone else, the ``leases.enforce`` setting's
answer (``deny`` by default, ``ask``, ``warn``: context only, ``off``), naming the pattern, the holder, its task
and the expiry. A shared lease of someone else only warns. A Bash command that names a leased path warns:
a shell write cannot be attributed reliably (the git pre-commit guard is the net for those).

Codex CLI 0.169.0 edits files with its ``apply_patch`` tool, and its PreToolUse hook reports that call as
``tool_name: "apply_patch"`` with the whole patch in ``tool_input.command``, and honours a deny (checked with
the real CLI: tests/agents/test_codex_leases.py). The files are the patch's ``*** Add File:``, ``*** Update
File:``, ``*** Delete File:`` and ``*** Move to:`` lines (:func:`patch_paths`), each decided as an Edit's
target is. A patch sent through the shell (``apply_patch <<'EOF'`` in an ``exec_command``, which Codex runs
as its patch tool too) arrives as ``Bash``; its patch names its files just as well, so it is decided the same
way, not only warned about.

The agent is who ``LOKI_AGENT`` names (``loki work`` sets it for its command, and so for the agent CLI it
runs); without it the agent is "someone else" to every holder. Under ``loki serve`` the hook runs in the
server, whose environment is no session's: there the agent is what the request names (:data:`REQUEST_AGENT`,
set per request from the ``X-Loki-Agent`` header the HTTP hook fills from the session's ``LOKI_AGENT``), and
never the server's own environment.

Hot path: standard library, the pattern module and the clock only; any unreadable file is no answer (the
hook must never stop an agent because loki's own state is broken: ``loki validate`` says what is).
"""

from __future__ import annotations

import os
from contextvars import ContextVar

from loki.leases.hotcopy import DENIALS
from loki.storage import layout

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

WRITE_TOOLS = {
    "Edit": "file_path", "Write": "file_path", "MultiEdit": "file_path", "NotebookEdit": "notebook_path",  # Claude
    "write_file": "file_path", "replace": "file_path",  # Gemini CLI
}
"""Tool name -> the ``tool_input`` field naming the file it writes."""
PATCH_TOOLS = {"apply_patch": "command"}
"""Tool name -> the ``tool_input`` field holding a patch whose files it writes (Codex CLI)."""
PATCH_BEGIN = "*** Begin Patch"
PATCH_FILE_PREFIXES = ("*** Add File: ", "*** Update File: ", "*** Delete File: ", "*** Move to: ")
SHELL_TOOLS = ("Bash",)
MODES = ("deny", "ask", "warn", "off")
DEFAULT_MODE = "deny"
"""``leases.enforce``'s default (loki/config.py DEFAULTS says the same; the hot path does not import it)."""
IN_PROGRESS = "queue/in-progress.json"
LANDING = "queue/landing.json"
"""Verified tasks waiting for their commit to land: a landing task with paths still holds them (docs/leases.md)."""
REQUEST_AGENT: ContextVar[tuple[str | None] | None] = ContextVar("loki_request_agent", default=None)
"""The agent of the request being answered by ``loki serve`` (a 1-tuple: ``(None,)`` is a request that names
no agent, "someone else"); unset (None) outside a request, where ``LOKI_AGENT`` says."""


def agent_identity() -> str | None:
    """Who is asking: the request's agent under ``loki serve``, else ``LOKI_AGENT``; None is "someone else"."""
    given = REQUEST_AGENT.get()
    if given is not None:
        return given[0]
    return os.environ.get("LOKI_AGENT") or None


def _read(root: str, rel: str) -> Any:
    """A state file's content, read the hot path's way (bounded, no symlink followed); None when absent or
    unusable."""
    from loki.strikes import view as strikeview

    try:
        return strikeview.read_json(root, rel)
    except strikeview.Unreadable:
        return None


def mode(config: dict[str, Any]) -> str:
    section = config.get("leases")
    value = section.get("enforce") if isinstance(section, dict) else None
    return value if value in MODES else DEFAULT_MODE


def holders(root: str, now: str) -> list[dict[str, Any]]:
    """The live leases and task claims with paths, as lease-shaped records (unvalidated; odd ones skipped),
    read from the document itself: the linear way, when there is no usable index."""
    found: list[dict[str, Any]] = []
    doc = _read(root, layout.LEASES)
    if isinstance(doc, dict) and isinstance(doc.get("leases"), list):
        found.extend(lease for lease in doc["leases"] if _live(lease, now))
    return found + claims(root, now)


def _live(holder: Any, now: str) -> bool:
    return (isinstance(holder, dict) and isinstance(holder.get("expires_at"), str) and holder["expires_at"] > now
            and isinstance(holder.get("patterns"), list))


def claims(root: str, now: str) -> list[dict[str, Any]]:
    """The claims of tasks with paths in ``queue/in-progress.json`` and the landing tasks with paths in
    ``queue/landing.json`` (a file tree), lease-shaped, as ``loki.leases.leases.task_holders`` makes them.
    Each file is read only when it exists: a tree with no task landing pays one ``stat`` for it."""
    found: list[dict[str, Any]] = []
    for task in _tasks_with_paths(root, IN_PROGRESS):
        until = task.get("lease_until")
        if isinstance(until, str) and until > now and task.get("claimed_by"):
            found.append({"lease_id": f"task:{task.get('id')}", "agent": task["claimed_by"],
                          "patterns": task["paths"], "exclusive": True, "task": task.get("id"),
                          "expires_at": until, "claim": True})
    for task in _tasks_with_paths(root, LANDING):
        landing = task.get("landing")
        deadline = landing.get("deadline") if isinstance(landing, dict) else None
        if isinstance(deadline, str) and deadline > now:
            found.append({"lease_id": f"task:{task.get('id')}", "agent": task.get("completed_by") or "(nobody)",
                          "patterns": task["paths"], "exclusive": True, "task": task.get("id"),
                          "expires_at": deadline, "claim": True, "landing": True})
    return found


def _tasks_with_paths(root: str, rel: str) -> list[dict[str, Any]]:
    """The tasks of the queue file ``rel`` that declare paths (none when it is absent or unusable)."""
    queue = _read(root, rel) if os.path.exists(os.path.join(root, rel)) else None
    if not isinstance(queue, dict) or not isinstance(queue.get("tasks"), list):
        return []
    return [task for task in queue["tasks"]
            if isinstance(task, dict) and isinstance(task.get("paths"), list) and task["paths"]]


class Known:
    """The holders the hook knows of: from the index (:mod:`loki.leases.hotcopy`: only the groups a path
    may be in are parsed), else from the document, every one. ``stale``: on a database tree, how old this
    machine's copy is when it is older than :data:`STALE_AFTER` (else None)."""

    def __init__(self, root: str, now: str) -> None:
        from loki.leases import hotcopy
        from loki.strikes import view as strikeview

        self.hot = strikeview.hot_root(root)
        self.now = now
        self.copy = self.hot != root
        self.stale: int | None = None
        self.index = hotcopy.open_index(self.hot, None if self.copy else hotcopy.document_path(root))
        self._claims: list[dict[str, Any]] = []
        self._all: list[dict[str, Any]] | None = None
        if self.index is not None:
            if not self.index.claims:
                self._claims = claims(self.hot, now)
            if self.copy:
                self.stale = _age(self.index.refreshed_at, now)
        elif not self.copy:
            self._all = holders(self.hot, now)
        else:
            self._all = []  # a database tree with no copy here yet: nothing is known (the next refresh writes it)

    def any(self) -> bool:
        if self._all is not None:
            return bool(self._all)
        assert self.index is not None
        return self.index.count > 0 or bool(self._claims)

    def for_path(self, rel: str) -> list[dict[str, Any]]:
        """The live holders that may cover ``rel`` (a superset: :func:`blocking` decides)."""
        if self._all is not None:
            return self._all
        assert self.index is not None
        return [h for h in self.index.candidates(rel) if _live(h, self.now)] + self._claims


STALE_AFTER = 60
"""Seconds after which this machine's copy of the leases (a database tree) is said to be old: a watcher
running here refreshes it within a second or two of a change and every few seconds besides."""


def _age(refreshed_at: str | None, now: str) -> int | None:
    """Seconds since ``refreshed_at`` when over :data:`STALE_AFTER` (a copy with no time: very old)."""
    if refreshed_at is None:
        return 10**9
    try:
        age = _epoch(now) - _epoch(refreshed_at)
    except ValueError:
        return 10**9
    return age if age > STALE_AFTER else None


def _epoch(stamp: str) -> int:
    """Seconds since 1970 of ``YYYY-MM-DDTHH:MM:SS...`` (UTC), without importing datetime or calendar."""
    year, month, day = int(stamp[0:4]), int(stamp[5:7]), int(stamp[8:10])
    hour, minute, second = int(stamp[11:13]), int(stamp[14:16]), int(stamp[17:19])
    y = year - (month <= 2)
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    days = era * 146097 + doe - 719468
    return days * 86400 + hour * 3600 + minute * 60 + second


def relative(path: str, repo: str, cwd: str) -> str | None:
    """``path`` relative to the repository, or None when it is outside it."""
    full = os.path.normpath(path if os.path.isabs(path) else os.path.join(cwd, path))
    top = os.path.normpath(repo)
    if full == top or not full.startswith(top.rstrip("/") + "/"):
        return None
    return full[len(top.rstrip("/")) + 1:]


def blocking(found: Any, rel: str, agent: str | None) -> dict[str, Any] | None:
    """The holder of another agent whose patterns cover ``rel`` (an exclusive one first), or None.
    ``found``: a :class:`Known`, or a list of holders."""
    from loki.leases.patterns import covers, normalise

    shared = None
    names = rel.split("/")
    first = names[0]
    for holder in (found.for_path(rel) if isinstance(found, Known) else found):
        if agent is not None and holder.get("agent") == agent:
            continue
        for text in holder["patterns"]:
            if not isinstance(text, str):
                continue
            head = text.partition("/")[0]
            if head != first and not ("*" in head or "?" in head or "[" in head or "\\" in head):
                continue  # the cheapest filter: another top-level folder
            if not _may_cover(text, names):
                continue  # the cheap filter, before any pattern is compiled: most leases are elsewhere
            try:
                pattern = normalise(text)
            except Exception:
                continue
            if covers(pattern, rel):
                hit = {**holder, "overlap": [rel, text]}
                if holder.get("exclusive", True):
                    return hit
                shared = shared or hit
    return shared


def _may_cover(text: str, names: list[str]) -> bool:
    """False when the stored (normalised) pattern ``text`` cannot cover the path ``names``: its leading
    segments without a wildcard are not the path's leading names. Every path a pattern covers starts with
    those segments, so this never hides a holder."""
    for index, segment in enumerate(text.split("/")):
        if "*" in segment or "?" in segment or "[" in segment or "\\" in segment:
            return True
        if index >= len(names) or names[index] != segment:
            return False
    return True


def check(payload: dict[str, Any], root: str, now: str) -> dict[str, Any] | None:
    """The PreToolUse answer for a path lease (Claude Code's shape), or None."""
    tool = payload.get("tool_name")
    tool_input = payload.get("tool_input")
    if not isinstance(tool_input, dict) or not isinstance(tool, str):
        return None
    field = WRITE_TOOLS.get(tool)
    patch = tool_input.get(PATCH_TOOLS[tool]) if tool in PATCH_TOOLS else None
    if tool in SHELL_TOOLS and _shell_patch(tool_input.get("command")):
        patch = tool_input["command"]
    if field is None and patch is None and tool not in SHELL_TOOLS:
        return None
    from loki.strikes import view as strikeview

    found = Known(root, now)  # first: most trees hold no lease, and then the config need not be read
    if not found.any():
        return None
    setting = mode(strikeview.read_config(found.hot))
    if setting == "off":
        return None
    repo = os.path.dirname(os.path.abspath(root))
    cwd = payload.get("cwd") if isinstance(payload.get("cwd"), str) else os.getcwd()
    agent = agent_identity()
    if isinstance(patch, str):
        holder = _first_holder(patch_paths(patch), found, repo, str(cwd), agent)
    elif field is None:
        return _shell(tool_input.get("command"), found, repo, str(cwd), agent)
    else:
        target = tool_input.get(field)
        holder = _first_holder([target] if isinstance(target, str) and target else [], found, repo, str(cwd), agent)
    if holder is None:
        if found.stale is not None:
            return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "additionalContext": stale_line(found.stale)}}
        return None
    text = message(holder, agent)
    decision = setting if holder.get("exclusive", True) else "warn"
    if found.stale is not None:
        text += " " + stale_line(found.stale)[len("loki: "):]
    if decision != "warn":
        record(found.hot, {"event": "lease", "change": "denied" if decision == "deny" else "asked",
                           "timestamp": now, "path": holder["overlap"][0], "agent": agent,
                           "holder": holder.get("agent"),
                           "lease_id": holder.get("lease_id"), "task": holder.get("task"),
                           "pattern": holder["overlap"][1], "tool": tool})
    if decision == "warn":
        return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "additionalContext": text}}
    return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": decision,
                                   "permissionDecisionReason": text}}


def stale_line(age: int) -> str:
    minutes = f"{age // 60} min" if age >= 120 else f"{age} s"
    return (f"loki: this machine's copy of the path leases is {minutes} old (no `loki watch` refreshing it "
            "here?): a lease taken on another machine since then is not known here; "
            "the git pre-commit guard checks the database.")


def record(hot: str, event: dict[str, Any]) -> None:
    """Append one line to :data:`DENIALS` (one ``write`` on an ``O_APPEND`` descriptor: lines from
    concurrent hooks never interleave); a failure is said on stderr and costs the answer nothing."""
    import json

    path = os.path.join(hot, *DENIALS.split("/"))
    line = (json.dumps(event, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8", "replace")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except FileNotFoundError:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            import sys

            sys.stderr.write(f"loki hook: {DENIALS} not written ({exc.strerror})\n")
            return
    except OSError as exc:
        import sys

        sys.stderr.write(f"loki hook: {DENIALS} not written ({exc.strerror})\n")
        return
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def _shell_patch(command: Any) -> bool:
    """A shell command that runs Codex's patch tool on a patch it carries (``apply_patch <<'EOF' ...``)."""
    return (isinstance(command, str) and PATCH_BEGIN in command
            and any(word in command for word in ("apply_patch", "applypatch")))


def patch_paths(patch: str) -> list[str]:
    """The files an ``apply_patch`` patch writes: its add, update, delete and move-to lines, in order."""
    found = []
    for line in patch.splitlines():
        for prefix in PATCH_FILE_PREFIXES:
            if line.startswith(prefix):
                path = line[len(prefix):].strip()
                if path and path not in found:
                    found.append(path)
    return found


def _first_holder(targets: list[str], found: Known, repo: str, cwd: str,
                  agent: str | None) -> dict[str, Any] | None:
    """Another agent's holder of the first target that has one (an exclusive one before any shared one)."""
    shared = None
    for target in targets:
        rel = relative(target, repo, cwd)
        if rel is None:
            continue
        holder = blocking(found, rel, agent)
        if holder is not None and holder.get("exclusive", True):
            return holder
        shared = shared or holder
    return shared


def message(holder: dict[str, Any], agent: str | None) -> str:
    """Who holds it, for which task, until when, and what to do: the strike messages' discipline (the fact,
    then the next step). Names an agent wrote are escaped."""
    from loki.leases.leases import describe_holder

    you = f"you are {agent}" if agent else "this session has no agent name (LOKI_AGENT), so it is not the holder"
    return (f"loki: {describe_holder(holder)}; {you}. Work on other files, or wait until the lease ends; "
            "a person can end it with `loki lease break`.")


def _shell(command: Any, found: Known, repo: str, cwd: str, agent: str | None) -> dict[str, Any] | None:
    if not isinstance(command, str):
        return None
    for word in command.split():
        word = word.strip("'\"<>|;&()")
        if not word or word.startswith("-") or ("/" not in word and "." not in word):
            continue
        rel = relative(word, repo, cwd)
        if rel is None:
            continue
        holder = blocking(found, rel, agent)
        if holder is not None and holder.get("exclusive", True):
            text = (f"loki: this command names {rel}, which is leased to another agent "
                    f"({message(holder, agent)[len('loki: '):]}) A shell write is not checked before it runs: "
                    "leave that file alone.")
            return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "additionalContext": text}}
    return None
