"""The meter (loki/spend/meter.py) and the price table (loki/spend/prices.py): what each agent's machine-readable
output says it spent, read from a copy of its stdout, and the figures loki refuses to store."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loki.spend import prices
from loki.spend.meter import LINE_MAX, Meter, model_in_command
from loki.tasks.usage import BadUsage, check_entry, sum_entries

CLAUDE_RESULT = {"type": "result", "subtype": "success", "is_error": False, "result": "done",
                 "total_cost_usd": 0.0123,
                 "usage": {"input_tokens": 12, "output_tokens": 345, "cache_read_input_tokens": 20000,
                           "cache_creation_input_tokens": 1500},
                 "modelUsage": {"claude-haiku-4-5": {"outputTokens": 5, "costUSD": 0.0001},
                                "claude-sonnet-4-5-20250929": {"outputTokens": 340, "costUSD": 0.0122}}}


def metered(*chunks: bytes, data: object = None, **options: Any) -> tuple[Meter, dict[str, Any] | None]:
    meter = Meter(**options)
    for chunk in chunks:
        meter.feed(chunk)
    meter.finish()
    return meter, meter.entry(data)


def test_claude_json_result_gives_tokens_by_kind_and_its_own_dollars() -> None:
    _, entry = metered(json.dumps(CLAUDE_RESULT).encode() + b"\n")
    assert entry == {"input_tokens": 12, "output_tokens": 345, "cache_read_tokens": 20000,
                     "cache_creation_tokens": 1500, "source": "claude", "model": "claude-sonnet-4-5-20250929",
                     "usd": 0.0123, "usd_source": "agent"}
    check_entry(entry)


CLAUDE_CAPPED = {  # what Claude Code 2.1.330 printed when --max-budget-usd 0.0001 stopped it (trimmed)
    "type": "result", "subtype": "error_max_budget_usd", "is_error": True, "num_turns": 1,
    "stop_reason": "tool_use", "terminal_reason": "budget_exhausted", "total_cost_usd": 0.017268,
    "usage": {"input_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 0,
              "server_tool_use": {"web_search_requests": 0}, "service_tier": "standard"},
    "modelUsage": {"claude-opus-5-5": {"inputTokens": 37, "outputTokens": 11, "cacheReadInputTokens": 52000,
                                       "cacheCreationInputTokens": 1300, "costUSD": 0.017268}},
    "errors": ["Reached maximum budget ($0.0001)"]}


def test_claude_s_own_max_budget_result_keeps_its_tokens_from_model_usage_and_says_it_was_capped() -> None:
    meter, entry = metered(json.dumps(CLAUDE_CAPPED).encode() + b"\n")
    assert entry == {"input_tokens": 37, "output_tokens": 11, "cache_read_tokens": 52000,
                     "cache_creation_tokens": 1300, "source": "claude", "model": "claude-opus-5-5",
                     "usd": 0.017268, "usd_source": "agent"}
    assert meter.capped == "Reached maximum budget ($0.0001)"
    assert metered(json.dumps(CLAUDE_RESULT).encode() + b"\n")[0].capped is None


@pytest.mark.parametrize(("model_usage", "problem"), [
    ({"m": {"inputTokens": -1}}, "modelUsage.m.inputTokens must be from 0"),
    ({"m": {"outputTokens": "7"}}, "modelUsage.m.outputTokens must be a whole number"),
    ({"m": "lots"}, "modelUsage.m must be an object"),
    ({"a": {"inputTokens": 10**12}, "b": {"inputTokens": 10**12}}, "modelUsage's input_tokens must be from 0"),
])
def test_a_capped_result_whose_model_usage_lies_is_refused(model_usage: object, problem: str) -> None:
    meter, entry = metered(json.dumps({**CLAUDE_CAPPED, "modelUsage": model_usage}).encode() + b"\n")
    assert entry is None and len(meter.problems) == 1 and problem in meter.problems[0]


def test_claude_stream_json_counts_the_result_line_not_each_assistant_message() -> None:
    lines = [{"type": "system", "subtype": "init", "model": "claude-sonnet-4-5"},
             {"type": "assistant", "message": {"usage": {"input_tokens": 999, "output_tokens": 999}}},
             CLAUDE_RESULT]
    text = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
    # Split at every awkward place: mid-line, mid-key.
    chunks = [text[i:i + 7] for i in range(0, len(text), 7)]
    _, entry = metered(*chunks)
    assert entry is not None and entry["output_tokens"] == 345 and entry["cache_read_tokens"] == 20000


def test_the_tee_writes_every_byte_on_unchanged() -> None:
    seen = bytearray()
    meter = Meter()
    write = meter.tee(seen.extend)
    text = b"progress 1\n" + json.dumps(CLAUDE_RESULT).encode() + b"\nno newline at the end"
    for i in range(0, len(text), 5):
        write(text[i:i + 5])
    meter.finish()
    assert bytes(seen) == text
    assert meter.entry() is not None


def test_a_closed_output_stops_the_writing_not_the_scanning() -> None:
    def closed(data: bytes) -> None:
        raise BrokenPipeError

    meter = Meter()
    write = meter.tee(closed)
    write(b"x\n")
    write(json.dumps(CLAUDE_RESULT).encode() + b"\n")
    meter.finish()
    assert meter.entry() is not None


def test_codex_turns_are_summed_and_cached_input_counted_apart_then_priced() -> None:
    events = [{"type": "thread.started", "thread_id": "x"},
              {"type": "turn.completed", "usage": {"input_tokens": 1000, "cached_input_tokens": 800,
                                                   "output_tokens": 50}},
              {"type": "turn.completed", "usage": {"input_tokens": 2000, "cached_input_tokens": 1500,
                                                   "output_tokens": 70}}]
    text = b"".join(json.dumps(event).encode() + b"\n" for event in events)
    _, entry = metered(text, command_model="gpt-5-codex")
    row = prices.PRICES["gpt-5-codex"]
    expected = round((700 * row["input"] + 120 * row["output"] + 2300 * row["cache_read"]) / 1e6, 6)
    assert entry == {"input_tokens": 700, "output_tokens": 120, "cache_read_tokens": 2300,
                     "cache_creation_tokens": 0, "source": "codex", "model": "gpt-5-codex",
                     "usd": expected, "usd_source": "prices"}


def test_an_unknown_model_keeps_its_tokens_and_no_dollars() -> None:
    text = json.dumps({"type": "turn.completed", "usage": {"input_tokens": 10, "output_tokens": 5}}).encode()
    _, entry = metered(text)
    assert entry is not None and entry["usd"] is None and entry["input_tokens"] == 10
    assert sum_entries([entry])["unpriced"] == 1


def test_gemini_pretty_printed_document_is_read_whole() -> None:
    doc = {"response": "ok", "stats": {"models": {"gemini-2.5-pro": {
        "api": {"totalRequests": 2}, "tokens": {"prompt": 5000, "candidates": 300, "total": 5400, "cached": 4000,
                                               "thoughts": 100, "tool": 0}}}}}
    _, entry = metered(json.dumps(doc, indent=2).encode())
    row = prices.PRICES["gemini-2.5-pro"]
    assert entry == {"input_tokens": 1000, "output_tokens": 400, "cache_read_tokens": 4000,
                     "cache_creation_tokens": 0, "source": "gemini", "model": "gemini-2.5-pro",
                     "usd": round((1000 * row["input"] + 400 * row["output"] + 4000 * row["cache_read"]) / 1e6, 6),
                     "usd_source": "prices"}


def test_the_result_files_usage_replaces_what_stdout_showed() -> None:
    data = {"usage": {"input_tokens": 1, "output_tokens": 2, "cache_read_tokens": 3, "cache_creation_tokens": 4,
                      "usd": 0.5, "model": "mine"}}
    _, entry = metered(json.dumps(CLAUDE_RESULT).encode(), data=data)
    assert entry == {"input_tokens": 1, "output_tokens": 2, "cache_read_tokens": 3, "cache_creation_tokens": 4,
                     "source": "result_file", "model": "mine", "usd": 0.5, "usd_source": "agent"}


def test_settings_override_and_add_prices() -> None:
    table = prices.table({"spend": {"prices": {"house-model": {"input": 2, "output": 8},
                                               "claude-sonnet-4-5": {"input": 1}}}})
    assert table["claude-sonnet-4-5"]["input"] == 1.0 and table["claude-sonnet-4-5"]["output"] == 15.0
    data = {"usage": {"input_tokens": 1_000_000, "output_tokens": 1_000_000, "model": "house-model"}}
    _, entry = metered(data=data, prices=table)
    assert entry is not None and entry["usd"] == 10.0 and entry["usd_source"] == "prices"


@pytest.mark.parametrize("bad", [{"x": {"input": 1}}, {"x": {"input": -1}}, {"x": {"input": "1"}},
                                 {"x": {"inputs": 1}}, {"x": {"input": float("nan")}}, [1]])
def test_bad_price_overrides_are_refused_naming_the_entry(bad: object) -> None:
    if bad == {"x": {"input": 1}}:
        prices.table({"spend": {"prices": bad}})  # the good one of the set
        return
    with pytest.raises(prices.BadPrices, match=r"spend\.prices"):
        prices.table({"spend": {"prices": bad}})


def test_prefix_match_prices_a_dated_model_name() -> None:
    assert prices.find(prices.PRICES, "claude-sonnet-4-5-20250929") == prices.PRICES["claude-sonnet-4-5"]
    assert prices.find(prices.PRICES, "gpt-5-mini-2025") == prices.PRICES["gpt-5-mini"]
    assert prices.find(prices.PRICES, "llama") is None


def test_model_in_command() -> None:
    assert model_in_command(["codex", "exec", "-m", "gpt-5", "x"]) == "gpt-5"
    assert model_in_command(["claude", "--model=opus", "-p"]) == "opus"
    assert model_in_command(["./agent.sh"]) is None


@pytest.mark.parametrize(("doc", "problem"), [
    ({**CLAUDE_RESULT, "total_cost_usd": "$0.12"}, "total_cost_usd must be a number of dollars (got '$0.12')"),
    ({**CLAUDE_RESULT, "total_cost_usd": -1}, "total_cost_usd must be a number of dollars from 0"),
    ({**CLAUDE_RESULT, "total_cost_usd": 1e300}, "total_cost_usd must be a number of dollars from 0"),
    ({**CLAUDE_RESULT, "usage": {"input_tokens": -5}}, "usage.input_tokens must be from 0"),
    ({**CLAUDE_RESULT, "usage": {"input_tokens": 1.5}}, "usage.input_tokens must be a whole number"),
    ({**CLAUDE_RESULT, "usage": {"output_tokens": 10**15}}, "usage.output_tokens must be from 0"),
    ({**CLAUDE_RESULT, "usage": {"output_tokens": True}}, "usage.output_tokens must be a whole number"),
    ({**CLAUDE_RESULT, "usage": "lots"}, "usage must be an object"),
    ({"type": "turn.completed", "usage": {"input_tokens": 5, "cached_input_tokens": 9}},
     "cached_input_tokens (9) exceeds usage.input_tokens (5)"),
])
def test_a_lying_or_absurd_agent_report_is_refused_with_one_line_and_not_stored(doc: dict[str, Any],
                                                                                problem: str) -> None:
    meter, entry = metered(json.dumps(doc).encode() + b"\n")
    assert entry is None
    assert len(meter.problems) == 1 and problem in meter.problems[0] and "\n" not in meter.problems[0]


def test_nan_in_an_agent_report_is_not_json_and_is_not_read() -> None:
    _meter, entry = metered(b'{"type": "result", "total_cost_usd": NaN, "usage": {"input_tokens": 1}}\n')
    assert entry is None


@pytest.mark.parametrize(("usage", "problem"), [
    ({"input_tokens": -1}, "usage.input_tokens must be from 0"),
    ({"input_tokens": 10**13}, "usage.input_tokens must be from 0"),
    ({"usd": "0.3"}, "usage.usd must be a number"),
    ({"usd": -0.01}, "usage.usd must be a number of dollars from 0"),
    ({"tokens": 5}, "usage.tokens: unknown field"),
    ("5 dollars", "usage must be an object"),
    ({"model": ""}, "usage.model must be a model name"),
])
def test_a_bad_result_file_usage_is_refused_and_stdout_used_instead(usage: object, problem: str) -> None:
    meter, entry = metered(json.dumps(CLAUDE_RESULT).encode(), data={"usage": usage})
    assert entry is not None and entry["source"] == "claude"
    assert len(meter.problems) == 1 and problem in meter.problems[0]
    assert "using what stdout showed instead" in meter.problems[0]


def test_an_overlong_line_is_skipped_and_memory_stays_bounded() -> None:
    meter = Meter()
    meter.feed(b'{"usage": "' + b"x" * (LINE_MAX + 10))
    assert len(meter._line) == 0
    meter.feed(b'"}\n' + json.dumps(CLAUDE_RESULT).encode() + b"\n")
    meter.finish()
    entry = meter.entry()
    assert entry is not None and entry["output_tokens"] == 345


@given(st.binary(max_size=2000))
def test_any_bytes_never_raise_and_never_give_a_wrong_entry(data: bytes) -> None:
    meter = Meter()
    meter.feed(data)
    meter.finish()
    entry = meter.entry()
    if entry is not None:
        check_entry(entry)


def test_check_entry_refuses_what_the_queue_must_not_store() -> None:
    good = {"input_tokens": 1, "output_tokens": 2, "cache_read_tokens": 0, "cache_creation_tokens": 0,
            "source": "claude", "usd": 0.1, "usd_source": "agent"}
    check_entry(good)
    for bad, match in [({**good, "usd": float("nan")}, "usage.usd"), ({**good, "source": "me"}, "usage.source"),
                       ({**good, "extra": 1}, "usage.extra: unknown field"),
                       ({**good, "usd_source": None}, "usage.usd_source")]:
        with pytest.raises(BadUsage, match=match):
            check_entry(bad)
