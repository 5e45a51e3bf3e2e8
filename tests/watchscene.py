"""A busy tree for the live view's tests: an afternoon of three agents, built at fixed instants.

Everything is made through the library with a ManualClock ending at ``BEFORE`` (09:59:59); the
view is then looked at ``NOW`` (10:00:00, ``LOKI_NOW`` for a process), so every screen is the
same on every run. What is in it, so each panel and each kind of event has something to show:

* 24 pending, 9 in progress (one lease expired, one about to), 1 blocked by an escalation,
  5 completed, 1 failed, 1 cancelled, 1 in the dead-letter queue;
* breakers: ``api/claude`` OPEN, ``github`` OPEN with its cooldown over at NOW (the watcher's
  first tick moves it to HALF_OPEN), ``api/openai`` CLOSED after a failure;
* signals consumed (applied, logged, skipped) and two waiting (a review request, ``DOCS_NEEDED``);
* strikes on branch ``main``: ``npm test`` failed 3 times (stop: escalated), ``cargo build`` twice;
* two open escalations (a security decision, the strike) and one closed;
* the tick's log: a lease that expired at 09:58.

``python -m tests.watchscene DIR`` builds it in ``DIR/.loki`` (to look at it by hand:
``LOKI_NOW=2026-01-25T10:00:00Z loki --root DIR/.loki watch``).
"""

from __future__ import annotations

import sys
from pathlib import Path

from loki.breakers.breakers import Breakers
from loki.clock import ManualClock
from loki.queue.escalations import close, escalate
from loki.queue.queue import Queue
from loki.signals import emit as signals
from loki.storage.store import Store
from loki.storage.tree import init_tree
from loki.strikes.strikes import Strikes
from loki.watch.consumer import Consumer
from loki.watch.ticks import Tick

START = "2026-01-25T09:00:00Z"
BEFORE = "2026-01-25T09:59:59Z"
NOW = "2026-01-25T10:00:00Z"

TITLES = [
    "Add rate limiting to the login endpoint", "Write the migration for the billing tables",
    "Fix the flaky websocket reconnect test", "Document the public API of the payments service",
    "Upgrade the ORM to the next major version and fix every deprecation warning it prints",
    "Remove the legacy CSV export", "Cache the product catalogue in Redis", "Split the monolith's user module",
    "修复登录页面的编码问题", "Profile the search endpoint under load",
]


def build(root: Path) -> Store:
    """The scene in ``root`` (a ``.loki`` directory, created); returns its store, its clock at ``BEFORE``."""
    init_tree(str(root))
    clock = ManualClock(START)
    store = Store(root, clock=clock)
    queue = Queue(store)
    for n in range(42):
        queue.add(TITLES[n % len(TITLES)] + ("" if n < len(TITLES) else f" (part {n // len(TITLES) + 1})"),
                  task_id=f"task-{n + 1:03d}", priority=("high", "medium", "low")[n % 3],
                  type={8: "db", 38: "docs"}.get(n))
    agents = ["eng-001", "eng-002", "eng-003", "reviewer"]
    holders = {}
    for n in range(16):  # claimed 09:01 ... 09:16; leases end 09:59:20 (expired at NOW), 10:04:20 ...
        clock.set(f"2026-01-25T09:{n + 1:02d}:00Z")
        task = queue.claim(agents[n % len(agents)], lease_seconds=3600 - 60 * (n + 1) + 300 * n - 40)
        holders[task["id"]] = task["claimed_by"]
    clock.set("2026-01-25T09:20:00Z")
    for task_id in ("task-004", "task-013"):
        queue.complete(task_id, holders[task_id], result={"commit": "4f2a9c1"})
    queue.fail("task-016", holders["task-016"], error="schema mismatch", error_type="validation", final=True)
    queue.cancel("task-042", reason="superseded by task-041")
    _dead_letter(queue, clock)
    clock.set("2026-01-25T09:30:00Z")
    queue.claim("eng-002", types=["docs"], lease_seconds=600)  # task-039: expires 09:40
    clock.set("2026-01-25T09:45:00Z")
    escalate(store, "task-005", "security_decision", analysis="touches the session tokens")
    _strikes(store, clock)
    clock.set("2026-01-25T09:55:00Z")
    breakers = Breakers(store)
    for _ in range(3):  # github: cooldown until NOW, so the watcher's first tick moves it to HALF_OPEN
        breakers.record_failure("github", error="HTTP 502 from api.github.com")
    clock.set("2026-01-25T09:56:00Z")
    signals.emit(store, "TESTS_PASSED_auth", task_id="task-007")
    signals.emit(store, "FEATURE_READY_billing", {"message": "billing tables migrated"})
    signals.emit(store, "TESTS_FAILED_api", {"failed": 2}, task_id="task-024")  # pending, not held: skipped
    Consumer(store).run_pass()
    clock.set("2026-01-25T09:57:00Z")
    escalate(store, "task-010", "requirements_unclear", analysis="two specs disagree on the page's scope")
    clock.set("2026-01-25T09:58:00Z")
    Tick(store).run()  # requeues task-039, reviews the dead-letter queue
    clock.set("2026-01-25T09:59:00Z")
    for _ in range(3):
        breakers.record_failure("api/claude", error="HTTP 529 overloaded")
    clock.set("2026-01-25T09:59:10Z")
    breakers.record_failure("api/openai", error="timeout after 60s")
    breakers.record_success("api/openai")
    clock.set(BEFORE)
    signals.emit(store, "DOCS_NEEDED", {"message": "the rate limiter needs a page in the operator guide"})
    return store


def _strikes(store: Store, clock: ManualClock) -> None:
    """``npm test`` fails 3 times (stop: an escalation, closed once fixed), ``cargo build`` twice."""
    strikes = Strikes(store, branch="main")
    for n in range(3):
        clock.set(f"2026-01-25T09:50:{n * 10:02d}Z")
        strikes.record_failure("Bash", {"command": "npm test"}, f"FAIL src/login.test.ts ({n + 1} failing)")
    for n in range(2):
        clock.set(f"2026-01-25T09:52:{n * 10:02d}Z")
        strikes.record_failure("Bash", {"command": "cargo build"}, "error[E0432]: unresolved import `crate::auth`")
    clock.set("2026-01-25T09:53:00Z")
    name = next(p.name for p in (Path(store.root) / "escalations").iterdir() if "strike" in p.name)
    close(store, name.removesuffix(".md"), note="the test was fixed on main", by="alice")


def _dead_letter(queue: Queue, clock: ManualClock) -> None:
    """task-009 (type db) fails 5 times, 09:21 ... 09:25: dead-lettered."""
    for n in range(5):
        clock.set(f"2026-01-25T09:{21 + n:02d}:00Z")
        queue.claim("eng-003", types=["db"], lease_seconds=600)
        queue.fail("task-009", "eng-003", error="connection refused: postgres:5432", error_type="dependency",
                   approach="retry with a longer timeout")


if __name__ == "__main__":
    build(Path(sys.argv[1]) / ".loki")
