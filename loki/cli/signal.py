"""``loki signal emit|list|show|log|rules``: a thin layer over :mod:`loki.signals.emit` and :mod:`loki.watch.rules`.

``loki signal emit`` is normally answered by the fast lane (loki/cli/fast.py) before typer
loads -- agents run it constantly; this command is the same code for every other spelling
(``--help``, ``--``) and prints the same thing.
"""

from __future__ import annotations

from typing import Any

import typer

from loki.cli.common import (
    JSON_HELP,
    footer,
    format_option,
    print_json,
    print_listing,
    quiet_option,
    say,
    store_from,
    table,
)
from loki.cli.output import resolve_format
from loki.wording import plural

app = typer.Typer(help="Signals: files one agent drops in .loki/signals/ and the watcher consumes (loki watch).",
                  no_args_is_help=True)


@app.command("emit")
def emit(
    ctx: typer.Context,
    signal_type: str = typer.Argument(..., metavar="TYPE",
                                      help="HUMAN_REVIEW_NEEDED, TESTS_PASSED_auth, DRIFT_DETECTED, any UPPER_CASE "
                                           "custom type... (loki signal rules lists them)."),
    fields: list[str] | None = typer.Argument(None, metavar="[KEY=VALUE | KEY:=JSON]...",
                                              help="Fields: key=value is a string, key:=JSON any JSON value "
                                                   "(passed:=42, blocking:=true)."),
    subject: str | None = typer.Option(None, "--subject", help="The subject of FEATURE_READY, TESTS_PASSED, "
                                                               "TESTS_FAILED, MERGE_REQUESTED (-> TYPE_subject)."),
    task_id: str | None = typer.Option(None, "--task", help="The task the signal is about (task_id)."),
    severity: str | None = typer.Option(None, "--severity", help="low, medium, high or critical."),
    agent: str | None = typer.Option(None, "--agent", "-a", help="Who emits it."),
    data: str | None = typer.Option(None, "--data", help="A JSON object of fields."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Validate a signal against its type's schema and publish it (never overwriting an unconsumed one)."""
    from loki.cli.output import print_emitted
    from loki.signals.emit import emit as emit_signal
    from loki.signals.emit import fields_from

    result = emit_signal(store_from(ctx), signal_type, fields_from(data, fields or []), subject=subject,
                         task_id=task_id, severity=severity, agent=agent, known_task=True)
    print_emitted(result, json_output)


@app.command("fields")
def fields_(
    ctx: typer.Context,
    signal_type: str = typer.Argument(..., metavar="TYPE", help="A signal type: DRIFT_DETECTED, TESTS_PASSED_auth, "
                                                               "a custom UPPER_CASE one..."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """The fields a signal type takes, required ones first, and how `signal emit` sets each (option or key=value)."""
    from loki.signals.emit import fields

    result = fields(store_from(ctx), signal_type)
    if json_output:
        print_json(result)
        return

    def how(row: dict[str, Any]) -> str:
        if row["set_by_loki"]:
            return "set by loki"
        return f"{row['option']} VALUE" if row["option"] else f"{row['name']}=TEXT" if row["type"] == "text" \
            else f"{row['name']}:=JSON"

    table(None, ["field", "required", "type", "give it as"],
          [[r["name"], "yes" if r["required"] else "", r["type"], how(r)] for r in result["fields"]])
    more = "; any other field is kept as given" if result["open"] else ""
    footer(f"{result['type']}: schema {result['schema']}{more}")


@app.command("list")
def list_(
    ctx: typer.Context,
    archived: bool = typer.Option(False, "--archived", help="Also the signals of unknown types kept in .archive/."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
    fmt: str | None = format_option(),
    quiet: bool = quiet_option(),
) -> None:
    """Signals waiting, being processed and quarantined, oldest first, and the drift log's backlog."""
    from loki.signals.emit import list_signals

    output = resolve_format(fmt, quiet, json_output)
    places = ("waiting", "processing", "quarantined", *(("archived",) if archived else ()))
    result = list_signals(store_from(ctx), places=places)

    def people() -> None:
        if result["signals"]:
            table(None, ["id", "place", "type", "bytes"],
                  [[r["id"], r["place"], r["type"], r["bytes"] if r["kind"] == "file" else r["kind"]]
                   for r in result["signals"]])
        counts = {place: sum(1 for r in result["signals"] if r["place"] == place) for place in places}
        drift = result["drift"]
        footer(", ".join(f"{n} {place}" for place, n in counts.items()) +
               f"; drift log: {drift['bytes']} bytes, {drift['pending_bytes']} not yet applied")

    print_listing(output, result, result["signals"], "id", people)


@app.command("show")
def show(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="A file name in signals/ (HUMAN_REVIEW_NEEDED.2) or an id from the log."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """One signal: where it is, its content, and what consuming it did."""
    from loki.signals.emit import show as show_signal
    from loki.storage import jsonio

    result = show_signal(store_from(ctx), name)
    if json_output:
        print_json(result)
        return
    say(f"{result['name']} ({result['type']}): {result['place']}" + (f", {result['file']}" if "file" in result
                                                                      else ""))
    if "error" in result:
        say(f"cannot be read: {result['error']}")
    if "signal" in result:
        say(jsonio.dumps_compact(result["signal"]))
    for record in result["outcomes"]:
        say(f"{record.get('timestamp')} {record.get('outcome')} ({record.get('rule')}): {record.get('detail')}")


@app.command("log")
def log(
    ctx: typer.Context,
    limit: int = typer.Option(20, "--limit", "-n", help="How many of the latest outcomes."),
    type_prefix: str | None = typer.Option(None, "--type", help="Only types starting with this (FEATURE_READY)."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
    fmt: str | None = format_option(),
    quiet: bool = quiet_option(),
) -> None:
    """What the latest consumed signals did (logs/signals.jsonl), newest last."""
    from loki.signals.outcomes import recent

    output = resolve_format(fmt, quiet, json_output)
    records = recent(store_from(ctx), limit, type_prefix=type_prefix)

    def people() -> None:
        table(None, ["id", "at", "outcome", "detail"],
              [[r.get("id"), r.get("timestamp"), r.get("outcome"), r.get("detail")] for r in records])
        footer(plural(len(records), "outcome"))

    print_listing(output, {"total": len(records), "outcomes": records}, records, "id", people)


def outcome_line(record: dict[str, Any]) -> str:
    """One outcome for people: ``10:00:01 TESTS_PASSED_auth applied: t1: in-progress -> completed``."""
    stamp = str(record.get("timestamp", ""))[11:19]
    return f"{stamp} {record.get('name')} {record.get('outcome')}: {record.get('detail')}"


@app.command("rules")
def rules_(json_output: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """The rule table: what the watcher does with each signal type."""
    from loki.watch.rules import table as rule_table

    rows = rule_table()
    if json_output:
        print_json({"rules": rows})
        return
    table(None, ["signal", "rule", "effect"], [[r["signal"], r["rule"], r["effect"]] for r in rows])
