"""The live view of ``loki watch`` for a terminal of a given size, as lines of text (the view model).

:func:`compose` takes a :mod:`loki.watch.dashboard` snapshot, the :mod:`loki.watch.feed`, the
state the keys changed (:class:`View`) and the terminal's size, and returns at most ``height``
lines, each at most ``width`` cells wide: a line is a list of ``(text, tone)`` segments, and the CLI
only colours the tones (loki/cli/watchview.py). Everything about fitting is decided here, so it is
tested without a terminal, and an 80x24 terminal gets a screen made for it:

* **columns shrink by short forms first** (``lease left`` -> ``lease``, ``EXPIRED 40s ago`` ->
  ``-40s``, a full timestamp -> ``10:00:02``, the tree's path -> its project's name); only free
  text (a title, a trigger, an event's detail) and, as a last resort, a name too long for any
  column is cut, with ``…``. A column that does not fit at all is left out (an escalation's task:
  the escalation's id, which ``loki approve`` takes, ends with it), never squeezed into ``p… i… b…``;
* **panels fit or scroll**: the header, the queue counts and the key line always show; the rows
  left are shared between the in-progress tasks (soonest lease first), the open escalations and
  the feed of events, each saying how many it does not show; breakers take one line (the unusual
  ones named) unless the screen is tall enough for their table. The feed scrolls with the keys.

Widths are terminal cells: East Asian wide characters count two, combining marks none, and every
stored string goes through :func:`loki.text.textsafe.for_terminal` first.
"""

from __future__ import annotations

import unicodedata

from loki.text.textsafe import for_terminal
from loki.watch.feed import Feed

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any

    from loki.watch.feed import Entry

    Segment = tuple[str, str]
    Line = list[Segment]

ELLIPSIS = "…"
GAP = 2
TALL = 40
"""From this many rows the breakers get their table instead of one line."""
QUEUE_STATES = (("pending", "pend"), ("in-progress", "held"), ("blocked", "blkd"), ("completed", "done"),
                ("failed", "fail"), ("cancelled", "canc"), ("dead-letter", "dead"), ("abandoned", "aban"))
QUEUE_TONE = {"blocked": "warn", "failed": "bad", "dead-letter": "bad"}
STATE_TONE = {"CLOSED": "ok", "OPEN": "bad", "HALF_OPEN": "warn"}
HELP = (
    ("keys", ""),
    ("  q", "quit (Ctrl-C too): the signal in hand is finished first"),
    ("  p", "pause the screen; the watcher keeps consuming; p again resumes"),
    ("  ?", "this help; any key closes it"),
    ("  ↑ k  ↓ j", "scroll the events back and forward (PgUp/PgDn: a page)"),
    ("  End G", "back to the newest event"),
    ("panels", ""),
    ("  queue", "tasks per state (held: in progress, dead: dead-letter)"),
    ("  breakers", "circuit breakers that are not CLOSED, and how many are"),
    ("  in progress", "held tasks, the soonest lease first; the tick requeues EXPIRED"),
    ("  escalations", "waiting for a human: loki approve ID (the id shown), loki escalations show ID"),
    ("  events", "signals applied, leases expired, reviews, breaker changes,"),
    ("", "strikes and escalations; --no-tui prints the same as lines"),
)


# -- text in cells --------------------------------------------------------------------------------------


def cells(text: str) -> int:
    """How many terminal cells ``text`` takes."""
    if text.isascii():
        return len(text)
    width = 0
    for char in text:
        if unicodedata.combining(char):
            continue
        width += 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1
    return width


def clean(value: Any) -> str:
    """A stored value on one line, safe for a terminal (control characters shown as escapes)."""
    return for_terminal(" ".join(str("" if value is None else value).split()))


def cut(text: str, width: int) -> str:
    """``text`` in at most ``width`` cells, ending in ``…`` when something was cut."""
    if cells(text) <= width:
        return text
    if width <= 0:
        return ""
    kept, used = [], 0
    for char in text:
        size = cells(char)
        if used + size > width - 1:
            break
        kept.append(char)
        used += size
    return "".join(kept) + ELLIPSIS


def pad(text: str, width: int, *, right: bool = False) -> str:
    space = " " * max(0, width - cells(text))
    return space + text if right else text + space


def line_width(line: Line) -> int:
    return sum(cells(text) for text, _ in line)


def plain(lines: list[Line]) -> str:
    """The screen as text, trailing spaces dropped (what ``tmux capture-pane -p`` shows)."""
    return "\n".join("".join(text for text, _ in line).rstrip() for line in lines)


def span(seconds: int) -> str:
    """``45s``, ``12m03s``, ``1h05m``."""
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


def lease_forms(seconds: int | None) -> list[str]:
    """A lease's time left, longest form first: ``12m03s``; ``EXPIRED 40s ago``, ``-40s``."""
    if seconds is None:
        return ["-"]
    if seconds < 0:
        return [f"EXPIRED {span(-seconds)} ago", f"-{span(-seconds)}"]
    return [span(seconds)]


def lease_left(seconds: int | None) -> str:
    """``12m03s``, ``1h05m``, ``EXPIRED 40s ago``."""
    return lease_forms(seconds)[0]


def human_bytes(count: int) -> str:
    """``512 B``, ``12.0 KiB``, ``3.5 MiB``."""
    if count < 1024:
        return f"{count} B"
    if count < 1024 * 1024:
        return f"{count / 1024:.1f} KiB"
    return f"{count / (1024 * 1024):.1f} MiB"


def time_forms(timestamp: Any) -> list[str]:
    """``2026-01-25T10:00:02Z`` -> that, ``01-25 10:00``, ``10:00``."""
    text = str(timestamp or "")
    if len(text) < 19:
        return [clean(text) or "-"]
    return [text, f"{text[5:10]} {text[11:16]}", text[11:16]]


# -- fitting a line of fields ----------------------------------------------------------------------------


def squeeze(fields: list[list[str]], width: int, sep: str, order: list[int]) -> list[str]:
    """One form of each field so that they fit ``width`` joined by ``sep``: the fields in ``order``
    take their shorter forms first, one step at a time; the last field is cut if nothing else helps."""
    level = [0] * len(fields)
    chosen = [forms[0] for forms in fields]

    def total() -> int:
        return sum(cells(text) for text in chosen) + cells(sep) * (len(chosen) - 1)

    for index in order:
        while total() > width and level[index] + 1 < len(fields[index]):
            level[index] += 1
            chosen[index] = fields[index][level[index]]
    if total() > width:
        chosen[-1] = cut(chosen[-1], max(1, cells(chosen[-1]) - (total() - width)))
    return chosen


# -- tables whose columns have short forms -----------------------------------------------------------------


class Column:
    """A table column: its header and each row's value, each as forms from the longest to the shortest.

    ``flex``: free text that takes the width left and is cut; ``optional``: left out (in the order
    of the number given, lowest first) when the others do not fit; ``cap``: the most cells a fixed
    column takes before its values are cut.
    """

    __slots__ = ("cap", "flex", "header", "minimum", "optional", "right", "tones", "values")

    def __init__(self, header: list[str], values: list[list[str]], *, flex: bool = False, optional: int = 0,
                 right: bool = False, tones: list[str] | None = None, minimum: int = 12, cap: int = 40) -> None:
        self.header = header
        self.values = values
        self.flex = flex
        self.optional = optional
        self.right = right
        self.tones = tones or [""] * len(values)
        self.minimum = minimum
        self.cap = cap

    def forms(self) -> int:
        return max([len(self.header), *(len(v) for v in self.values)])

    def at(self, level: int) -> tuple[str, list[str]]:
        return (self.header[min(level, len(self.header) - 1)],
                [v[min(level, len(v) - 1)] for v in self.values])

    def width(self, level: int) -> int:
        head, values = self.at(level)
        return max([cells(head), *(cells(v) for v in values)])


def table(columns: list[Column], width: int) -> list[Line]:
    """The header line and the rows, in ``width`` cells (see :class:`Column` for how it shrinks)."""
    shown = list(columns)
    levels = {id(c): 0 for c in columns}

    def needed() -> int:
        fixed = sum(min(c.cap, c.width(levels[id(c)])) for c in shown if not c.flex)
        flex = sum(min(c.minimum, c.width(0)) for c in shown if c.flex)
        return fixed + flex + GAP * (len(shown) - 1)

    for column in sorted((c for c in columns if not c.flex), key=lambda c: -c.width(0)):
        while needed() > width and levels[id(column)] + 1 < column.forms():
            levels[id(column)] += 1
    for column in sorted((c for c in columns if c.optional), key=lambda c: c.optional):
        if needed() > width:
            shown.remove(column)
    widths = {id(c): min(c.cap, c.width(levels[id(c)])) for c in shown if not c.flex}
    left = width - sum(widths.values()) - GAP * (len(shown) - 1)
    flexible = [c for c in shown if c.flex]
    for column in flexible:
        widths[id(column)] = max(1, min(column.width(0), left // len(flexible)))
    if not flexible and left < 0:  # only fixed columns, still too wide: the widest gives way
        widest = max(shown, key=lambda c: widths[id(c)])
        widths[id(widest)] = max(1, widths[id(widest)] + left)
    rows = len(columns[0].values) if columns else 0
    lines: list[Line] = []
    for row in range(-1, rows):
        line: Line = []
        for index, column in enumerate(shown):
            head, values = column.at(0 if column.flex else levels[id(column)])
            text = head if row < 0 else values[row]
            size = widths[id(column)]
            last = index == len(shown) - 1
            cell = cut(text, size)
            cell = cell if last and not column.right else pad(cell, size, right=column.right)
            tone = "head" if row < 0 else column.tones[row]
            line.append((cell, tone))
            if not last:
                line.append((" " * GAP, ""))
        lines.append(line)
    return lines


# -- what the keys change ------------------------------------------------------------------------------


class View:
    """The view's state: paused, help shown, where the feed is scrolled, quit asked.

    ``pin`` is the feed position (:attr:`Feed.total`) the feed is held at while paused or scrolled
    back, ``back`` how many entries before it the view ends; both None/0: the newest, live.
    """

    PAGE = 10

    def __init__(self) -> None:
        self.paused = False
        self.help = False
        self.quit = False
        self.pin: int | None = None
        self.back = 0

    def press(self, key: str, feed: Feed) -> None:
        """Apply one key (a character, or ``up``, ``down``, ``pageup``, ``pagedown``, ``home``, ``end``,
        ``escape``). With the help shown, ``q`` still quits and any other key closes it."""
        if key in ("q", "Q"):
            self.quit = True
        elif self.help:
            self.help = False
        elif key == "?":
            self.help = True
        elif key in ("p", "P", " "):
            self.toggle_pause(feed)
        elif key in ("up", "k", "pageup", "home", "g"):
            step = {"up": 1, "k": 1, "pageup": self.PAGE}.get(key, len(feed.entries))
            if self.pin is None:
                self.pin = feed.total
            self.back = min(self.back + step, max(0, len(feed.entries) - (feed.total - self.pin) - 1))
        elif key in ("down", "j", "pagedown", "end", "G"):
            step = {"down": 1, "j": 1, "pagedown": self.PAGE}.get(key, self.back)
            self.back = max(0, self.back - step)
            if self.back == 0 and not self.paused:
                self.pin = None

    def toggle_pause(self, feed: Feed) -> None:
        self.paused = not self.paused
        if self.paused and self.pin is None:
            self.pin = feed.total
        elif not self.paused and self.back == 0:
            self.pin = None


# -- the screen ----------------------------------------------------------------------------------------


def compose(snap: dict[str, Any], feed: Feed, view: View, width: int, height: int) -> list[Line]:
    """The whole screen: at most ``height`` lines of at most ``width`` cells."""
    width, height = max(20, width), max(6, height)
    top = [title_line(snap, view, width), signals_line(snap, width)]
    queue = queue_lines(snap, width, rows=2 if height >= 20 else 1)
    footer = [keys_line(view, feed, width)]
    room = height - len(top) - len(queue) - len(footer)
    body = help_lines(width) if view.help else panels(snap, feed, view, width, room, tall=height >= TALL)
    body = body[:room] + [[] for _ in range(room - len(body))]
    # Every part fits by itself down to 80 columns or so; below that, the end of a line gives way.
    return [_fit(line, width) for line in (*top, *queue, *body, *footer)]


def title_line(snap: dict[str, Any], view: View, width: int) -> Line:
    if snap.get("consuming"):
        roles, tone = ["consuming"], "ok"
    elif snap.get("consuming") is False:
        pid = (snap.get("holder") or {}).get("pid", "?")
        roles, tone = [f"display-only (pid {pid} consumes)", f"display-only (pid {pid})", "display-only"], "warn"
    else:
        roles, tone = ["view"], ""
    root = clean(snap.get("root"))
    project = root.rstrip("/").rsplit("/", 2)
    roots = [root, "/".join(project[-2:]) if len(project) > 1 else root]
    mark = "  PAUSED" if view.paused else ""
    now = str(snap.get("now") or "")
    fields = squeeze([["loki watch"], roles, [now, now[11:19]], roots], width - cells(mark), " · ",
                     [3, 2, 1, 3])
    line: Line = [(fields[0], "title")]
    for text, part_tone in zip(fields[1:], (tone, "", "dim"), strict=True):
        line += [(" · ", "dim"), (text, part_tone)]
    if mark:
        line.append((mark, "warn"))
    return line


def signals_line(snap: dict[str, Any], width: int) -> Line:
    sig = snap["signals"]
    backlog = human_bytes(int(sig.get("drift_pending_bytes") or 0))
    fields = [["signals"], [f"{sig['waiting']} waiting"],
              [f"{sig['processing']} processing", f"{sig['processing']} in hand"],
              [f"{sig['quarantined']} quarantined", f"{sig['quarantined']} bad"],
              [f"drift backlog {backlog}", f"drift {backlog}"]]
    chosen = squeeze(fields, width, "  ", [4, 3, 2])
    tones = ["head", "warn" if sig["waiting"] else "", "", "bad" if sig["quarantined"] else "", ""]
    return _joined(chosen, tones, "  ")


def queue_lines(snap: dict[str, Any], width: int, *, rows: int) -> list[Line]:
    """Tasks per state: one line when it fits, else two (``rows=2``), else one line of short names."""
    counts = snap["queue"]
    label = "queue  "

    failing = int(snap.get("checks_failing") or 0)

    def items(short: bool) -> list[tuple[str, str, str]]:
        found = [(name if not short else abbr, str(counts.get(name, 0)),
                  QUEUE_TONE.get(name, "") if counts.get(name, 0) else "") for name, abbr in QUEUE_STATES]
        if counts.get("landing", 0):  # verified, waiting for their commit to reach their branch (docs/verify.md)
            found.insert(2, ("landing" if not short else "land", str(counts["landing"]), "warn"))
        if failing:  # tasks whose declared check failed at their last attempt (docs/verify.md)
            found.append(("checks failing" if not short else "chk!", str(failing), "bad"))
        return found

    def render(parts: list[tuple[str, str, str]], first: bool) -> Line:
        line: Line = [(label if first else " " * len(label), "head")]
        for index, (name, count, tone) in enumerate(parts):
            if index:
                line.append(("  ", ""))
            line += [(name + " ", "dim"), (count, tone)]
        return line

    full = items(short=False)
    one = render(full, True)
    if line_width(one) <= width:
        return [one]
    if rows >= 2:
        half = (len(full) + 1) // 2
        two = [render(full[:half], True), render(full[half:], False)]
        if max(line_width(line) for line in two) <= width:
            return two
    return [_fit(render(items(short=True), True), width)]


def keys_line(view: View, feed: Feed, width: int) -> Line:
    keys = [("q", "quit"), ("p", "resume" if view.paused else "pause"), ("?", "help"), ("↑↓", "scroll")]
    if view.back:
        keys.append(("End", "newest"))
    line: Line = []
    for key, what in keys:
        line += [(key, "key"), (f" {what}   ", "dim")]
    return _fit(line, width)


def help_lines(width: int) -> list[Line]:
    lines: list[Line] = [[("help", "title"), (" (any key closes it)", "dim")]]
    for key, text in HELP:
        lines.append(_fit([(pad(key, 15) if text else key, "key" if text else "head"), (text, "")], width))
    return lines


# -- the panels ---------------------------------------------------------------------------------------------


def panels(snap: dict[str, Any], feed: Feed, view: View, width: int, room: int, *, tall: bool) -> list[Line]:
    """Breakers, in-progress tasks, open escalations and the events, in ``room`` rows.

    Each panel first gets the least it can show (a title; a header and one row when it has rows), then
    the panels that want more get one row each in turn. The breakers keep one line unless the screen
    is ``tall`` and their table is small next to it, or everything else fits and rows are left."""
    held = snap["in_progress"]
    escalations = snap["escalations"]["items"]
    breakers = sorted(snap["breakers"], key=lambda b: (b["state"] == "CLOSED", str(b["name"])))
    entries = len(feed.entries)
    # (minimum, most it can use): a title line, a column header line, rows.
    want = {"held": (3, 2 + len(held["tasks"])) if held["tasks"] else (1, 1),
            "escalations": (3, 2 + len(escalations)) if escalations else (1, 1),
            "events": (1 + min(2, entries), 1 + entries) if entries else (2, 2)}
    table_rows = 2 + len(breakers) if breakers else 1
    give = {name: low for name, (low, _) in want.items()}
    give["breakers"] = 1
    spare = room - sum(give.values())
    if breakers and tall and table_rows - 1 <= spare // 3:
        give["breakers"], spare = table_rows, spare - (table_rows - 1)
    while spare > 0:
        hungry = [name for name in ("held", "events", "escalations") if give[name] < want[name][1]]
        if not hungry:
            break
        for name in hungry:
            if spare > 0:
                give[name] += 1
                spare -= 1
    if spare > 0 and breakers and give["breakers"] == 1 and spare >= table_rows - 1:
        give["breakers"] = table_rows
    body = [*breakers_panel(breakers, width, give["breakers"]), *held_panel(held, width, give["held"]),
            *escalations_panel(snap["escalations"], width, give["escalations"])]
    return body + events_panel(feed, view, width, max(1, room - len(body)))


def breakers_panel(breakers: list[dict[str, Any]], width: int, rows: int) -> list[Line]:
    if not breakers:
        return [[("breakers", "head"), ("  none recorded", "dim")]]
    if rows <= 1:
        return [breakers_line(breakers, width)]
    shown = breakers[: rows - 2]
    title = f"breakers ({len(breakers)})" if len(shown) == len(breakers) else \
        f"breakers ({len(breakers)}, {len(shown)} shown)"
    columns = [
        Column(["breaker"], [[clean(b["name"])] for b in shown], cap=max(12, width // 3)),
        Column(["state"], [[b["state"]] for b in shown], tones=[STATE_TONE.get(b["state"], "") for b in shown]),
        Column(["failures", "fails"], [[f"{b['failures']}/{b['threshold']}"] for b in shown], right=True),
        Column(["cooldown", "wait"], [_cooldown(b) for b in shown]),
        Column(["last error"], [[clean(b.get("last_error") or "")] for b in shown], flex=True, optional=1),
    ]
    return [[(title, "head")], *table(columns, width)]


def _cooldown(breaker: dict[str, Any]) -> list[str]:
    left = breaker.get("cooldown_remaining")
    return [f"{left}s left", f"{left}s"] if left is not None else [""]


def breakers_line(breakers: list[dict[str, Any]], width: int) -> Line:
    """The unusual breakers by name, the closed ones counted: ``api/claude OPEN 298s · 2 closed``."""
    unusual = [b for b in breakers if b["state"] != "CLOSED"]
    closed = len(breakers) - len(unusual)
    named: list[Line] = []
    for breaker in unusual:
        item: Line = [(clean(breaker["name"]), ""), (" ", ""), (breaker["state"], STATE_TONE.get(breaker["state"], ""))]
        if breaker.get("cooldown_remaining") is not None:
            item.append((f" {breaker['cooldown_remaining']}s", "dim"))
        named.append(item)
    for count in range(len(named), -1, -1):  # as many named as fit, the rest counted
        items = named[:count]
        if count < len(named):
            items = [*items, [(f"+{len(named) - count} more", "dim")]]
        if closed:
            items = [*items, [(f"{closed} closed", "dim")]]
        line: Line = [("breakers", "head"), ("  ", "")]
        for index, item in enumerate(items):
            line += ([(" · ", "dim")] if index else []) + item
        if line_width(line) <= width or count == 0:
            return _fit(line, width)
    return []  # pragma: no cover - count 0 always returns


def held_panel(held: dict[str, Any], width: int, rows: int) -> list[Line]:
    tasks = held["tasks"][: max(0, rows - 2)]
    total = held["total"]
    if not tasks:
        return [[("in progress", "head"), ("  none" if not total else f"  {total}", "dim")]]
    more = "" if len(tasks) == total else f", the {len(tasks)} soonest leases"
    title = squeeze([["in progress"], [f"({total}{more})", f"({total}, {len(tasks)} shown)"]], width, " ", [1])
    columns = [
        Column(["task"], [[clean(t["id"])] for t in tasks], cap=max(12, width // 3)),
        Column(["holder", "agent"], [[clean(t["holder"] or "-")] for t in tasks], cap=24),
        Column(["lease left", "lease"], [lease_forms(t["lease_left"]) for t in tasks], right=True,
               tones=["bad" if (t["lease_left"] or 0) < 0 else "" for t in tasks]),
        Column(["title"], [[clean(t["title"])] for t in tasks], flex=True),
    ]
    return [[(" ".join(title), "head")], *table(columns, width)]


def escalations_panel(escalations: dict[str, Any], width: int, rows: int) -> list[Line]:
    items = escalations["items"][-max(0, rows - 2):] if rows > 2 else []
    total = escalations["open"]
    if not items:
        return [[("open escalations", "head"), ("  none" if not total else f"  {total}", "dim")]]
    more = "" if len(items) == total else f", the {len(items)} newest"
    title = squeeze([["open escalations"], [f"({total}{more})", f"({total}, {len(items)} shown)"]], width, " ", [1])
    columns = [
        Column(["opened"], [time_forms(e.get("created_at"))[1:] or ["-"] for e in items]),
        # The escalation's id is what `loki approve` is typed with, and it ends with the task's id: when
        # the line is short, the task column gives way, never the id.
        Column(["task"], [[clean(e.get("task_id") or "-")] for e in items], optional=1, cap=max(12, width // 4)),
        Column(["trigger"], [[clean(e.get("trigger") or "")] for e in items], flex=True, minimum=16),
        Column(["escalation"], [[clean(e.get("id"))] for e in items], cap=60),
    ]
    return [[(" ".join(title), "head")], *table(columns, width)]


def events_panel(feed: Feed, view: View, width: int, rows: int) -> list[Line]:
    entries, older, newer = feed.window(rows - 1, upto=view.pin, back=view.back)
    notes = []
    if view.paused:
        since = feed.total - view.pin if view.pin is not None else 0
        notes.append(f"paused, {since} new" if since else "paused")
    if view.back:
        notes.append(f"{newer} newer below (End: newest)")
    title: Line = [("events", "head")]
    if notes:
        title.append(("  " + " · ".join(notes), "warn"))
    if older and not view.back and not view.paused:
        title.append((f"  ({older} earlier: ↑ scrolls)", "dim"))
    lines = [_fit(title, width)]
    if not entries:
        return [*lines, [("  nothing yet", "dim")]]
    label = max(cells(e.label) for e in entries)
    return [*lines, *(_entry_line(e, label, width) for e in entries)]


def _entry_line(item: Entry, label: int, width: int) -> Line:
    head: Line = [(item.stamp, "dim"), (" ", ""), (pad(item.label, label), item.tone or ""), (" ", "")]
    return _fit([*head, (clean(item.text), "")], width)


def _joined(parts: list[str], tones: list[str], sep: str) -> Line:
    line: Line = []
    for index, (text, tone) in enumerate(zip(parts, tones, strict=True)):
        if index:
            line.append((sep, ""))
        line.append((text, tone))
    return line


def _fit(line: Line, width: int) -> Line:
    """``line`` cut to ``width`` cells (the last segments give way)."""
    out: Line = []
    used = 0
    for text, tone in line:
        size = cells(text)
        if used + size <= width:
            out.append((text, tone))
            used += size
            continue
        out.append((cut(text, width - used), tone))
        break
    return out
