"""Commands that run without typer: ``breaker check``, ``signal emit``, ``queue claim``.

A shell loop puts ``loki breaker check api/claude`` in front of every API call, so its cold
start is what users feel (target: at most 8x ``python -c pass``). :mod:`loki.entry` hands
the arguments here before typer (~60 ms), rich (~50 ms) or jsonschema (~90 ms) is imported;
:class:`loki.breakers.breakers.Breakers` imports portalocker only when it has to take the lock.

Only the exact shape ``[--root R] breaker check NAME [--json]`` (``--root`` anywhere, as the
typer app accepts it) is handled here; anything else -- ``--help``, a ``--`` separator, an
unknown option -- returns None and typer handles it. Output and exit codes are the typer
command's: both print through :mod:`loki.cli.output` (:mod:`loki.cli.breaker` calls
:func:`~loki.cli.output.emit_check` too), and tests compare both.
"""

from __future__ import annotations

from loki.argv import split_root
from loki.cli.output import (
    emit_check,
    guarded,
    json_errors,
    note_similar_breaker,
    print_claim,
    print_emitted,
    resolve_format,
    write_error,
)

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any


def parse_breaker_check(args: list[str]) -> tuple[str | None, str, bool, bool] | None:
    """``(root, name, json_output, new)`` if ``args`` is a plain breaker check, else None."""
    split = split_root(args)
    if split is None:
        return None
    root, rest = split
    if rest[:2] != ["breaker", "check"]:
        return None
    tail = rest[2:]
    names = [arg for arg in tail if arg not in ("--json", "--new")]
    if len(names) != 1 or names[0].startswith("-"):
        return None
    return root, names[0], "--json" in tail, "--new" in tail


def breaker_check(args: list[str]) -> int | None:
    """Run ``loki breaker check`` if ``args`` is one; None means "not mine, ask typer"."""
    parsed = parse_breaker_check(args)
    if parsed is None:
        return None
    root, name, json_output, new = parsed

    def check() -> int:
        from loki.breakers.breakers import Breakers
        from loki.storage.opening import open_store

        breakers = Breakers(open_store(root))
        decision = breakers.check(name, new=new)
        code = emit_check(decision, json_output)
        if not decision.allowed:
            write_error(decision.error(), json_output)
        else:
            note_similar_breaker(breakers.similar(name), name, json_output)
        return code

    return guarded(check, json_output)


# -- loki signal emit ------------------------------------------------------------------------------

_EMIT_OPTIONS = {"--subject": "subject", "--task": "task_id", "--severity": "severity", "--agent": "agent",
                 "-a": "agent", "--data": "data"}


def parse_options(words: list[str], options: dict[str, str], *, repeatable: frozenset[str] = frozenset(),
                  positionals: bool = False, flags: dict[str, str] | None = None,
                  ) -> tuple[dict[str, Any], list[str], bool] | None:
    """``(option values, positional words, --json)`` of a fast lane's words; None for anything it does
    not know (``--help``, an unknown option, a missing value, an option given twice): typer's turn.
    ``flags`` maps options without a value to the key set to True."""
    values: dict[str, Any] = {}
    plain: list[str] = []
    json_output = False
    index = 0
    while index < len(words):
        word = words[index]
        # only long options take ``=VALUE``: click reads ``-a=bob`` as the value ``=bob``
        name, eq, inline = word.partition("=") if word.startswith("--") else (word, "", "")
        if word == "--json":
            json_output = True
        elif flags and word in flags:
            values[flags[word]] = True
        elif name in options:
            if eq:
                value = inline
            elif index + 1 < len(words):
                index += 1
                value = words[index]
            else:
                return None
            key = options[name]
            if key in repeatable:
                values.setdefault(key, []).append(value)
            elif key in values:
                return None  # given twice: typer says how it resolves that
            else:
                values[key] = value
        elif word.startswith("-") or not positionals:
            return None
        else:
            plain.append(word)
        index += 1
    return values, plain, json_output


def parse_signal_emit(args: list[str]) -> dict[str, Any] | None:
    """The parts of ``[--root R] signal emit TYPE [options] [key=value ...] [--json]``, or None.

    Options may come anywhere after ``emit`` (``--task T``, ``--task=T``); anything this does
    not know (``--help``, ``--``, an unknown option, a missing value) is left to typer.
    """
    split = split_root(args)
    if split is None:
        return None
    root, rest = split
    if rest[:2] != ["signal", "emit"]:
        return None
    options = parse_options(rest[2:], _EMIT_OPTIONS, positionals=True)
    if options is None or not options[1]:
        return None
    values, plain, json_output = options
    return {**values, "root": root, "json": json_output, "type": plain[0], "fields": plain[1:]}


def signal_emit(args: list[str]) -> int | None:
    """Run ``loki signal emit`` if ``args`` is one; None means "not mine, ask typer"."""
    parsed = parse_signal_emit(args)
    if parsed is None:
        return None
    json_output = bool(parsed["json"])

    def text(key: str) -> str | None:
        value = parsed.get(key)
        return value if isinstance(value, str) else None

    def run_emit() -> int:
        from loki.signals.emit import emit, fields_from
        from loki.storage.opening import open_store

        fields = fields_from(text("data"), [str(f) for f in parsed["fields"]])
        result = emit(open_store(text("root")), str(parsed["type"]), fields, subject=text("subject"),
                      task_id=text("task_id"), severity=text("severity"), agent=text("agent"), known_task=True)
        print_emitted(result, json_output)
        return 0

    return guarded(run_emit, json_output)


# -- loki queue claim ------------------------------------------------------------------------------

_CLAIM_OPTIONS = {"--agent": "agent", "-a": "agent", "--type": "types", "--lease": "lease", "--format": "format",
                  "--label": "labels", "-l": "labels", "--priority": "priorities", "-p": "priorities",
                  "--id": "task_id"}
_CLAIM_FLAGS = {"-q": "quiet", "--quiet": "quiet", "--reuse": "reuse"}


def parse_queue_claim(args: list[str]) -> dict[str, Any] | None:
    """``{"root", "agent", "types", "labels", "priorities", "task_id", "reuse", "lease", "json", "format",
    "quiet"}`` for ``[--root R] queue claim --agent A [--type T ...] [--label L ...] [--priority P ...]
    [--id ID] [--reuse] [--lease S] [--json | --format F | -q]``; None for anything else (typer handles it)."""
    split = split_root(args)
    if split is None:
        return None
    root, rest = split
    if rest[:2] != ["queue", "claim"]:
        return None
    options = parse_options(rest[2:], _CLAIM_OPTIONS, repeatable=frozenset({"types", "labels", "priorities"}),
                            flags=_CLAIM_FLAGS)
    if options is None or "agent" not in options[0]:
        return None
    values, _, json_output = options
    lease = values.get("lease")
    if lease is not None:
        try:
            lease = float(lease)
        except ValueError:
            return None  # typer's usage error says it better
    return {"root": root, "agent": values["agent"], "types": values.get("types", []),
            "labels": values.get("labels", []), "priorities": [p.lower() for p in values.get("priorities", [])],
            "task_id": values.get("task_id"), "reuse": bool(values.get("reuse")), "lease": lease,
            "json": json_output, "format": values.get("format"), "quiet": bool(values.get("quiet"))}


def queue_claim(args: list[str]) -> int | None:
    """Run ``loki queue claim`` if ``args`` is one: agents call it in a loop, typer costs ~45 ms."""
    parsed = parse_queue_claim(args)
    if parsed is None:
        return None

    def run_claim() -> int:
        from loki.queue.queue import Queue
        from loki.spend.budgets import claim
        from loki.storage.opening import open_store

        fmt = resolve_format(parsed["format"], parsed["quiet"], parsed["json"])  # before anything is claimed
        task = claim(  # within the budgets (docs/spend.md): a spent one is exit 75
            Queue(open_store(parsed["root"])), parsed["agent"], types=parsed["types"], labels=parsed["labels"],
            priorities=parsed["priorities"],
            task_id=parsed["task_id"], reuse=parsed["reuse"], lease_seconds=parsed["lease"])
        print_claim(task, fmt)
        return 0

    return guarded(run_claim, json_errors(args))
