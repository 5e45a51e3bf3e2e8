"""The board at ``/``: the tree for the people running the team, live, and the few actions they take.

What it shows comes from the library, the calls the CLI makes (``Queue.list_tasks``, ``Queue.history``,
``agents.roster``, ``Breakers.status``, ``escalations.list_escalations``, ``DeadLetter.list_entries``); what it
does goes through them too (:data:`ACTIONS`), so a change made here is recorded exactly as the same command
would record it, with the server's user as who. Rendering is plain HTML built here, every piece of stored
text escaped (:func:`esc`): titles, errors and names are written by agents, and are hostile.
"""

from __future__ import annotations

import html
import os
import urllib.parse
from collections.abc import Callable
from typing import Any

from loki.storage.state import StateStore as Store

STATES = ("pending", "in-progress", "landing", "blocked", "completed", "failed", "cancelled", "dead-letter")
PRIORITIES = ("high", "medium", "low")
SHOWN = 200


def esc(value: object) -> str:
    """Stored text as HTML text: markup escaped, control characters shown as escapes (as the CLI does)."""
    from loki.text.textsafe import for_terminal

    return html.escape(for_terminal("" if value is None else str(value)), quote=True)


def who() -> str:
    return os.environ.get("USER") or "board"


# -- what the board reads --------------------------------------------------------------------------


def snapshot(store: Store, filters: dict[str, str]) -> dict[str, Any]:
    """Everything the live part of the page shows, for ``filters`` (state, type, q, agent)."""
    from loki.breakers.breakers import Breakers
    from loki.queue import agents, escalations
    from loki.queue.deadletter import DeadLetter
    from loki.queue.queue import Queue

    queue = Queue(store)
    counts = {}
    for state in STATES:
        counts[state] = queue.list_tasks(state, limit=0)["total"]
    state = filters.get("state") or "all"
    listed = queue.list_tasks(state if state in STATES else "all", type=filters.get("type") or None,
                              agent=filters.get("agent") or None, limit=None)
    words = (filters.get("q") or "").lower()
    tasks = [t for t in listed["tasks"] if not words or words in str(t.get("title", "")).lower()
             or words in str(t.get("id", "")).lower()]
    return {
        "counts": counts,
        "tasks": tasks[:SHOWN],
        "total": len(tasks),
        "agents": agents.roster(store)["agents"],
        "breakers": [b.to_json() for b in Breakers(store).status()],
        "escalations": escalations.list_escalations(store, open_only=True),
        "deadletter": DeadLetter(store).list_entries()["entries"],
    }


def task_detail(store: Store, task_id: str) -> dict[str, Any]:
    from loki.queue.queue import Queue

    queue = Queue(store)
    return {"task": queue.show(task_id), "history": queue.history(task_id)}


# -- what the board does ---------------------------------------------------------------------------


def _approve(store: Store, form: dict[str, str]) -> str:
    from loki.watch.approvals import approve_any

    decision = form.get("decision", "approve")
    result = approve_any(store, _required(form, "id"), decision, note=form.get("note") or None, approver=who())
    return f"{decision} recorded for {result['escalation'] or form['id']}"


def _close(store: Store, form: dict[str, str]) -> str:
    from loki.queue.escalations import close

    result = close(store, _required(form, "id"), note=_required(form, "note"), by=who())
    return f"closed {result['id']}"


def _retry(store: Store, form: dict[str, str]) -> str:
    from loki.queue.deadletter import DeadLetter

    DeadLetter(store).retry(_required(form, "id"), approach=form.get("approach") or None, by=who())
    return f"{form['id']}: back to pending"


def _abandon(store: Store, form: dict[str, str]) -> str:
    from loki.queue.deadletter import DeadLetter

    DeadLetter(store).abandon(_required(form, "id"), _required(form, "reason"), by=who())
    return f"{form['id']}: abandoned"


def _cancel(store: Store, form: dict[str, str]) -> str:
    from loki.queue.queue import Queue

    outcome = Queue(store).cancel(_required(form, "id"), reason=form.get("reason") or None,
                                  force=form.get("force") == "yes", by=who())
    return f"cancelled {', '.join(outcome['cancelled'])}"


def _priority(store: Store, form: dict[str, str]) -> str:
    from loki.errors import InvalidInput
    from loki.queue.queue import Queue

    priority = _required(form, "priority")
    if priority not in PRIORITIES:
        raise InvalidInput(f"priority must be one of {', '.join(PRIORITIES)} (got {priority!r})", field="priority")
    Queue(store).edit(_required(form, "id"), by=who(), force=True, priority=priority)
    return f"{form['id']}: priority {priority}"


def _required(form: dict[str, str], name: str) -> str:
    from loki.errors import InvalidInput

    value = form.get(name, "").strip()
    if not value:
        raise InvalidInput(f"the form field {name!r} is empty", field=name)
    return value


ACTIONS: dict[str, Callable[[Store, dict[str, str]], str]] = {
    "approve": _approve, "close": _close, "retry": _retry, "abandon": _abandon, "cancel": _cancel,
    "priority": _priority,
}


# -- rendering -------------------------------------------------------------------------------------

STYLE = """
:root{color-scheme:light dark;--line:#8884;--muted:#888}
body{font:15px/1.4 system-ui,sans-serif;margin:0;padding:0 12px 24px}
header{display:flex;flex-wrap:wrap;gap:8px 16px;align-items:baseline;padding:10px 0;border-bottom:1px solid var(--line)}
h1{font-size:18px;margin:0}h2{font-size:16px;margin:18px 0 6px}
a{color:inherit}.muted{color:var(--muted)}
nav a{margin-right:10px;white-space:nowrap}
.grid{display:grid;grid-template-columns:minmax(0,1fr);gap:0 24px}
@media(min-width:1000px){.grid{grid-template-columns:minmax(0,2fr) minmax(0,1fr)}}
.scroll{overflow-x:auto}
table{border-collapse:collapse;width:100%}
td,th{text-align:left;padding:4px 6px;border-bottom:1px solid var(--line);vertical-align:top}
td.title{word-break:break-word;min-width:12em}
form.inline{display:inline-flex;flex-wrap:wrap;gap:4px;margin:2px 0}
input,select,button{font:inherit;padding:2px 6px}
.state{font-weight:600}#live-status{font-size:13px}
.flash{padding:6px 10px;border:1px solid var(--line);margin:8px 0}
"""

SCRIPT = """
(function(){if(!window.EventSource)return;var s=document.getElementById('live-status');
var l=document.getElementById('live');var q=new URLSearchParams(location.search);
q.set('since',l?l.getAttribute('data-version'):'');var es=new EventSource('/events?'+q.toString());
es.addEventListener('live',function(e){var d=document.getElementById('live');if(d){d.innerHTML=e.data;}
if(s){s.textContent='live';}});es.onopen=function(){if(s){s.textContent='live';}};es.onerror=function(){if(s){s.textContent='reconnecting';}};})();
"""


def page(title: str, body: str, *, live: bool = False) -> str:
    script = f"<script>{SCRIPT}</script>" if live else ""
    status = '<span id="live-status" class="muted">static</span>' if live else ""
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width,initial-scale=1">'
            f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>"
            f'<header><h1><a href="/">loki</a></h1><span class="muted">{esc(title)}</span>{status}</header>'
            f"{body}{script}</body></html>")


def _form(action: str, csrf: str, fields: dict[str, str], inputs: str, button: str) -> str:
    hidden = "".join(f'<input type="hidden" name="{esc(k)}" value="{esc(v)}">' for k, v in fields.items())
    return (f'<form class="inline" method="post" action="/action/{action}">'
            f'<input type="hidden" name="csrf" value="{esc(csrf)}">{hidden}{inputs}'
            f'<button type="submit">{esc(button)}</button></form>')


def board_body(data: dict[str, Any], filters: dict[str, str], csrf: str, where: str) -> str:
    region = live_region(data, csrf)
    return (_filters(data, filters) + f'<div id="live" data-version="{version(region)}">{region}</div>'
            + f'<p class="muted">{esc(where)}</p>')


def version(region: str) -> str:
    """What a page or a stream already shows: the live feed sends only what differs."""
    import hashlib

    return hashlib.sha256(region.encode()).hexdigest()[:16]


def _filters(data: dict[str, Any], filters: dict[str, str]) -> str:
    options = "".join(f'<option value="{s}"{" selected" if filters.get("state") == s else ""}>{s}</option>'
                      for s in ("all", *STATES))
    return (f'<form method="get" action="/" class="inline"><select name="state" aria-label="state">{options}</select>'
            f'<input name="type" placeholder="type" value="{esc(filters.get("type", ""))}" size="8">'
            f'<input name="agent" placeholder="agent" value="{esc(filters.get("agent", ""))}" size="8">'
            f'<input name="q" placeholder="title or id" value="{esc(filters.get("q", ""))}" size="14">'
            f'<button type="submit">filter</button></form>')


def live_region(data: dict[str, Any], csrf: str) -> str:
    links = " ".join(f'<a href="/?state={s}">{s} <b data-count="{s}">{data["counts"][s]}</b></a>' for s in STATES)
    rows = "".join(
        f'<tr data-task="{esc(t["id"])}"><td><a href="/task/{urllib.parse.quote(str(t["id"]))}">{esc(t["id"])}</a>'
        f'</td><td class="title">{esc(t.get("title"))}</td><td class="state">{esc(t.get("state"))}</td>'
        f'<td>{esc(t.get("priority"))}</td><td>{esc(t.get("type"))}</td><td>{esc(t.get("claimed_by") or "")}</td>'
        f'<td>{esc(t.get("lease_until") or "")}</td></tr>' for t in data["tasks"])
    more = f'<p class="muted">{data["total"] - len(data["tasks"])} more not shown</p>' if data["total"] > SHOWN else ""
    queue = (f'<h2>Queue ({data["total"]})</h2><div class="scroll"><table id="queue"><thead><tr><th>id</th>'
             f"<th>title</th><th>state</th><th>priority</th><th>type</th><th>agent</th><th>lease until</th></tr>"
             f"</thead><tbody>{rows}</tbody></table></div>{more}")
    escalations = "".join(
        f'<tr data-escalation="{esc(e.get("id"))}"><td>{esc(e.get("id"))}</td><td>{esc(e.get("task_id") or "")}</td>'
        f'<td>{esc(e.get("trigger") or "")}</td><td>'
        + _form("approve", csrf, {"id": str(e.get("id")), "decision": "approve"}, "", "approve")
        + _form("close", csrf, {"id": str(e.get("id"))},
                '<input name="note" placeholder="why" required size="10" aria-label="note">', "close")
        + "</td></tr>" for e in data["escalations"])
    deadletter = "".join(
        f'<tr><td>{esc(d.get("id"))}</td><td class="title">{esc(d.get("title"))}</td>'
        f'<td>{esc(d.get("last_error") or "")}</td><td>'
        + _form("retry", csrf, {"id": str(d.get("id"))}, "", "retry")
        + _form("abandon", csrf, {"id": str(d.get("id"))},
                '<input name="reason" placeholder="why" required size="10" aria-label="reason">', "abandon")
        + "</td></tr>" for d in data["deadletter"])
    agents = "".join(
        f'<tr><td>{esc(a.get("agent"))}</td><td>{esc(a.get("status"))}</td><td>{esc(a.get("task") or "")}</td>'
        f'<td>{esc("" if a.get("lease_left") is None else str(a["lease_left"]) + " s")}</td></tr>'
        for a in data["agents"])
    breakers = "".join(
        f'<tr><td>{esc(b.get("name"))}</td><td class="state">{esc(b.get("state"))}</td>'
        f'<td>{esc(b.get("failure_count"))}</td><td>{esc(b.get("last_error") or "")}</td></tr>'
        for b in data["breakers"])
    side = (_section("Escalations", "escalations", ["id", "task", "trigger", ""], escalations)
            + _section("Dead-letter queue", "deadletter", ["id", "title", "last error", ""], deadletter)
            + _section("Agents", "agents", ["agent", "status", "task", "lease left"], agents)
            + _section("Breakers", "breakers", ["name", "state", "failures", "last error"], breakers)
            + _events(data.get("events", [])))
    return f'<nav>{links}</nav><div class="grid"><section>{queue}</section><section>{side}</section></div>'


def _section(title: str, ident: str, heads: list[str], rows: str) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in heads)
    body = rows or f'<tr><td colspan="{len(heads)}" class="muted">none</td></tr>'
    return (f'<h2>{esc(title)}</h2><div class="scroll"><table id="{ident}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table></div>")


def _events(events: list[dict[str, str]]) -> str:
    items = "".join(f'<li><span class="muted">{esc(e["at"])}</span> {esc(e["text"])}</li>' for e in events)
    return f'<h2>Events</h2><ul id="events">{items or "<li class=muted>none yet</li>"}</ul>'


def task_body(detail: dict[str, Any], csrf: str) -> str:
    task = detail["task"]
    record = task.get("task", task)
    fields = ["id", "state", "title", "description", "priority", "type", "labels", "claimed_by", "lease_until",
              "created_at", "completed_at", "last_error", "max_attempts"]
    rows = "".join(f"<tr><th>{esc(f)}</th><td class=title>{esc(_shown(record.get(f, task.get(f))))}</td></tr>"
                   for f in fields if record.get(f, task.get(f)) not in (None, "", []))
    events = "".join(f"<tr><td>{esc(e.get('at'))}</td><td>{esc(e.get('event'))}</td><td>{esc(e.get('by') or '')}"
                     f"</td><td class=title>{esc(_event_text(e))}</td></tr>" for e in detail["history"]["events"])
    ident = str(record.get("id"))
    options = "".join(f'<option value="{p}"{" selected" if record.get("priority") == p else ""}>{p}</option>'
                      for p in PRIORITIES)
    actions = (_form("priority", csrf, {"id": ident}, f'<select name="priority" aria-label="priority">{options}'
                     f"</select>", "set priority")
               + _form("cancel", csrf, {"id": ident, "force": "yes"},
                       '<input name="reason" placeholder="why" size="12" aria-label="reason">', "cancel task"))
    return (f'<div class="scroll"><table id="task">{rows}</table></div><p>{actions}</p>'
            f'<h2>History</h2><div class="scroll"><table id="history"><thead><tr><th>at</th><th>event</th><th>by</th>'
            f"<th>detail</th></tr></thead><tbody>{events}</tbody></table></div>")


def _shown(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return str(value)


def _event_text(event: dict[str, Any]) -> str:
    skip = {"at", "event", "by"}
    return "; ".join(f"{k}: {_shown(v)}" for k, v in event.items() if k not in skip and v not in (None, ""))


def message_page(title: str, text: str, status: int) -> tuple[str, int]:
    return page(title, f'<p class="flash">{esc(text)}</p><p><a href="/">back to the board</a></p>'), status
