"""The meter: what an agent's run spent, read from what the agent itself reports (docs/spend.md).

``loki work`` hands the command's stdout to the terminal through :meth:`Meter.tee`: every chunk is written
on unchanged, and a copy is scanned for the usage documents the agents print in their machine-readable modes:

* Claude Code, ``-p --output-format json`` or ``stream-json``: the ``{"type": "result", ...}`` object, its
  ``usage`` (``input_tokens``, ``output_tokens``, ``cache_read_input_tokens``, ``cache_creation_input_tokens``),
  ``total_cost_usd`` and ``modelUsage`` (the model);
* Codex CLI, ``exec --json``: every ``{"type": "turn.completed", "usage": {...}}`` event (its
  ``input_tokens`` include ``cached_input_tokens``; loki counts them apart);
* Gemini CLI, ``-p --output-format json``: the document's ``stats.models.<model>.tokens`` (``prompt``,
  ``candidates``, ``cached``, ``thoughts``), a pretty-printed document read whole.

And, for anything else, a ``usage`` object in the result file (``$LOKI_RESULT_FILE``:
``{"usage": {"input_tokens", "output_tokens", "cache_read_tokens", "cache_creation_tokens", "usd", "model"}}``),
which, when present, is the attempt's usage in place of what stdout showed.

A figure loki will not store (a negative, fractional or absurd count, NaN, a cost written as text, cached
tokens above the input that holds them) is refused: the reading is dropped and one line says which field
of which source, and nothing wrong is stored. Memory is bounded: lines over :data:`LINE_MAX` are skipped,
and a whole-output document is only kept up to :data:`WHOLE_MAX`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from loki.spend import prices as price_table
from loki.tasks.usage import TOKEN_KINDS, BadUsage, check_count, check_usd

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

    Writer = Callable[[bytes], None]

LINE_MAX = 4 * 1024 * 1024
WHOLE_MAX = 4 * 1024 * 1024
_MARKERS = (b'"result"', b"turn.completed", b'"stats"')
"""A usage document holds one of these (Claude Code's ``"type": "result"``, Codex's ``turn.completed``,
Gemini's ``"stats"``); a line without any is not parsed (Claude Code's assistant messages carry a ``usage``
of their own that the result sums)."""
_LABELS = {"claude": "Claude Code result", "codex": "Codex turn.completed", "gemini": "Gemini CLI stats",
           "result_file": "result file"}
RESULT_FILE_KEYS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_creation_tokens", "usd", "model")


@dataclass
class Reading:
    """One usage document: a Claude Code session, a Codex turn, one Gemini model's share of a session."""

    source: str
    tokens: dict[str, int]
    usd: float | None = None
    model: str | None = None
    capped: str | None = None
    """Claude Code stopped at its own ``--max-budget-usd``: what it said (``errors``)."""


@dataclass
class Meter:
    """Scans one attempt's stdout (fed in chunks) for usage; :meth:`entry` gives what to store."""

    prices: dict[str, dict[str, float]] = field(default_factory=lambda: price_table.table({}))
    command_model: str | None = None
    """The model the command line names (``--model X``/``-m X``), for readings that do not say (Codex)."""
    readings: list[Reading] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    _line: bytearray = field(default_factory=bytearray)
    _skipping: bool = False
    _whole: bytearray | None = field(default_factory=bytearray)
    _line_documents: int = 0

    # -- reading ---------------------------------------------------------------------------------

    def tee(self, write: Writer) -> Writer:
        """A writer that scans each chunk and writes it on unchanged (a closed output stops the writing,
        not the scanning)."""
        broken = False

        def teed(data: bytes) -> None:
            nonlocal broken
            self.feed(data)
            if not broken:
                try:
                    write(data)
                except (OSError, ValueError):
                    broken = True

        return teed

    def feed(self, data: bytes) -> None:
        if self._whole is not None:
            not_json = not self._whole and data.lstrip()[:1] not in (b"{", b"[", b"")
            if not_json or len(self._whole) + len(data) > WHOLE_MAX:
                self._whole = None
            else:
                self._whole.extend(data)
        cut = data.rfind(b"\n")
        if cut < 0:  # no line ends here: the line goes on
            self._carry(data)
            return
        head, tail = data[:cut], data[cut + 1:]
        if self._skipping:  # the rest of an overlong line: dropped up to its end
            first = head.find(b"\n")
            head = b"" if first < 0 else head[first + 1:]
            self._skipping = False
        else:
            head = bytes(self._line) + head
        self._line.clear()
        # Most output is not a usage document: a chunk without a marker costs one search per marker.
        if any(marker in head for marker in _MARKERS):
            for line in head.split(b"\n"):
                self._end_line(line)
        self._carry(tail)

    def finish(self) -> None:
        """The command's stdout ended: its last line, then, if no line was a usage document, the whole."""
        if not self._skipping:
            self._end_line(bytes(self._line))
        self._line.clear()
        self._skipping = False
        whole, self._whole = self._whole, None
        if self._line_documents == 0 and whole and whole.count(b"\n") > 1 and any(m in whole for m in _MARKERS):
            self._document(bytes(whole))

    def _carry(self, part: bytes) -> None:
        if self._skipping:
            return
        if len(self._line) + len(part) > LINE_MAX:
            self._line.clear()
            self._skipping = True
            return
        self._line.extend(part)

    def _end_line(self, line: bytes) -> None:
        line = line.strip()
        if line[:1] not in (b"{", b"[") or not any(m in line for m in _MARKERS):
            return
        if self._document(line):
            self._line_documents += 1

    def _document(self, text: bytes) -> bool:
        try:
            doc = json.loads(text, parse_constant=_refuse_constant)
        except (ValueError, RecursionError):
            return False
        if isinstance(doc, list):  # Claude Code's json with --verbose: the session's messages
            found = False
            for item in doc:
                found = self._read(item) or found
            return found
        return self._read(doc)

    def _read(self, doc: object) -> bool:
        if not isinstance(doc, dict):
            return False
        kind = doc.get("type")
        try:
            if kind == "result" and ("usage" in doc or "total_cost_usd" in doc):
                self.readings.append(_claude(doc))
            elif kind == "turn.completed" and "usage" in doc:
                self.readings.append(_codex(doc))
            elif isinstance(doc.get("stats"), dict) and "models" in doc["stats"]:
                self.readings.extend(_gemini(doc["stats"]))
            else:
                return False
        except BadUsage as exc:
            source = {"result": "claude", "turn.completed": "codex"}.get(str(kind), "gemini")
            self.problems.append(f"stdout's {_LABELS[source]}: {exc}")
        return True

    # -- what to store -----------------------------------------------------------------------------

    def result_file_reading(self, data: object) -> Reading | None:
        """The ``usage`` object of the result file's ``data`` (None when absent; a refused one is a problem)."""
        if not isinstance(data, dict) or "usage" not in data:
            return None
        try:
            return _result_file(data["usage"])
        except BadUsage as exc:
            self.problems.append(f"the result file's {exc}; using what stdout showed instead")
            return None

    @property
    def capped(self) -> str | None:
        """What the agent said when it stopped at its own spending cap (Claude Code's ``error_max_budget_usd``
        result), or None."""
        return next((r.capped for r in self.readings if r.capped is not None), None)

    def entry(self, result_data: object = None) -> dict[str, Any] | None:
        """The attempt's usage entry (loki/tasks/usage.py) without the claim's fields, or None when the
        agent reported nothing usable."""
        from_file = self.result_file_reading(result_data)
        readings = [from_file] if from_file is not None else self.readings
        if not readings:
            return None
        tokens = {kind: sum(r.tokens.get(kind, 0) for r in readings) for kind in TOKEN_KINDS}
        entry: dict[str, Any] = {**tokens, "source": readings[0].source}
        models = {r.model or self.command_model for r in readings}
        model = models.pop() if len(models) == 1 else None
        if model:
            entry["model"] = model
        usd, usd_source = 0.0, "agent"
        for reading in readings:
            if reading.usd is not None:
                usd += reading.usd
                continue
            row = price_table.find(self.prices, reading.model or self.command_model)
            if row is None:
                return {**entry, "usd": None}
            usd += price_table.cost(row, reading.tokens)
            usd_source = "prices"
        entry["usd"], entry["usd_source"] = round(usd, 6), usd_source
        return entry


def model_in_command(command: Sequence[str]) -> str | None:
    """The value of ``--model X``, ``--model=X`` or ``-m X`` in the command line (every agent CLI's option)."""
    for index, arg in enumerate(command):
        if arg.startswith("--model="):
            return arg.split("=", 1)[1] or None
        if arg in ("--model", "-m") and index + 1 < len(command):
            return command[index + 1] or None
    return None


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


def _object(doc: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    value = doc.get(key)
    if not isinstance(value, dict):
        raise BadUsage(f"{where}{key} must be an object")
    return value


def _count(doc: dict[str, Any], key: str, where: str) -> int:
    return check_count(doc.get(key, 0), f"{where}{key}")


CLAUDE_CAPPED = "error_max_budget_usd"
"""The ``subtype`` of Claude Code's result when ``--max-budget-usd`` stopped it (2.1.330: ``is_error`` true, exit
1, ``errors: ["Reached maximum budget ($0.5)"]``, and ``usage`` all zeros: the tokens are only in ``modelUsage``)."""
_MODEL_USAGE_KEYS = {"input_tokens": "inputTokens", "output_tokens": "outputTokens",
                     "cache_read_tokens": "cacheReadInputTokens", "cache_creation_tokens": "cacheCreationInputTokens"}


def _claude(doc: dict[str, Any]) -> Reading:
    usage = _object(doc, "usage", "")
    tokens = {"input_tokens": _count(usage, "input_tokens", "usage."),
              "output_tokens": _count(usage, "output_tokens", "usage."),
              "cache_read_tokens": _count(usage, "cache_read_input_tokens", "usage."),
              "cache_creation_tokens": _count(usage, "cache_creation_input_tokens", "usage.")}
    usd = check_usd(doc["total_cost_usd"], "total_cost_usd") if doc.get("total_cost_usd") is not None else None
    model = None
    by_model = doc.get("modelUsage")
    if isinstance(by_model, dict) and by_model:
        model = max(by_model, key=lambda name: _weight(by_model[name]))
        if not any(tokens.values()):  # an error result (a spent cap) zeroes `usage`; modelUsage keeps the tokens
            tokens = _model_usage_tokens(by_model)
    capped = None
    if doc.get("subtype") == CLAUDE_CAPPED:
        errors = doc.get("errors")
        said = [str(e) for e in errors if isinstance(e, str)] if isinstance(errors, list) else []
        capped = " ".join(" ".join(said).split())[:200] or "reached its maximum budget"
    return Reading("claude", tokens, usd, model, capped)


def _model_usage_tokens(by_model: dict[str, Any]) -> dict[str, int]:
    """Tokens by kind summed over Claude Code's ``modelUsage`` (model -> camelCase counts), each checked."""
    tokens = dict.fromkeys(_MODEL_USAGE_KEYS, 0)
    for name, row in by_model.items():
        if not isinstance(row, dict):
            raise BadUsage(f"modelUsage.{str(name)[:40]} must be an object")
        for kind, key in _MODEL_USAGE_KEYS.items():
            tokens[kind] += check_count(row.get(key, 0), f"modelUsage.{str(name)[:40]}.{key}")
    for kind, count in tokens.items():
        check_count(count, f"modelUsage's {kind}")  # the sum, too, stays a believable figure
    return tokens


def _weight(row: object) -> float:
    if not isinstance(row, dict):
        return 0.0
    value = row.get("costUSD", row.get("outputTokens", 0))
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def _codex(doc: dict[str, Any]) -> Reading:
    usage = _object(doc, "usage", "")
    total_input = _count(usage, "input_tokens", "usage.")
    cached = _count(usage, "cached_input_tokens", "usage.")
    if cached > total_input:
        raise BadUsage(f"usage.cached_input_tokens ({cached:,}) exceeds usage.input_tokens ({total_input:,}), "
                       "which include them")
    tokens = {"input_tokens": total_input - cached, "output_tokens": _count(usage, "output_tokens", "usage."),
              "cache_read_tokens": cached, "cache_creation_tokens": 0}
    return Reading("codex", tokens)


def _gemini(stats: dict[str, Any]) -> list[Reading]:
    models = _object(stats, "models", "stats.")
    readings = []
    for model, row in models.items():
        where = f"stats.models.{model}.tokens."
        tokens_doc = _object(row if isinstance(row, dict) else {}, "tokens", f"stats.models.{model}.")
        prompt = _count(tokens_doc, "prompt", where)
        cached = _count(tokens_doc, "cached", where)
        if cached > prompt:
            raise BadUsage(f"{where}cached ({cached:,}) exceeds {where}prompt ({prompt:,}), which includes them")
        tokens = {"input_tokens": prompt - cached,
                  "output_tokens": _count(tokens_doc, "candidates", where) + _count(tokens_doc, "thoughts", where),
                  "cache_read_tokens": cached, "cache_creation_tokens": 0}
        readings.append(Reading("gemini", tokens, None, str(model)))
    return readings


def _result_file(usage: object) -> Reading:
    if not isinstance(usage, dict):
        raise BadUsage("usage must be an object of " + ", ".join(RESULT_FILE_KEYS))
    unknown = sorted(set(usage) - set(RESULT_FILE_KEYS))
    if unknown:
        raise BadUsage(f"usage.{unknown[0]}: unknown field (known: {', '.join(RESULT_FILE_KEYS)})")
    tokens = {kind: _count(usage, kind, "usage.") for kind in TOKEN_KINDS}
    usd = check_usd(usage["usd"], "usage.usd") if usage.get("usd") is not None else None
    model = usage.get("model")
    if model is not None and (not isinstance(model, str) or not 0 < len(model) <= 200):
        raise BadUsage("usage.model must be a model name of 1 to 200 characters")
    return Reading("result_file", tokens, usd, model)
