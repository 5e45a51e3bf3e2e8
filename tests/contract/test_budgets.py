"""Budgets (loki/spend/budgets.py, docs/spend.md) on every backend: set, list, show, remove; a spent budget
refuses a claim with its refill time (exit 75), keeps claims off a spent type or label, refills when its
window ends (time injected), writes BUDGET_EXCEEDED once per window, and ``reserve`` refuses a claim before
the running attempts could pass the limit."""

from __future__ import annotations

from typing import Any

import pytest

from loki.errors import InvalidArgument, NotFound, NothingToDo, UsageError
from loki.queue.queue import Queue
from loki.spend.budgets import BudgetExceeded, Budgets, claim, parse_tokens, window
from loki.storage import layout

NOW = "2026-01-25T10:00:00Z"


@pytest.fixture
def store(backend_store: Any) -> Any:
    return backend_store


def spend(store: Any, task_id: str, usd: float, *, agent: str = "a", type_: str = "general",
          labels: list[str] | None = None, tokens: int = 100) -> None:
    """A claim of a new task that spent ``usd``, recorded with its completion (as loki work records it)."""
    queue = Queue(store)
    queue.add(f"task {task_id}", task_id=task_id, type=type_, labels=labels or [])
    claimed = queue.claim(agent, task_id=task_id)
    queue.complete(task_id, agent, token=claimed["claim_token"], usage={
        "input_tokens": tokens, "output_tokens": 0, "cache_read_tokens": 0, "cache_creation_tokens": 0,
        "source": "result_file", "usd": usd, "usd_source": "agent"})


def test_set_list_show_remove(store: Any) -> None:
    budgets = Budgets(store)
    budgets.set("team-day", usd=50, per="day")
    budgets.set("docs-hour", tokens=parse_tokens("5M"), per="hour", scope="type:docs")
    assert [s.name for s in budgets.standings()] == ["docs-hour", "team-day"]
    spend(store, "t1", 1.5)
    shown = budgets.show("team-day").to_json()
    assert (shown["spent_usd"], shown["exhausted"], shown["scope"], shown["usd"]) == (1.5, False, "team", 50.0)
    assert budgets.show("docs-hour").spent_tokens == 0  # t1 is not a docs task
    budgets.remove("docs-hour")
    assert [s.name for s in budgets.standings()] == ["team-day"]
    with pytest.raises(NotFound, match="no budget 'docs-hour'"):
        budgets.remove("docs-hour")


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"usd": -5, "per": "day"}, InvalidArgument, "invalid --usd -5"),
    ({"usd": 0, "per": "day"}, InvalidArgument, "invalid --usd 0"),
    ({"usd": 1e9, "per": "day"}, InvalidArgument, "invalid --usd"),
    ({"usd": float("nan"), "per": "day"}, InvalidArgument, "invalid --usd"),
    ({"usd": 5, "tokens": 5, "per": "day"}, UsageError, "give one limit"),
    ({"per": "day"}, UsageError, "give one limit"),
    ({"usd": 5, "per": "fortnight"}, UsageError, "invalid --per 'fortnight'"),
    ({"usd": 5, "per": "day", "scope": "planet:mars"}, UsageError, "invalid scope 'planet:mars'"),
    ({"usd": 5, "per": "day", "scope": "type:"}, UsageError, "invalid scope 'type:'"),
])
def test_bad_budgets_are_refused_and_nothing_is_stored(store: Any, kwargs: dict[str, Any], error: type,
                                                       match: str) -> None:
    with pytest.raises(error, match=match):
        Budgets(store).set("b", **kwargs)
    assert not store.exists(layout.BUDGETS) or store.read(layout.BUDGETS) == {}


@pytest.mark.parametrize("text", ["-5M", "5X", "0", "1.5", "2000B"])
def test_bad_token_counts(text: str) -> None:
    with pytest.raises((UsageError, InvalidArgument)):
        parse_tokens(text)


def test_token_counts() -> None:
    assert (parse_tokens("5M"), parse_tokens("200k"), parse_tokens("1.5M"), parse_tokens("7")) == (
        5_000_000, 200_000, 1_500_000, 7)


def test_a_spent_team_budget_refuses_the_claim_until_its_window_refills(store: Any) -> None:
    Budgets(store).set("team", usd=2, per="hour")
    spend(store, "t1", 1.25)
    spend(store, "t2", 1.0)
    queue = Queue(store)
    queue.add("next", task_id="t3")
    with pytest.raises(BudgetExceeded) as refused:
        claim(queue, "b")
    assert refused.value.exit_code == 75
    assert refused.value.refill_at == format_hour_after(store)
    assert "budget team (team) spent: $2.2500 of $2.00 this hour; it refills at" in refused.value.message
    assert queue.show("t3")["state"] == "pending"
    store.clock.advance(3600)  # the window ends: the budget refills
    assert claim(queue, "b")["id"] == "t3"


def format_hour_after(store: Any) -> str:
    from loki.clock import format_ts

    return format_ts(window("hour", store.clock.now())[1])


def test_budget_exceeded_is_signalled_once_per_window(store: Any) -> None:
    Budgets(store).set("team", usd=1, per="day")
    spend(store, "t1", 1.0)
    Queue(store).add("next", task_id="t2")
    for _ in range(3):
        with pytest.raises(BudgetExceeded):
            claim(Queue(store), "b")
    names = [n for n in store.list(layout.SIGNALS_DIR) if n.startswith("BUDGET_EXCEEDED")]
    assert len(names) == 1
    import json

    signal = json.loads(store.read_text(f"{layout.SIGNALS_DIR}/{names[0]}"))
    assert signal["budget"] == "team" and signal["spent_usd"] == 1.0


def test_a_spent_type_budget_keeps_claims_off_that_type(store: Any) -> None:
    Budgets(store).set("docs", usd=1, per="day", scope="type:docs")
    spend(store, "t1", 1.0, type_="docs")
    queue = Queue(store)
    queue.add("more docs", task_id="t2", type="docs", priority="high")
    queue.add("a feature", task_id="t3", type="feature")
    assert claim(queue, "b")["id"] == "t3"  # the docs task is first in line, but its budget is spent
    with pytest.raises(BudgetExceeded, match="every ready task is in its scope"):
        claim(queue, "b")
    with pytest.raises(BudgetExceeded, match=r"t2 is in its scope"):
        claim(queue, "b", task_id="t2")


def test_a_label_budget_and_an_agent_budget(store: Any) -> None:
    budgets = Budgets(store)
    budgets.set("auth", tokens=150, per="week", scope="label:auth")
    budgets.set("eng-1", usd=0.5, per="day", scope="agent:eng-1")
    spend(store, "t1", 0.5, agent="eng-1", labels=["auth"], tokens=200)
    queue = Queue(store)
    queue.add("auth work", task_id="t2", labels=["auth", "api"])
    with pytest.raises(BudgetExceeded, match="budget eng-1"):
        claim(queue, "eng-1")  # its own budget is spent
    with pytest.raises(BudgetExceeded, match="budget auth"):
        claim(queue, "eng-2")  # the only ready task carries a spent label
    queue.add("other", task_id="t3")
    assert claim(queue, "eng-2")["id"] == "t3"


def test_reserve_refuses_before_the_running_attempts_could_pass_the_limit(store: Any) -> None:
    Budgets(store).set("team", usd=10, per="day")
    spend(store, "t1", 4.0)
    queue = Queue(store)
    for n in range(2, 6):
        queue.add(f"t{n}", task_id=f"t{n}")
    # 4 spent; each running attempt may cost 2: claims while 4 + 2 x (running + 1) <= 10
    assert claim(queue, "a1", reserve=2.0)["id"] == "t2"
    assert claim(queue, "a2", reserve=2.0)["id"] == "t3"
    assert claim(queue, "a3", reserve=2.0)["id"] == "t4"
    with pytest.raises(BudgetExceeded, match=r"\+ \$2 reserved for each of 4 attempts"):
        claim(queue, "a4", reserve=2.0)
    assert claim(queue, "a4")["id"] == "t5"  # without a reserve, only what was spent counts
    with pytest.raises(InvalidArgument, match="invalid --reserve"):
        claim(queue, "a5", reserve=-1.0)


def test_no_budgets_is_a_plain_claim(store: Any) -> None:
    queue = Queue(store)
    with pytest.raises(NothingToDo):
        claim(queue, "a")
    queue.add("x", task_id="t1")
    assert claim(queue, "a")["id"] == "t1"


def test_a_reused_claim_is_given_back_even_when_the_budget_is_spent(store: Any) -> None:
    queue = Queue(store)
    queue.add("held", task_id="t1")
    held = claim(queue, "a")
    Budgets(store).set("team", usd=1, per="day")
    spend(store, "t2", 1.0, agent="b")
    again = claim(queue, "a", reuse=True)  # the reply to its claim was lost: the same claim, not new work
    assert again["id"] == "t1" and again["claim_token"] == held["claim_token"]
    with pytest.raises(BudgetExceeded):
        claim(queue, "c", reuse=True)  # holds nothing: a new claim, refused


def test_reuse_skips_the_gate_only_for_a_claim_it_would_give_back(store: Any) -> None:
    """``--reuse`` gives back a live claim that fits the request (Queue.live_claim, as claim's own): holding
    some other task (another type asked for) or a lapsed lease is no reason to skip a spent budget."""
    queue = Queue(store)
    queue.add("held docs", task_id="t1", type="docs")
    queue.add("a feature", task_id="t3", type="feature")
    held = claim(queue, "a", types=["docs"], lease_seconds=60)
    Budgets(store).set("team", usd=1, per="day")
    spend(store, "t2", 1.0, agent="b")
    with pytest.raises(BudgetExceeded):
        claim(queue, "a", types=["feature"], reuse=True)  # t1 does not fit: this would be new work
    assert queue.show("t3")["state"] == "pending"
    assert queue.live_claim("a", types=["docs"]) is not None and queue.live_claim("a", types=["feature"]) is None
    again = claim(queue, "a", types=["docs"], reuse=True)
    assert again["id"] == "t1" and again["claim_token"] == held["claim_token"]


def test_reuse_of_a_lapsed_lease_meets_the_gate(store: Any) -> None:
    queue = Queue(store)
    queue.add("held", task_id="t1")
    claim(queue, "a", lease_seconds=60)
    Budgets(store).set("team", usd=1, per="day")
    spend(store, "t2", 1.0, agent="b")
    store.clock.advance(3600)  # the lease lapsed: nothing live to give back
    assert queue.live_claim("a") is None
    with pytest.raises(BudgetExceeded):
        claim(queue, "a", reuse=True)


def test_the_check_is_inside_the_claims_unit_of_work(store: Any) -> None:
    """The budgets are asked by the queue inside the claim's unit of work (the queue's lock held): the totals and
    the running attempts they count are that unit's, and a refused claim takes nothing."""
    queue = Queue(store)
    Budgets(store).set("team", usd=10, per="day")
    spend(store, "t1", 7.0)
    queue.add("a", task_id="t2")
    queue.add("b", task_id="t3")
    seen: list[tuple[int, float]] = []
    from loki.spend import budgets as module

    inside = module.ClaimGate.inside

    def watched(self: Any, unit: Any) -> Any:
        gate = inside(self, unit)
        day = store.clock.now().strftime("%Y-%m-%d")
        seen.append((len(unit.tasks("in-progress")), unit.spend_totals()["days"][day]["team"][0]))
        return gate

    module.ClaimGate.inside = watched  # type: ignore[method-assign]
    try:
        assert claim(queue, "a", reserve=2.0)["id"] == "t2"  # 7 + 2 x 1 <= 10
        with pytest.raises(BudgetExceeded, match=r"\+ \$2 reserved for each of 2 attempts"):
            claim(queue, "b", reserve=2.0)  # 7 + 2 x 2 > 10: the running t2 is counted
    finally:
        module.ClaimGate.inside = inside  # type: ignore[method-assign]
    assert seen == [(0, 7.0), (1, 7.0)]
    assert queue.show("t3")["state"] == "pending"


def test_a_spent_label_with_a_ready_task_outside_it_claims_that_one(store: Any) -> None:
    Budgets(store).set("auth", usd=1, per="day", scope="label:auth")
    spend(store, "t1", 1.0, labels=["auth"])
    queue = Queue(store)
    queue.add("auth first", task_id="t2", labels=["auth"], priority="high")
    queue.add("plain", task_id="t3")
    assert claim(queue, "a")["id"] == "t3"
    with pytest.raises(BudgetExceeded, match=r"budget auth .*every ready task is in its scope"):
        claim(queue, "a")


def spent_and_refused(store: Any, times: int = 1, *, agent: str = "b") -> None:
    Queue(store).add("next", task_id="next")
    for _ in range(times):
        with pytest.raises(BudgetExceeded):
            claim(Queue(store), agent)


def budget_rows(store: Any, *, open_only: bool = False) -> list[dict[str, Any]]:
    from loki.queue.escalations import list_escalations

    return [row for row in list_escalations(store, open_only=open_only) if row.get("budget")]


def test_a_spent_budget_writes_one_escalation_per_window_that_parks_no_task(store: Any) -> None:
    from loki.queue.escalations import show

    Budgets(store).set("team", usd=1, per="day")
    spend(store, "t1", 1.0)
    spent_and_refused(store, 3)
    [row] = budget_rows(store, open_only=True)
    start = Budgets(store).show("team").start
    assert (row["budget"], row["window_start"], row["trigger"], row["task_id"]) == (
        "team", start, "budget_exceeded", "budget-team")
    assert row["id"] == start.replace("-", "").replace(":", "") + "-budget-team"
    assert row["title"] == "budget team (team) spent this day"
    shown = show(store, "budget-team")  # found by what it escalates, as a task's is
    assert shown["tasks"] == [] and "it refills at" in shown["text"] and "loki budget set team" in shown["text"]
    assert Queue(store).show("next")["state"] == "pending"  # nothing parked
    assert Budgets(store).show("team").record["escalation"] == row["file"]
    signal = next(n for n in store.list(layout.SIGNALS_DIR) if n.startswith("BUDGET_EXCEEDED"))
    import json

    assert json.loads(store.read_text(f"{layout.SIGNALS_DIR}/{signal}"))["escalation"] == row["file"]


def test_a_writer_that_died_after_the_file_leaves_no_second_escalation(store: Any) -> None:
    """The file is named by its window: a refusal that wrote it and died before recording it in the budget
    (simulated: the file written, the record not) is found by the next refusal, not written again."""
    from loki.spend.budgets import escalate

    Budgets(store).set("team", usd=1, per="day")
    spend(store, "t1", 1.0)
    escalate(store, Budgets(store).show("team"), "crashed")
    spent_and_refused(store, 2)
    [row] = budget_rows(store)
    assert Budgets(store).show("team").record["escalation"] == row["file"]


def test_approving_a_budget_escalation_acknowledges_it_and_the_budget_stays_spent(store: Any) -> None:
    from loki.errors import Conflict, InvalidInput
    from loki.watch.approvals import approve_any

    Budgets(store).set("team", usd=1, per="day")
    spend(store, "t1", 1.0)
    spent_and_refused(store)
    [row] = budget_rows(store)
    with pytest.raises(InvalidInput, match="is a spent budget \\(team\\), not a task"):
        approve_any(store, row["id"], "cancel")
    assert budget_rows(store, open_only=True)
    answer = approve_any(store, row["id"], "approve", note="seen", approver="ana")
    assert answer == {"escalation": row["id"], "approvals": []}
    [done] = budget_rows(store)
    assert not done["open"] and done["resolution"].startswith("acknowledged by ana at ")
    assert done["resolution"].endswith(": seen")
    with pytest.raises(Conflict, match="already resolved"):
        approve_any(store, row["id"], "approve")
    with pytest.raises(BudgetExceeded):  # acknowledged, still spent: no second escalation this window
        claim(Queue(store), "b")
    assert len(budget_rows(store)) == 1


def test_raising_the_budget_resolves_its_escalation_and_a_new_spend_writes_another(store: Any) -> None:
    Budgets(store).set("team", usd=1, per="day")
    spend(store, "t1", 1.0)
    spent_and_refused(store)
    answer = Budgets(store).set("team", usd=2, per="day")
    [row] = budget_rows(store)
    assert answer["resolved"] == [row["file"]] and not row["open"]
    assert row["resolution"].startswith("budget set to $2 per day (team) at ")
    assert claim(Queue(store), "b")["id"] == "next"  # raised: claims go on
    spend(store, "t2", 1.5)
    Queue(store).add("later", task_id="later")
    with pytest.raises(BudgetExceeded):
        claim(Queue(store), "c")
    first, second = budget_rows(store)
    assert second["open"] and second["file"] == first["file"].removesuffix(".md") + "-2.md"
    removed = Budgets(store).remove("team")
    assert removed["resolved"] == [second["file"]] and not budget_rows(store, open_only=True)


def test_the_next_window_s_escalation_supersedes_the_last(store: Any) -> None:
    Budgets(store).set("team", usd=1, per="hour")
    spend(store, "t1", 1.0)
    spent_and_refused(store)
    store.clock.advance(3600)
    spend(store, "t2", 1.0)
    with pytest.raises(BudgetExceeded):
        claim(Queue(store), "b")
    old, new = budget_rows(store)
    assert new["open"] and not old["open"] and old["resolution"] == f"superseded by {new['file']}"


def team_today(store: Any) -> list[float]:
    doc = store.tasks().spend_totals()
    return doc["days"][store.clock.now().strftime("%Y-%m-%d")]["team"]


def test_the_running_totals_are_kept_with_each_entry_and_only_once_a_budget_exists(store: Any) -> None:
    spend(store, "t0", 0.5)
    assert store.tasks().spend_totals() is None  # no budget: nothing kept, nothing paid per write
    Budgets(store).set("team", usd=100, per="day")  # the first budget builds them from the tasks
    assert team_today(store) == [0.5, 100, 1]
    queue = Queue(store)
    spend(store, "t1", 0.25, type_="docs", labels=["auth"])
    queue.add("failing", task_id="t2")
    claimed = queue.claim("b", task_id="t2")
    usage = {"input_tokens": 5, "output_tokens": 0, "cache_read_tokens": 0, "cache_creation_tokens": 0,
             "source": "result_file", "usd": 0.125, "usd_source": "agent"}
    queue.fail("t2", "b", token=claimed["claim_token"], error="boom", usage=usage)
    store.clock.advance(60)  # past its backoff, within the day
    again = queue.claim("b", task_id="t2")
    queue.complete("t2", "b", token=again["claim_token"], usage=usage)
    queue.complete("t2", "b", token=again["claim_token"], usage=usage)  # a repeat, its answer lost: nothing
    day = store.clock.now().strftime("%Y-%m-%d")
    kept = store.tasks().spend_totals()["days"][day]
    assert kept["team"] == [1.0, 210, 4]
    assert kept["type:docs"] == [0.25, 100, 1] and kept["label:auth"] == [0.25, 100, 1]
    assert kept["agent:b"] == [0.25, 10, 2]
    from loki.spend.report import entries
    from loki.tasks import totals

    assert totals.build(entries(store))["days"][day] == kept


def test_a_claim_with_budgets_reads_no_usage_history(store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once the totals exist, neither a claim nor ``budget show`` reads a task's usage: the archive may grow."""
    from loki.spend import report

    Budgets(store).set("team", usd=1, per="day")
    spend(store, "t1", 0.5)

    def refused(*_args: Any) -> Any:
        raise AssertionError("read every task's usage")

    monkeypatch.setattr(report, "entries", refused)
    monkeypatch.setattr(type(store.tasks()), "archived", refused)
    queue = Queue(store)
    queue.add("next", task_id="t2")
    assert claim(queue, "a")["id"] == "t2"
    assert Budgets(store).show("team").spent_usd == 0.5


def test_totals_that_are_missing_are_built_once_from_the_tasks(store: Any) -> None:
    """A tree whose totals are gone (moved by `loki migrate`, which moves the tasks, not this index) builds them
    from the tasks at its next check, under the queue's lock."""
    Budgets(store).set("team", usd=1, per="day")
    spend(store, "t1", 0.75)
    drop_totals(store)  # as a migrated tree has them: not at all
    assert store.tasks().spend_totals() is None
    assert Budgets(store).show("team").spent_usd == 0.75
    assert team_today(store) == [0.75, 100, 1]
    spend(store, "t2", 0.25)
    Queue(store).add("next", task_id="t3")
    with pytest.raises(BudgetExceeded):
        claim(Queue(store), "a")


def drop_totals(store: Any) -> None:
    import os

    if store.backend == "files":
        os.remove(store.path(layout.SPEND))
    elif store.backend == "postgresql":
        store.remove(layout.SPEND)
    else:
        store.tasks()._spend = None


def test_a_task_relabelled_or_retyped_after_spending_moves_its_spend_in_the_totals(store: Any) -> None:
    """A budget's spend is the usage entries of its scope (the task's type and labels as they are: what
    ``loki usage --by label`` and a rebuild from the tasks count). ``queue edit`` of the type or labels of a task
    that already spent moves its entries in the running totals, in the same unit: the index stays the tasks'."""
    from loki.queue.edits import edit
    from loki.spend.report import entries
    from loki.tasks import totals

    Budgets(store).set("auth", usd=1, per="day", scope="label:auth")
    queue = Queue(store)
    queue.add("login", task_id="t1", labels=["ui"])
    claimed = queue.claim("b", task_id="t1")
    usage = {"input_tokens": 5, "output_tokens": 0, "cache_read_tokens": 0, "cache_creation_tokens": 0,
             "source": "result_file", "usd": 1.0, "usd_source": "agent"}
    queue.fail("t1", "b", token=claimed["claim_token"], error="boom", usage=usage)
    assert Budgets(store).show("auth").spent_usd == 0
    edit(queue, "t1", add_labels=["auth"], remove_labels=["ui"], type="security", by="lead")
    day = store.clock.now().strftime("%Y-%m-%d")
    assert totals.build(entries(store))["days"][day] == store.tasks().spend_totals()["days"][day]
    assert Budgets(store).show("auth").spent_usd == 1.0  # what it spent is now in the auth label's budget
    queue.add("next", task_id="t2", labels=["auth"])
    with pytest.raises(BudgetExceeded):
        claim(Queue(store), "a")
