"""The live view of ``loki watch``: a :mod:`loki.signals.dashboard` snapshot drawn with rich.

Pure functions from a snapshot (a dict) to a renderable, so tests draw it on a recording
console and check what it says.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from loki.textsafe import for_terminal

STATE_STYLE = {"CLOSED": "green", "OPEN": "bold red", "HALF_OPEN": "yellow"}
OUTCOME_STYLE = {"applied": "green", "already_applied": "cyan", "skipped": "yellow", "logged": "",
                 "archived": "magenta", "quarantined": "bold red", "rejected": "red"}
QUEUE_ORDER = ("pending", "in-progress", "blocked", "completed", "failed", "cancelled", "dead-letter", "abandoned")


def lease_left(seconds: int | None) -> str:
    """``12m03s``, ``1h05m``, ``EXPIRED 40s ago``."""
    if seconds is None:
        return "-"
    if seconds < 0:
        return f"EXPIRED {_span(-seconds)} ago"
    return _span(seconds)


def _span(seconds: int) -> str:
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


def _cut(text: Any, width: int) -> str:
    value = for_terminal(" ".join(str(text or "").split()))
    return value if len(value) <= width else value[: width - 1] + "…"


def header(snap: dict[str, Any], message: str | None = None) -> Text:
    if snap.get("consuming"):
        role = Text("consuming", style="bold green")
    elif snap.get("consuming") is False:
        holder = snap.get("holder") or {}
        role = Text(f"display-only (pid {holder.get('pid', '?')} consumes)", style="bold yellow")
    else:
        role = Text("view")
    sig = snap["signals"]
    line = Text.assemble(("loki watch ", "bold"), role, f"  {snap['now']}  {for_terminal(str(snap['root']))}\n",
                         f"signals: {sig['waiting']} waiting, {sig['processing']} processing, "
                         f"{sig['quarantined']} quarantined, drift backlog {sig['drift_pending_bytes']} bytes")
    if message:
        line.append(f"\n{for_terminal(message)}", style="dim")
    return line


def queue_table(snap: dict[str, Any]) -> Table:
    grid = Table(title="queue", title_justify="left", show_header=True, header_style="bold")
    counts = snap["queue"]
    for state in QUEUE_ORDER:
        grid.add_column(state, justify="right")
    grid.add_row(*[str(counts.get(state, 0)) for state in QUEUE_ORDER])
    return grid


def in_progress_table(snap: dict[str, Any]) -> Table:
    held = snap["in_progress"]
    shown = len(held["tasks"])
    title = f"in progress ({held['total']}" + (f", soonest {shown} leases)" if held["total"] > shown else ")")
    grid = Table(title=title, title_justify="left", header_style="bold")
    for column in ("task", "holder", "lease left", "title"):
        grid.add_column(column)
    for task in held["tasks"]:
        left = task["lease_left"]
        grid.add_row(for_terminal(str(task["id"])), _cut(task["holder"], 24),
                     Text(lease_left(left), style="bold red" if left is not None and left < 0 else ""),
                     _cut(task["title"], 50))
    return grid


def breakers_table(snap: dict[str, Any]) -> Table:
    grid = Table(title=f"breakers ({len(snap['breakers'])})", title_justify="left", header_style="bold")
    for column in ("breaker", "state", "failures", "cooldown"):
        grid.add_column(column)
    for b in snap["breakers"]:
        cooldown = f"{b['cooldown_remaining']}s left" if b["cooldown_remaining"] is not None else ""
        grid.add_row(_cut(b["name"], 30), Text(for_terminal(str(b["state"])), style=STATE_STYLE.get(b["state"], "")),
                     f"{b['failures']}/{b['threshold']}", cooldown)
    return grid


def recent_table(snap: dict[str, Any]) -> Table:
    grid = Table(title="last signals", title_justify="left", header_style="bold")
    for column in ("time", "signal", "outcome", "what it did"):
        grid.add_column(column)
    for record in reversed(snap["recent"]):
        outcome = str(record.get("outcome", ""))
        grid.add_row(str(record.get("timestamp", ""))[11:19], _cut(record.get("name"), 34),
                     Text(outcome, style=OUTCOME_STYLE.get(outcome, "")), _cut(record.get("detail"), 80))
    return grid


def escalations_table(snap: dict[str, Any]) -> Table:
    escalations = snap["escalations"]
    grid = Table(title=f"open escalations ({escalations['open']})", title_justify="left", header_style="bold")
    for column in ("file", "task", "trigger"):
        grid.add_column(column)
    for item in escalations["items"]:
        grid.add_row(_cut(item.get("file"), 44), _cut(item.get("task_id"), 24), _cut(item.get("trigger"), 60))
    return grid


def render(snap: dict[str, Any], message: str | None = None) -> RenderableType:
    side = Table.grid(padding=(0, 2))
    side.add_row(queue_table(snap), breakers_table(snap))
    return Group(header(snap, message), side, in_progress_table(snap), recent_table(snap), escalations_table(snap))
