"""The answer to a shell's Tab, without typer: ``loki __complete SHELL ...`` (the scripts are in
:mod:`loki.cli.completion`).

A Tab must feel instant (target: at most 4x ``python -c pass``, bench/bench_cli.py), so this lane reads the
committed table of commands and options (:mod:`loki.cli.completiontable`) instead of building the typer
app, and opens the store only when the word being completed is a value the tree knows (a task id, an
agent, a breaker...). Anything that goes wrong yields no candidates: a completion never prints an error.

The shells hand over the words differently:

* bash: ``__complete bash --line LINE --breaks CHARS``, the line up to the cursor and ``COMP_WORDBREAKS``;
  readline replaces only the text after the last break character (``--format=js`` -> ``js``), so the
  candidates are cut to that part. Nothing printed lets ``complete -o default`` offer file names.
* zsh, fish: ``__complete zsh|fish -- WORD... CURRENT``; each candidate comes with its description
  (``value:description`` for zsh's ``_describe``, ``value<TAB>description`` for fish), and ``__files__``
  alone asks the shell for file names.
"""

from __future__ import annotations

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any

    from loki.storage.state import StateStore as Store

FILES = "__files__"
ACTIVE_STATES = ("pending", "in-progress", "blocked", "failed")
ROOT_OPTIONS = {"--root": "files"}  # the global option, accepted after any command too (loki/cli/app.py)


def main(args: list[str]) -> int:
    """``args``: what follows ``__complete``. Prints the candidates; always exit 0 (2 for a malformed call)."""
    import os
    import sys

    if not args or args[0] not in ("bash", "zsh", "fish"):
        sys.stderr.write("usage: loki __complete bash|zsh|fish (--line LINE [--breaks CHARS] | -- WORD...)\n")
        return 2
    shell, rest = args[0], args[1:]
    if shell == "bash":
        line = _value(rest, "--line") or ""
        breaks = _value(rest, "--breaks")
        words = split_line(line)
    else:
        words = rest[1:] if rest[:1] == ["--"] else rest
        breaks = None
    try:
        candidates, files = complete(words or [""], os.environ.get("LOKI_ROOT"))
    except Exception:  # a Tab never shows a traceback; LOKI_DEBUG shows what went wrong
        if os.environ.get("LOKI_DEBUG"):
            raise
        candidates, files = [], False
    sys.stdout.write(render(shell, candidates, files, (words or [""])[-1], breaks))
    return 0


def _value(args: list[str], option: str) -> str | None:
    return args[args.index(option) + 1] if option in args and args.index(option) + 1 < len(args) else None


def split_line(line: str) -> list[str]:
    """The words of a command line up to the cursor, the last one the word being completed ("" after a
    space). Quotes are honoured; an unfinished one is closed (the user is still typing it)."""
    import shlex

    words: list[str] = []
    for closing in ("", '"', "'"):
        try:
            words = shlex.split(line + closing)
            break
        except ValueError:
            continue
    else:
        words = line.split()
    if not line or line[-1] in " \t\n":
        words.append("")
    return words[1:] if words else [""]  # without the program's own name


def complete(words: list[str], env_root: str | None) -> tuple[list[tuple[str, str]], bool]:
    """``(candidates as (value, description), whether file names should be offered)`` for ``words``:
    the command line after ``loki``, the last one being completed."""
    from loki.cli.completiontable import TABLE

    path, root, positionals, expecting, ended = "", env_root, 0, None, False
    for word in words[:-1]:
        node: Any = TABLE[path]
        if expecting is not None:
            if expecting == "--root":
                root = word
            expecting = None
        elif word == "--":
            ended = True  # `loki run -- CMD ...`: the rest is the command's
        elif word.startswith("-") and len(word) > 1 and not ended:
            name, eq, value = word.partition("=")
            kind = node["options"].get(name, ROOT_OPTIONS.get(name))
            if name == "--root" and eq:
                root = value
            elif kind is not None and not eq:
                expecting = name
        elif positionals == 0 and word in node["subcommands"]:
            path = f"{path} {word}".strip()
        else:
            positionals += 1
    node = TABLE[path]
    current = words[-1]
    options = {**node["options"], **ROOT_OPTIONS}
    if ended:
        return [], True
    if expecting is not None:
        return values(options[expecting], current, root, path, words), options[expecting] == "files"
    if current.startswith("--") and "=" in current:
        name, _, value = current.partition("=")
        kind = options.get(name)
        found = values(kind, value, root, path, words) if kind else []
        return [(f"{name}={v}", d) for v, d in found], kind == "files"
    if current.startswith("-"):
        shown = node["options"] if path else options
        return [(o, node["option_help"].get(o, "")) for o in sorted(shown) if o.startswith(current)], False
    if node["subcommands"] and positionals == 0:
        return [(n, h) for n, h in node["subcommands"].items() if n.startswith(current)], False
    args = node["args"]
    if positionals < len(args):
        kind = args[positionals]
    elif args and args[-1].endswith("*"):
        kind = args[-1]
    else:
        return [], False
    kind = kind.rstrip("*")
    return values(kind, current, root, path, words), kind == "files"


def values(kind: str | None, prefix: str, root: str | None, path: str, words: list[str]) -> list[tuple[str, str]]:
    """The values of ``kind`` starting with ``prefix``: a fixed choice, or what the tree holds."""
    if kind is None or kind in ("text", "files"):
        return []
    if kind.startswith("choice:"):
        return [(v, "") for v in kind[len("choice:"):].split(",") if v.startswith(prefix)]
    if kind == "signal_type":
        from loki.signals.types import FIXED_TYPES, PURPOSES, SUBJECT_PREFIXES

        return [(t, PURPOSES.get(t, "")) for t in (*FIXED_TYPES, *SUBJECT_PREFIXES) if t.startswith(prefix)]
    from loki.storage.opening import open_store

    store = open_store(root)
    if kind == "signal_field":
        return _signal_fields(store, prefix, words)
    found = _from_tree(store, kind)
    return [(value, " ".join(str(text).split())[:60]) for value, text in found.items() if value.startswith(prefix)]


def _from_tree(store: Store, kind: str) -> dict[str, str]:
    """value -> description, for the kinds the tree answers."""
    from loki.storage import layout

    if kind.startswith("task:") or kind == "waiting":
        wanted = ("blocked,dead-letter" if kind == "waiting" else kind[len("task:"):]).split(",")
        found = _tasks(store, wanted)
        if kind == "waiting":  # an approval answers an open escalation: a resolved one is not offered
            found.update(_open_escalations(store))
        return found
    if kind == "agent":
        from loki.queue.agents import names

        return {name: "" for name in names(store)}
    if kind == "breaker":
        return {name: entry.get("state", "") for name, entry in store.read(layout.BREAKERS).items()}
    if kind == "lease":  # the live path leases, each described by its holder and patterns
        from loki.leases.leases import PathLeases

        return {lease["lease_id"]: f"{lease['agent']}: {' '.join(lease['patterns'])}"
                for lease in PathLeases(store).live()}
    if kind == "escalation:open":
        return _open_escalations(store)
    if kind == "escalation":
        return {n.removesuffix(".md"): "" for n in store.list(layout.ESCALATIONS_DIR) if n.endswith(".md")}
    if kind == "signal":
        return {n: "waiting" for n in store.list(layout.SIGNALS_DIR) if not n.startswith(".")}
    if kind in ("task_type", "label"):
        seen: dict[str, str] = {}
        for tasks in store.tasks().view(layout.QUEUE_STATES).values():
            for task in tasks:
                for value in ([task.get("type")] if kind == "task_type" else task.get("labels", [])):
                    if isinstance(value, str):
                        seen.setdefault(value, "")
        return seen
    if kind in ("strike", "branch"):
        seen = {}
        for name in store.list(layout.STRIKES_DIR):
            doc = store.read(f"{layout.STRIKES_DIR}/{name}") if name.endswith(".json") else None
            if isinstance(doc, dict):
                if kind == "branch":
                    seen[str(doc.get("branch"))] = ""
                else:
                    seen.update({key: entry.get("call", "") for key, entry in doc.get("keys", {}).items()})
        return seen
    return {}


def _open_escalations(store: Store) -> dict[str, str]:
    """The open escalations (their recorded state, loki/queue/escalations.py), each described by its title."""
    from loki.queue.escalations import list_escalations

    return {row["id"]: f"escalation: {row['title'] or row['trigger'] or ''}"
            for row in list_escalations(store, open_only=True)}


def _tasks(store: Store, states: list[str]) -> dict[str, str]:
    from loki.storage import layout

    hot = [s for s in states if s in layout.QUEUE_STATES or s == "all"]
    found: dict[str, str] = {}
    if hot:
        # "all": the tasks still in play; completed and cancelled ones (the bulk of a long-lived tree) are not
        # offered, so a Tab stays cheap: their ids can still be typed
        view = store.tasks().view(ACTIVE_STATES if "all" in hot else hot)
        found.update({t["id"]: t.get("title", "") for tasks in view.values() for t in tasks})
    if "dead-letter" in states or "all" in states:
        found.update({e["task_id"]: e.get("task_data", {}).get("title", "")
                      for e in store.tasks().dead_letter_doc().get("tasks", [])})
    return found


def _signal_fields(store: Store, prefix: str, words: list[str]) -> list[tuple[str, str]]:
    """``key=`` for each field of the signal type already on the line (``loki signal emit TYPE <Tab>``)."""
    from loki.signals.emit import fields

    signal_type = next((w for w in words[:-1] if w and w[0].isupper()), None)
    if signal_type is None:
        return []
    given = {w.split("=", 1)[0].rstrip(":") for w in words[:-1] if "=" in w}
    rows = fields(store, signal_type)["fields"]
    return [(f"{row['name']}=", ("required " if row["required"] else "") + row["type"]) for row in rows
            if not row["set_by_loki"] and not row["option"] and row["name"] not in given
            and row["name"].startswith(prefix)]


def render(shell: str, candidates: list[tuple[str, str]], files: bool, current: str, breaks: str | None) -> str:
    """What the shell's function reads, one candidate a line."""
    if shell == "bash":
        # readline replaces the text after the last word-break character of the current word
        cut = max((current.rfind(c) for c in (breaks if breaks is not None else "=:")), default=-1) + 1
        return "".join(value[cut:] + "\n" for value, _ in candidates if value.startswith(current[:cut]))
    if files and not candidates:
        return FILES + "\n"

    def clean(text: str) -> str:  # a description is a stored title: the shell shows it to a person
        from loki.text.textsafe import for_terminal

        return for_terminal(" ".join(text.replace("\t", " ").split()))

    if shell == "zsh":
        return "".join(value.replace("\\", "\\\\").replace(":", "\\:") + (f":{clean(text)}" if text else "") + "\n"
                       for value, text in candidates)
    return "".join(value + (f"\t{clean(text)}" if text else "") + "\n" for value, text in candidates)
