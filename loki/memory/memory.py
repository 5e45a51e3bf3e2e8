"""Error memory: every failure agents hit and what fixed it, searchable (docs/memory.md).

The "Error Pattern Capture" reference stores failed commands (command, exit code, concise
message, the first 1000 characters of output, file:line references, stack trace, working
directory, session) in a vector database behind a background process. loki keeps them with no
server and no background process:

* ``memory/errors.jsonl`` is the truth: one schema-validated, redacted JSON line per failure
  (``kind: "error"``) and per resolution (``kind: "resolution"``), appended under the log's lock.
  The hooks append one line and return; nothing else happens on their path.
* ``memory/errors.db`` is a SQLite FTS5 index (BM25) over it, a cache: it catches up from the
  offset it last read when it is next searched, and is rebuilt from the log when it is missing,
  stale or corrupt (:mod:`loki.memory.index`). A store that keeps a search of its own is asked
  for it instead (``store.memory_search()``: PostgreSQL's tsvector tables, shared by every machine,
  :mod:`loki.storage.postgres.memorysearch`).
* ``memory/hints/`` holds one small file per resolved command prefix, which the PreToolUse hook
  reads before a Bash command (:mod:`loki.memory.hints`).

A **resolution** links the errors of a strike streak to the successful call of the same kind
(same tool, same :mod:`prefix <loki.strikes.cmdprefix>`) that ended it, with a confidence that halves
every ``memory.resolution_half_life`` calls between the streak's last failure and the success.

Python use::

    from loki import open_store
    from loki.memory.memory import ErrorMemory

    with ErrorMemory(open_store()) as memory:
        for hit in memory.search("ModuleNotFoundError requests", limit=5):
            print(hit["command"], hit["error_message"], hit["occurrences"], hit["resolution"])
        memory.stats(); memory.reindex(); memory.compact()
"""

from __future__ import annotations

import os

from loki.memory.record import RECORD_SCHEMA, content_hash
from loki.storage import layout
from loki.storage.jsonio import without_nul
from loki.strikes import cmdprefix
from loki.strikes import key as strikekey
from loki.text.redact import redact

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any

    from loki.storage.state import MemorySearch
    from loki.storage.state import StateStore as Store
    from loki.text.errorscan import ScanResult

OUTPUT_CHARS = 1000
"""The reference keeps the first 1000 characters of a failed command's output."""
COMMAND_CHARS = 1000
MESSAGE_CHARS = 300
SESSION_CHARS = 128
REFERENCES_KEPT = 20
_EXIT_CODE_PREFIX = "Exit code "

OUTPUT_FLAGS = frozenset({"-v", "-vv", "-vvv", "-vvvv", "--verbose", "-q", "-qq", "-qqq", "--quiet", "--no-color",
                          "--no-colour", "--color", "--colour"})
"""Options that change only what a command prints, never whether it succeeds (docs/memory.md)."""
OUTPUT_FLAG_VALUES = ("--color=", "--colour=", "--verbosity=")
OUTPUT_FLAGS_BY_PROGRAM: dict[str, tuple[frozenset[str], tuple[str, ...]]] = {
    "pytest": (frozenset({"-s", "-l", "--showlocals", "--no-header", "--no-summary", "--full-trace", "-ra", "-rA"}),
               ("--tb=", "--durations=", "--capture=")),
    "jest": (frozenset({"--silent", "--colors", "--no-colors"}), ()),
}
NOT_OUTPUT_FLAGS = {"grep": frozenset({"-v"}), "egrep": frozenset({"-v"}), "fgrep": frozenset({"-v"}),
                    "rg": frozenset({"-v"}), "git": frozenset({"-q", "-v"})}
"""Where a "display" flag means something else (``grep -v`` inverts the match)."""


PYTEST_SELECTION_FLAGS = frozenset({"-x", "--exitfirst", "--lf", "--last-failed", "--ff", "--failed-first", "--nf",
                                    "--new-first", "--sw", "--stepwise", "--sw-skip", "--stepwise-skip", "--co",
                                    "--collect-only"})
PYTEST_SELECTION_OPTIONS = frozenset({"-k", "-m", "-p", "--deselect", "--maxfail", "--ignore", "--ignore-glob"})
"""pytest options that choose which tests run (or how many before it stops), not whether the code works:
``pytest ... -x`` or ``-k test_a`` passing after ``pytest ...`` failed ran less, it fixed nothing.
``-p`` too: ``-p no:randomly`` passing says the tests depend on their order."""


def _pytest_selection(words: list[str]) -> tuple[list[str], list[str]] | None:
    """``words`` of a pytest command as (launcher and options without selection, test paths), or None
    when it is not pytest. Test paths are the words after ``pytest`` that are not options or their values."""
    launcher = next((i for i, w in enumerate(words) if w.rsplit("/", 1)[-1] in ("pytest", "py.test")), None)
    if launcher is None:
        return None
    kept, paths = list(words[:launcher + 1]), list[str]()
    rest = iter(words[launcher + 1:])
    for word in rest:
        if word in PYTEST_SELECTION_FLAGS or word.startswith(tuple(f"{o}=" for o in PYTEST_SELECTION_OPTIONS)):
            continue
        if word in PYTEST_SELECTION_OPTIONS:
            next(rest, None)
            continue
        (kept if word.startswith("-") else paths).append(word)
    return kept, paths


def is_rerun(failed: str, succeeded: str) -> bool:
    """Whether a successful Bash command is the failing one again, give or take options that only
    change its output (``pytest tests/test_x.py -v`` after ``pytest tests/test_x.py``).

    Such a success is no fix -- whatever fixed it happened in between -- so error memory records
    it as "passed on retry" (``same_input``) and never offers it as a hint. So is pytest run
    again on fewer tests (:data:`PYTEST_SELECTION_FLAGS`, :data:`PYTEST_SELECTION_OPTIONS`, a path
    within the failing one). A flag that changes what runs (``cargo build --offline``,
    ``pytest --import-mode=importlib``) still makes it a fix.
    """
    import shlex

    try:
        before, after = shlex.split(failed), shlex.split(succeeded)
    except ValueError:  # an unbalanced quote: no reliable comparison, so no claim either way
        return False
    if before == after:
        return True
    program = cmdprefix.command_prefix(succeeded).split(" ", 1)[0]
    if not program or program != cmdprefix.command_prefix(failed).split(" ", 1)[0]:
        return False
    extra, extra_values = OUTPUT_FLAGS_BY_PROGRAM.get(program, (frozenset(), ()))
    flags = (OUTPUT_FLAGS | extra) - NOT_OUTPUT_FLAGS.get(program, frozenset())
    values = OUTPUT_FLAG_VALUES + extra_values

    def essential(words: list[str]) -> list[str]:
        return [w for w in words if w not in flags and not w.startswith(values)]

    if essential(before) == essential(after):
        return True
    if program not in ("pytest", "py.test"):
        return False
    # pytest again, choosing fewer tests: selection options, or paths within the ones that failed
    # (tests/test_x.py::test_a after tests/test_x.py; any path after the whole suite).
    was, now = _pytest_selection(essential(before)), _pytest_selection(essential(after))
    if was is None or now is None or was[0] != now[0]:
        return False
    return all(not was[1] or any(path == old or path.startswith((old.rstrip("/") + "/", old + "::"))
                                 for old in was[1]) for path in now[1])


def confidence(calls_between: int, half_life: float) -> float:
    """How sure loki is that a success fixed the streak before it: ``0.5 ** (calls / half_life)``.

    0 calls in between: 1.0; one half-life of calls: 0.5; two: 0.25. Rounded to 3 digits.
    """
    calls = max(0, int(calls_between))
    value: float = 0.5 ** (calls / max(float(half_life), 1e-9))
    return round(value, 3)


def new_id(kind: str) -> str:
    """``e`` (error) or ``r`` (resolution) and 16 random hex digits."""
    return kind[0] + os.urandom(8).hex()


def call_text(tool: str, tool_input: Any, limit: int = COMMAND_CHARS) -> str:
    """The command of a Bash call, else the call's normalised input; redacted and cut."""
    if tool == "Bash" and isinstance(tool_input, dict) and isinstance(tool_input.get("command"), str):
        text = str(tool_input["command"]).strip()
    else:
        text = strikekey.normalised_input(tool_input, limit + strikekey.REDACT_MARGIN)
    # Redact before cutting: a cut through a token would leave a piece no rule recognises.
    return redact(text[: limit + strikekey.REDACT_MARGIN])[:limit]


def clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def split_exit_code(text: str) -> tuple[int | None, str]:
    """Claude Code's Bash failure text ``"Exit code N\\n<output>"`` -> ``(N, output)``."""
    if not text.startswith(_EXIT_CODE_PREFIX):
        return None, text
    first, _, rest = text.partition("\n")
    number = first[len(_EXIT_CODE_PREFIX):].strip()
    return (int(number), rest) if number.lstrip("-").isdigit() else (None, text)


def error_record(
    *,
    tool: str,
    tool_input: Any,
    error: str,
    result: ScanResult | None,
    exit_code: int | None,
    branch: str,
    cwd: str | None,
    session_id: str | None,
    strike_key: str | None,
    now: str,
) -> dict[str, Any]:
    """One ``kind: "error"`` line: the reference's fields plus class, branch, tool and content hash.

    ``result``: errorscan's reading of the failure (None: the output is scanned here).
    """
    from loki.text.errorscan import extract_file_refs, extract_stack_trace, scan

    code, output = split_exit_code(error or "")
    if exit_code is None:
        exit_code = code
    if result is None:  # the hooks pass the scan they made with the command; a library caller may not
        result = scan(output, exit_code, command=tool_input.get("command") if tool == "Bash"
                      and isinstance(tool_input, dict) and isinstance(tool_input.get("command"), str) else None)
    if result.is_error:
        message = result.message
        refs = list(result.file_refs)
        stack = result.stack_trace
        error_class = result.error_class
    else:
        message = ""
        refs = extract_file_refs(output[-16384:])
        stack = extract_stack_trace(output[-65536:])
        error_class = "tool_error"
    if not message:
        message = next((line for line in output.splitlines() if line.strip()), "") or "the call failed"
    message = clip(redact(message[: MESSAGE_CHARS + strikekey.REDACT_MARGIN]), MESSAGE_CHARS)
    prefix = cmdprefix.call_prefix(tool, tool_input)
    record: dict[str, Any] = {
        "kind": "error",
        "id": new_id("error"),
        "timestamp": now,
        "tool": tool,
        "command": call_text(tool, tool_input),
        "prefix": prefix,
        "exit_code": exit_code,
        "error_message": message,
        "error_class": error_class,
        "output": redact(output[: OUTPUT_CHARS + strikekey.REDACT_MARGIN])[:OUTPUT_CHARS],
        "file_references": [dict(ref.to_json(), file=redact(ref.file)) for ref in refs[:REFERENCES_KEPT]],
        "stack_trace": redact(stack) if stack else None,
        "cwd": redact(cwd) if cwd else "",
        "session_id": clip(redact(session_id[:1024]), SESSION_CHARS) if session_id and session_id.strip() else None,
        "branch": branch,
        "content_hash": content_hash(tool, prefix, message),
    }
    if strike_key is not None:
        record["strike_key"] = strike_key
    return record


def resolution_record(
    streak: dict[str, Any],
    *,
    tool: str,
    tool_input: Any,
    branch: str,
    cwd: str | None,
    session_id: str | None,
    half_life: float,
    now: str,
) -> dict[str, Any]:
    """One ``kind: "resolution"`` line linking a streak's errors to the call that ended it.

    ``streak``: what :meth:`loki.strikes.strikes.Strikes.record_success` reports for each streak it ended
    (``key``, ``memory_ids``, ``calls_between``, ``same_input``, ``entry``).
    """
    entry = streak["entry"]
    calls_between = max(0, int(streak.get("calls_between") or 0))
    resolution = call_text(tool, tool_input)
    command = _label_subject(entry.get("call"), entry.get("input_preview", ""))
    same_input = bool(streak.get("same_input")) or (tool == "Bash" and is_rerun(command, resolution))
    return {
        "kind": "resolution",
        "id": new_id("resolution"),
        "timestamp": now,
        "tool": tool,
        # The failing call's prefix: the hint is looked up by what failed, before it runs again.
        "prefix": entry.get("prefix") if isinstance(entry.get("prefix"), str) else cmdprefix.call_prefix(tool,
                                                                                                       tool_input),
        "resolves": list(streak["memory_ids"]),
        "resolution": resolution,
        "command": command,
        "error_message": str(entry.get("last_error") or ""),
        "error_class": entry.get("error_class"),
        "location": entry.get("location") if isinstance(entry.get("location"), str) else None,
        "calls_between": calls_between,
        "confidence": confidence(calls_between, half_life),
        "same_input": same_input,
        "strike_key": streak["key"],
        "branch": branch,
        "cwd": redact(cwd) if cwd else "",
        "session_id": clip(redact(session_id[:1024]), SESSION_CHARS) if session_id and session_id.strip() else None,
    }


def _keep_local(store: Store, rels: list[str] | None = None, dirs: list[str] | None = None) -> None:
    """Refresh this machine's copies of hints the PreToolUse hook reads (a database tree; files: nothing).
    Best effort: the hints are in the store already, and a stale copy only delays a suggestion."""
    from contextlib import suppress

    from loki.errors import LokiError

    if store.keeps_local_copies:
        with suppress(LokiError, OSError):
            store.keep_local(rels or [], dirs or [])


def _label_subject(label: Any, fallback: str) -> str:
    """``Bash `cargo build``` -> ``cargo build`` (the strike entry's redacted call label)."""
    if isinstance(label, str) and "`" in label:
        start, end = label.find("`"), label.rfind("`")
        if end > start:
            return label[start + 1 : end]
    return str(fallback)


class ErrorMemory:
    """The error memory of one ``.loki/`` tree.

    Writing (:meth:`capture`, :meth:`record_resolutions`) only appends to the log; reading
    (:meth:`search`, :meth:`stats`) opens the index, which first catches up with the log.
    ``warnings`` collects what the index skipped (a corrupt line, by its line number).
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self._index: MemorySearch | None = None

    @classmethod
    def open(cls, root: str | None = None) -> ErrorMemory:
        """The ErrorMemory of the nearest ``.loki/`` (or ``root``), like the CLI finds it."""
        from loki.storage.opening import open_store

        return cls(open_store(root))

    def __enter__(self) -> ErrorMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._index is not None:
            self._index.close()
            self._index = None

    # -- settings --------------------------------------------------------------------------------

    @property
    def half_life(self) -> float:
        return float(self.store.setting("memory", "resolution_half_life", 3))

    @property
    def max_records(self) -> int:
        return int(self.store.setting("memory", "max_records", 100_000))

    # -- writing (the hooks' path: append and return) -----------------------------------------------

    def capture(
        self,
        tool: str,
        tool_input: Any,
        error: str,
        *,
        result: ScanResult | None = None,
        exit_code: int | None = None,
        branch: str,
        cwd: str | None = None,
        session_id: str | None = None,
        strike_key: str | None = None,
    ) -> dict[str, Any]:
        """Append one failure to the log and return the record written (redacted, validated)."""
        record = error_record(tool=tool, tool_input=tool_input, error=error, result=result, exit_code=exit_code,
                              branch=branch, cwd=cwd, session_id=session_id, strike_key=strike_key,
                              now=self.store.now_ts())
        clean: dict[str, Any] = without_nul(record)  # PostgreSQL's text cannot hold a NUL (jsonio.without_nul)
        self.store.schemas.validate(RECORD_SCHEMA, clean, layout.MEMORY_LOG)
        self.store.append_lines(layout.MEMORY_LOG, [clean])
        return clean

    def record_resolutions(
        self,
        streaks: list[dict[str, Any]],
        tool: str,
        tool_input: Any,
        *,
        branch: str,
        cwd: str | None = None,
        session_id: str | None = None,
    ) -> list[dict[str, Any]]:
        """Append one resolution per ended streak that has captured errors; refresh the prefix hints."""
        from loki.memory import hints as memoryhints

        now = self.store.now_ts()
        records = [without_nul(resolution_record(streak, tool=tool, tool_input=tool_input, branch=branch, cwd=cwd,
                                     session_id=session_id, half_life=self.half_life, now=now))
                   for streak in streaks if streak.get("memory_ids")]
        if not records:
            return []
        for record in records:
            self.store.schemas.validate(RECORD_SCHEMA, record, layout.MEMORY_LOG)
        # One lock for the line and the hint: two resolutions of one prefix at once keep the better hint.
        offered = []
        with self.store.transaction(layout.MEMORY_LOG):
            self.store.append_lines(layout.MEMORY_LOG, records, lock=False)
            for record in records:
                if memoryhints.offer(self.store, record):
                    offered.append(memoryhints.hint_file(record["tool"], record["prefix"]))
        if offered:
            _keep_local(self.store, offered)
        return records

    # -- reading (the index) -------------------------------------------------------------------------

    @property
    def index(self) -> MemorySearch:
        """The search: the store's own when it keeps one (PostgreSQL: tsvector tables every machine
        shares), else the SQLite FTS5 cache beside the log (:mod:`loki.memory.index`)."""
        if self._index is None:
            from loki.memory import patterns

            found = self.store.memory_search(patterns)
            if found is None:
                from loki.memory.index import MemoryIndex

                found = MemoryIndex(self.store)
            self._index = found
        return self._index

    @property
    def warnings(self) -> list[str]:
        return self._index.warnings if self._index is not None else []

    def sync(self) -> dict[str, Any]:
        """Bring the index up to date with the log (catch up, or rebuild when it is stale or corrupt)."""
        return self.index.sync()

    def search(self, query: str, *, limit: int = 10, error_class: str | None = None, with_resolution: bool = False,
               highlight: tuple[str, str] = ("**", "**")) -> list[dict[str, Any]]:
        """Past failures matching ``query``, best first (BM25), each with its best resolution.

        Each result: ``command``, ``error_message``, ``error_class``, ``file_references``,
        ``stack_trace``, ``first_seen``/``last_seen``, ``occurrences``, ``resolution`` (None or
        ``{"resolution", "confidence", "calls_between", ...}``), ``score`` and a ``snippet`` with the
        matched words between the ``highlight`` markers.
        """
        return self.index.search(query, limit=limit, error_class=error_class, with_resolution=with_resolution,
                                 highlight=highlight)

    def stats(self, *, top: int = 10) -> dict[str, Any]:
        """Most frequent errors, counts by class, the share of patterns with a resolution."""
        return self.index.stats(top=top)

    def reindex(self) -> dict[str, Any]:
        """Rebuild the index and the prefix hints from the log."""
        from loki.memory import hints as memoryhints

        report = self.index.rebuild("asked for (loki errors reindex)")
        report["hints"] = memoryhints.rebuild(self.store, self.index.resolution_records())
        _keep_local(self.store, dirs=[layout.MEMORY_HINTS_DIR])
        return report

    def compact(self, *, max_records: int | None = None) -> dict[str, Any]:
        """Rewrite the log bounded and de-duplicated (:mod:`loki.memory.compact`), then reindex."""
        from loki.memory.compact import compact

        self.close()  # the rewrite makes the open index stale; reopen after
        report = compact(self.store, max_records=self.max_records if max_records is None else max_records)
        report["index"] = self.reindex()
        return report
