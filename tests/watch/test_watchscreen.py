"""The live view's layout (loki/watch/screen.py), without a terminal: what fits an 80x24, 120x40 and
200x60 screen, the short forms columns take, the feed, and what the keys do.

The screens of the scene (tests/watchscene.py) are kept in tests/golden/watch/screen-WxH.txt; the same
sizes in a real terminal are tests/watch/test_watch_tmux.py's.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from loki.cli.watchview import to_text
from loki.clock import ManualClock
from loki.storage.store import Store
from loki.watch.activity import history
from loki.watch.dashboard import Dashboard
from loki.watch.feed import Feed, event_line
from loki.watch.screen import View, cells, compose, cut, lease_left, plain
from tests import watchgolden, watchscene

ROOT = "/home/alice/shop/.loki"
SIZES = [(80, 24), (120, 40), (200, 60)]


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Feed]:
    """The scene's snapshot and feed at NOW, as `loki watch` starts with them (before its first pass)."""
    root = tmp_path_factory.mktemp("scene") / ".loki"
    watchscene.build(root)
    store = Store(root, clock=ManualClock(watchscene.NOW))
    snap = Dashboard(store, in_progress_limit=200, escalations_limit=200).snapshot(consuming=True)
    snap["root"] = ROOT  # the tree's real path changes every run
    feed = Feed()
    feed.extend(history(store), watchscene.NOW)
    return snap, feed


def screen(scene: tuple[dict[str, Any], Feed], width: int, height: int, view: View | None = None) -> str:
    snap, feed = scene
    return plain(compose(snap, feed, view or View(), width, height))


@pytest.mark.parametrize(("width", "height"), SIZES)
def test_the_screen_at_each_size_is_the_golden_one(scene: tuple[dict[str, Any], Feed], width: int,
                                                    height: int) -> None:
    text = screen(scene, width, height)
    lines = text.split("\n")
    assert len(lines) == height
    assert max(cells(line) for line in lines) <= width
    watchgolden.check(f"screen-{width}x{height}.txt", text)


def test_at_80x24_every_panel_shows_and_no_header_is_cut_into_an_ellipsis(
        scene: tuple[dict[str, Any], Feed]) -> None:
    text = screen(scene, 80, 24)
    lines = text.split("\n")
    assert lines[0] == "loki watch · consuming · 2026-01-25T10:00:00Z · /home/alice/shop/.loki"
    assert lines[-1].startswith("q quit   p pause   ? help")
    for title in ("queue  pending 24", "breakers  api/claude OPEN 240s · github HALF_OPEN · 2 closed",
                  "in progress (10, the 5 soonest leases)",
                  "open escalations (2)", "events"):
        assert any(line.startswith(title) for line in lines), title
    # Column headers in full: the short forms and the free-text columns gave way, not the headers.
    assert "task      holder         lease left  title" in lines
    assert any(re.fullmatch(r"opened +task +trigger +escalation", line) for line in lines)
    assert "EXPIRED 40s ago" in text  # task-001's lease, in full: it fits
    headers = [*lines[:4], *(line for line in lines if re.match(r"(task|opened|breaker) +", line))]
    assert len(headers) == 6 and not [line for line in headers if "…" in line]


def test_columns_take_their_short_forms_before_anything_is_cut() -> None:
    snap = _snapshot(tasks=[_held("task-001", "eng-001", -40, "Add rate limiting to the login endpoint"),
                            _held("task-002", "eng-002", 754, "Write the migration")])
    wide = plain(compose(snap, Feed(), View(), 80, 24)).split("\n")
    assert wide[8:11] == ["task      holder        lease left  title",
                          "task-001  eng-001  EXPIRED 40s ago  Add rate limiting to the login endpoint",
                          "task-002  eng-002           12m34s  Write the migration"]
    narrow = plain(compose(snap, Feed(), View(), 44, 24)).split("\n")
    assert narrow[7:10] == ["task      holder    lease  title",  # the short forms first ...
                            "task-001  eng-001    -40s  Add rate limitin…",  # ... then the free text is cut
                            "task-002  eng-002  12m34s  Write the migrat…"]


def test_the_queue_line_takes_two_lines_then_short_names() -> None:
    snap = _snapshot()
    assert plain(compose(snap, Feed(), View(), 120, 24)).split("\n")[2].startswith(
        "queue  pending 3  in-progress 1  blocked 0  completed 7  failed 0  cancelled 0  dead-letter 2  abandoned 0")
    two = plain(compose(snap, Feed(), View(), 80, 24)).split("\n")[2:4]
    assert two == ["queue  pending 3  in-progress 1  blocked 0  completed 7",
                   "       failed 0  cancelled 0  dead-letter 2  abandoned 0"]
    short = plain(compose(snap, Feed(), View(), 80, 12)).split("\n")[2]
    assert short == "queue  pend 3  held 1  blkd 0  done 7  fail 0  canc 0  dead 2  aban 0"


def test_many_breakers_are_named_while_they_fit_and_counted_after() -> None:
    breakers = [_breaker(f"api/provider-{n}", "OPEN", 120 + n) for n in range(12)]
    breakers += [_breaker(f"closed-{n}", "CLOSED", None) for n in range(5)]
    lines = plain(compose(_snapshot(breakers=breakers), Feed(), View(), 80, 24)).split("\n")
    line = next(line for line in lines if line.startswith("breakers"))
    assert line == "breakers  api/provider-0 OPEN 120s · +11 more · 5 closed"
    wider = plain(compose(_snapshot(breakers=breakers), Feed(), View(), 100, 24)).split("\n")
    assert "breakers  api/provider-0 OPEN 120s · api/provider-1 OPEN 121s · +10 more · 5 closed" in wider
    tall = plain(compose(_snapshot(breakers=breakers[:3]), Feed(), View(), 120, 60)).split("\n")
    assert "breakers (3)" in tall
    assert any(re.fullmatch(r"breaker +state +failures +cooldown +last error", line) for line in tall)


def test_the_feed_shows_the_newest_events_and_says_how_many_are_older() -> None:
    feed = Feed()
    feed.extend([_signal(n) for n in range(30)], watchscene.NOW)
    lines = plain(compose(_snapshot(), feed, View(), 80, 24)).split("\n")
    start = lines.index(next(line for line in lines if line.startswith("events")))
    shown = lines[start + 1:-1]
    assert shown[-1] == "10:00:29 signal DOCS_NEEDED logged: note 29"
    assert lines[start] == f"events  ({30 - len(shown)} earlier: ↑ scrolls)"


def test_keys_quit_pause_help_and_scroll() -> None:
    feed = Feed()
    feed.extend([_signal(n) for n in range(30)], watchscene.NOW)
    view = View()
    snap = _snapshot()

    def events() -> list[str]:
        lines = plain(compose(snap, feed, view, 80, 24)).split("\n")
        return [line for line in lines if line.startswith("10:00:")]

    live = events()
    view.press("p", feed)
    assert view.paused and plain(compose(snap, feed, view, 80, 24)).split("\n")[0].endswith("PAUSED")
    feed.extend([_signal(n) for n in range(30, 33)], watchscene.NOW)
    assert events() == live  # held while paused
    assert "events  paused, 3 new" in plain(compose(snap, feed, view, 80, 24))
    assert "p resume" in plain(compose(snap, feed, view, 80, 24)).split("\n")[-1]
    view.press("p", feed)
    assert events()[-1] == "10:00:32 signal DOCS_NEEDED logged: note 32"
    view.press("up", feed)
    view.press("k", feed)
    assert events()[-1] == "10:00:30 signal DOCS_NEEDED logged: note 30"
    feed.add(_signal(33), watchscene.NOW)
    assert events()[-1] == "10:00:30 signal DOCS_NEEDED logged: note 30"  # a scrolled view stays put
    assert "3 newer below (End: newest)" in plain(compose(snap, feed, view, 80, 24))
    view.press("down", feed)
    assert events()[-1] == "10:00:31 signal DOCS_NEEDED logged: note 31"
    view.press("end", feed)
    assert events()[-1] == "10:00:33 signal DOCS_NEEDED logged: note 33" and view.pin is None
    view.press("home", feed)
    assert events()[0] == "10:00:00 signal DOCS_NEEDED logged: note 0"
    view.press("G", feed)
    view.press("?", feed)
    helped = plain(compose(snap, feed, view, 80, 24))
    assert "help (any key closes it)" in helped and "  p            pause the screen" in helped
    view.press("x", feed)
    assert not view.help and not view.quit
    view.press("?", feed)
    view.press("q", feed)  # q quits even from the help
    assert view.quit


@given(width=st.integers(20, 260), height=st.integers(6, 90))
@settings(max_examples=60, deadline=None)
def test_any_size_gets_exactly_its_lines_none_wider(scene: tuple[dict[str, Any], Feed], width: int,
                                                   height: int) -> None:
    lines = screen(scene, width, height).split("\n")
    assert len(lines) == max(6, height)
    assert max(cells(line) for line in lines) <= max(20, width)
    assert lines[0].startswith("loki watch") and lines[-1].startswith("q quit")


def test_rich_draws_the_composed_lines_as_they_are(scene: tuple[dict[str, Any], Feed]) -> None:
    snap, feed = scene
    lines = compose(snap, feed, View(), 80, 24)
    console = Console(record=True, width=80, height=24, color_system=None)
    console.print(to_text(lines))
    drawn = [line.rstrip() for line in console.export_text().rstrip("\n").split("\n")]
    assert drawn == plain(lines).split("\n")


def test_wide_characters_take_two_cells_and_cut_on_a_character() -> None:
    assert cells("修复") == 4 and cells("e\u0301") == 1
    assert cut("修复登录页面", 7) == "修复登…" and cells(cut("修复登录页面", 7)) == 7
    assert cut("short", 10) == "short"


def test_control_characters_in_stored_text_are_shown_escaped() -> None:
    snap = _snapshot(tasks=[_held("t1", "eng-1", 60, "evil \x1b[2J title\u202e")])
    text = plain(compose(snap, Feed(), View(), 80, 24))
    assert "\x1b" not in text and "\u202e" not in text and "evil \\x1b[2J title\\u202e" in text


@pytest.mark.parametrize(("seconds", "text"), [(None, "-"), (0, "0s"), (59, "59s"), (61, "1m01s"),
                                               (3600, "1h00m"), (-40, "EXPIRED 40s ago")])
def test_lease_left_reads_like_a_clock(seconds: int | None, text: str) -> None:
    assert lease_left(seconds) == text


def test_every_kind_of_event_is_one_line_for_no_tui() -> None:
    now = "2026-01-25T10:00:00Z"
    cases = [
        ({"event": "signal", "timestamp": "2026-01-25T10:00:01Z", "name": "TESTS_PASSED_auth", "outcome": "applied",
          "detail": "t1: in-progress -> completed"},
         "10:00:01 TESTS_PASSED_auth applied: t1: in-progress -> completed"),
        ({"event": "tick", "action": "lease_expired", "detail": "t1: lease expired", "observed": True},
         "10:00:00 tick lease_expired: t1: lease expired (seen in the log)"),
        ({"event": "breaker", "timestamp": "2026-01-25T10:00:02Z", "breaker": "api/claude", "change": "opened",
          "detail": "api/claude (3 failures within 60s)"},
         "10:00:02 breaker opened: api/claude (3 failures within 60s)"),
        ({"event": "strike", "timestamp": "2026-01-25T10:00:03Z", "change": "strike", "strike": 2, "tier": "warn",
          "detail": "Bash `npm test` on main: FAIL"}, "10:00:03 strike 2 (warn): Bash `npm test` on main: FAIL"),
        ({"event": "strike", "change": "cleared", "detail": "Bash `npm test` on main (after 2)"},
         "10:00:00 strike cleared: Bash `npm test` on main (after 2)"),
        ({"event": "escalation", "timestamp": "2026-01-25T10:00:04Z", "change": "opened",
          "detail": "20260125T100004Z-t1 (task t1, security_decision)"},
         "10:00:04 escalation opened: 20260125T100004Z-t1 (task t1, security_decision)"),
        ({"event": "review", "timestamp": "2026-01-25T10:00:05Z", "detail": "dead-letter review: 1 recovered"},
         "10:00:05 review: dead-letter review: 1 recovered"),
        ({"event": "started", "detail": "consuming signals"}, "10:00:00 started: consuming signals"),
    ]
    for event, line in cases:
        assert event_line(event, now) == line


# -- small snapshots --------------------------------------------------------------------------------------


def _snapshot(*, tasks: list[dict[str, Any]] | None = None,
              breakers: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    tasks = tasks if tasks is not None else [_held("t1", "eng-1", 300, "one task")]
    return {"now": "2026-01-25T10:00:00Z", "root": "/srv/app/.loki", "consuming": True, "holder": None,
            "queue": {"pending": 3, "in-progress": len(tasks), "blocked": 0, "completed": 7, "failed": 0,
                      "cancelled": 0, "dead-letter": 2, "abandoned": 0},
            "in_progress": {"total": len(tasks), "tasks": tasks},
            "breakers": breakers if breakers is not None else [_breaker("api/claude", "CLOSED", None)],
            "signals": {"waiting": 0, "processing": 0, "quarantined": 0, "drift_pending_bytes": 0},
            "recent": [], "escalations": {"open": 0, "items": []}}


def _held(task_id: str, holder: str, left: int, title: str) -> dict[str, Any]:
    return {"id": task_id, "title": title, "holder": holder, "lease_until": None, "lease_left": left}


def _breaker(name: str, state: str, cooldown: int | None) -> dict[str, Any]:
    return {"name": name, "state": state, "failures": 3 if state == "OPEN" else 0, "threshold": 3,
            "cooldown_remaining": cooldown, "next_probe_at": None, "last_error": None}


def _signal(n: int) -> dict[str, Any]:
    return {"event": "signal", "timestamp": f"2026-01-25T10:00:{n:02d}Z", "name": "DOCS_NEEDED", "outcome": "logged",
            "detail": f"note {n}"}


@pytest.mark.parametrize("width", [80, 100])
def test_the_escalation_panel_always_shows_the_id_loki_approve_takes(width: int) -> None:
    """A long task id (a strike escalation's) and a long escalation id at 80 columns: the task column gives
    way (the id ends with the task), never the escalation's id, which is what `loki approve` is typed with."""
    snap = _snapshot()
    items = [{"id": "20261127T003224Z-strike-53d723de6f4b91c2", "task_id": "strike-53d723de6f4b91c2",
              "trigger": "strike 3 on a call that keeps failing", "created_at": "2026-11-27T00:32:24Z", "open": True},
             {"id": "20261127T003333Z-inv-reserve", "task_id": "inv-reserve", "trigger": "drift detected twice",
              "created_at": "2026-11-27T00:33:33Z", "open": True}]
    snap["escalations"] = {"open": 2, "items": items}
    lines = plain(compose(snap, Feed(), View(), width, 24)).split("\n")
    head = next(n for n, line in enumerate(lines) if line.startswith("open escalations"))
    assert lines[head + 1].split()[-1] == "escalation"
    assert lines[head + 2].split()[-1] == "20261127T003224Z-strike-53d723de6f4b91c2"
    assert lines[head + 3].split()[-1] == "20261127T003333Z-inv-reserve"
    assert max(cells(line) for line in lines) <= width


def test_the_feed_keeps_events_in_time_order() -> None:
    """A signal applied at 35:59 and a breaker opened at 35:58 that activity reported a moment later: the
    feed shows the breaker first; equal times keep the order they came in."""
    feed = Feed(capacity=3)
    feed.add(_signal(59), "2026-01-25T10:01:00Z")
    feed.add({"event": "breaker", "timestamp": "2026-01-25T10:00:58Z", "change": "opened", "breaker": "api",
              "detail": "api (3 failures within 60s)"}, "2026-01-25T10:01:00Z")
    feed.add(_signal(58), "2026-01-25T10:01:00Z")
    assert [(e.stamp, e.label) for e in feed.entries] == [("10:00:58", "breaker"), ("10:00:58", "signal"),
                                                          ("10:00:59", "signal")]
    feed.add(_signal(10), "2026-01-25T10:01:00Z")  # full: the oldest goes, whichever was added first
    assert [e.stamp for e in feed.entries] == ["10:00:58", "10:00:58", "10:00:59"]
    assert feed.total == 4
    feed.add({"event": "started", "detail": "consuming"}, "2026-01-25T10:01:00Z")  # no timestamp: now
    assert [e.stamp for e in feed.entries][-1] == "10:01:00"
