"""The PreToolUse hook's path-lease check (docs/leases.md, "Enforced where the edit happens").

Before a file-writing tool runs, the hook reads the live path leases and the claims of tasks with paths,
lock-free, from the tree (``state/path-leases.json``, ``queue/in-progress.json``), and decides from the target
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
    """The live leases and task claims with paths, as lease-shaped records (unvalidated; odd ones skipped)."""
    found: list[dict[str, Any]] = []
    doc = _read(root, layout.LEASES)
    if isinstance(doc, dict) and isinstance(doc.get("leases"), list):
        found.extend(lease for lease in doc["leases"] if isinstance(lease, dict)
                     and isinstance(lease.get("expires_at"), str) and lease["expires_at"] > now
                     and isinstance(lease.get("patterns"), list))
    queue = _read(root, IN_PROGRESS) if found or os.path.exists(os.path.join(root, IN_PROGRESS)) else None
    if isinstance(queue, dict) and isinstance(queue.get("tasks"), list):
        for task in queue["tasks"]:
            if not isinstance(task, dict) or not isinstance(task.get("paths"), list) or not task["paths"]:
                continue
            until = task.get("lease_until")
            if isinstance(until, str) and until > now and task.get("claimed_by"):
                found.append({"lease_id": f"task:{task.get('id')}", "agent": task["claimed_by"],
                              "patterns": task["paths"], "exclusive": True, "task": task.get("id"),
                              "expires_at": until, "claim": True})
    return found


def relative(path: str, repo: str, cwd: str) -> str | None:
    """``path`` relative to the repository, or None when it is outside it."""
    full = os.path.normpath(path if os.path.isabs(path) else os.path.join(cwd, path))
    top = os.path.normpath(repo)
    if full == top or not full.startswith(top.rstrip("/") + "/"):
        return None
    return full[len(top.rstrip("/")) + 1:]


def blocking(found: list[dict[str, Any]], rel: str, agent: str | None) -> dict[str, Any] | None:
    """The holder of another agent whose patterns cover ``rel`` (an exclusive one first), or None."""
    from loki.leases.patterns import covers, normalise

    shared = None
    names = rel.split("/")
    first = names[0]
    for holder in found:
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

    hot = strikeview.hot_root(root)
    found = holders(hot, now)  # first: most trees hold no lease, and then the config need not be read
    if not found:
        return None
    setting = mode(strikeview.read_config(hot))
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
        return None
    text = message(holder, agent)
    decision = setting if holder.get("exclusive", True) else "warn"
    if decision == "warn":
        return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "additionalContext": text}}
    return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": decision,
                                   "permissionDecisionReason": text}}


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


def _first_holder(targets: list[str], found: list[dict[str, Any]], repo: str, cwd: str,
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


def _shell(command: Any, found: list[dict[str, Any]], repo: str, cwd: str, agent: str | None) -> dict[str, Any] | None:
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
