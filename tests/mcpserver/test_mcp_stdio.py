"""``loki mcp`` over stdio, driven by the official SDK's own client (``mcp.Client``) as real processes: the tool
list, claim and complete, two clients racing to claim, a stale claim token, every bad argument of
test_tools.py refused with the tree byte for byte unchanged."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from loki.storage.store import Store
from tests.helpers import LazyModule, cli, lazy_module_or_skip, snapshot_bytes, tasks_in, tree_problems
from tests.mcpserver.test_tools import BAD_ARGUMENTS, count_tokens

mcp = lazy_module_or_skip("mcp", reason="the mcp extra is not installed (pip install -e '.[dev]')")
anyio = LazyModule("anyio")  # both imported by the tests that use them, not by collection


def server(root: Path, agent: str | None = "a1", *extra: str) -> Any:
    env = {key: value for key, value in os.environ.items() if key not in ("LOKI_AGENT",)}
    env["LOKI_ROOT"] = str(root)
    args = ["-m", "loki", "mcp", *(["--agent", agent] if agent is not None else []), *extra]
    return mcp.StdioServerParameters(command=sys.executable, args=args, env=env, cwd=str(root.parent))


class Rounds:
    """Racing clients that call at the same moment, round after round: ``await rounds.wait()`` returns once every
    client still in the race waits; ``leave()`` takes a finished one out. Left to run freely, one client took all
    24 tasks before the other's first call was served on a loaded machine (seen once in `make test`), and the race
    the test is about did not happen; in rounds, each round's two claims are in flight together."""

    def __init__(self, parties: int) -> None:
        self.parties = parties
        self.arrived = 0
        self.event = anyio.Event()

    async def wait(self) -> None:
        event = self.event
        self.arrived += 1
        if self.arrived >= self.parties:
            self._release()
        await event.wait()

    def leave(self) -> None:
        self.parties -= 1
        if self.arrived and self.arrived >= self.parties:
            self._release()

    def _release(self) -> None:
        self.event.set()
        self.event, self.arrived = anyio.Event(), 0


async def claim_in_rounds(client: Any, rounds: Rounds) -> list[dict[str, Any]]:
    """Claim in ``rounds`` until nothing is ready; the replies of the claims that got a task, in order."""
    claimed = []
    try:
        while True:
            await rounds.wait()  # servers start at their own pace: each round begins once every client answers
            reply, _ = await call(client, "claim")
            if reply["status"] != "claimed":
                assert reply["status"] == "nothing_ready", reply
                return claimed
            claimed.append(reply)
    finally:
        rounds.leave()


async def call(client: Any, name: str, **arguments: Any) -> tuple[dict[str, Any], bool]:
    result = await client.call_tool(name, arguments)
    reply = result.structured_content
    assert json.loads(result.content[0].text) == reply  # the text says the same, for clients without structure
    return reply, bool(result.is_error)


@pytest.mark.slow
def test_the_sdk_client_lists_the_tools_claims_and_completes_over_stdio(root: Path) -> None:
    assert cli(["queue", "add", "write the login page", "--id", "t1"], root=root).code == 0

    async def scenario() -> None:
        async with mcp.Client(server(root, "claude-1")) as client:
            listed = await client.list_tools()
            assert [t.name for t in listed.tools] == ["ready", "claim", "heartbeat", "complete", "fail", "release",
                                                      "signal", "escalate", "lease"]
            # what the client received, as the protocol carries it
            assert count_tokens(listed.model_dump_json(by_alias=True, exclude_none=True)) < 1500
            claimed, is_error = await call(client, "claim")
            assert not is_error and claimed["status"] == "claimed"
            stale_token = claimed["token"]
            released, _ = await call(client, "release", task_id="t1", token=stale_token)
            assert released["status"] == "released"
            again, _ = await call(client, "claim", task_id="t1")
            refused, is_error = await call(client, "complete", task_id="t1", token=stale_token)
            assert is_error and refused["status"] == "lease_lost" and refused["error"] == "conflict"
            done, is_error = await call(client, "complete", task_id="t1", token=again["token"],
                                        evidence=["12 passed"])
            assert not is_error and done["status"] == "completed"

    anyio.run(scenario)
    [task] = tasks_in(Store(root), "completed")
    assert task["completed_by"] == "claude-1" and task["result"] == {"evidence": ["12 passed"]}
    assert tree_problems(root) == []


@pytest.mark.slow
def test_a_lease_through_mcp_meets_the_cli_s_lease_and_the_cli_sees_it(root: Path) -> None:
    held = cli(["lease", "acquire", "src/auth/**", "--agent", "a1", "--ttl", "10m", "--json"], root=root)
    assert held.code == 0, held.stderr
    theirs = held.json()

    async def scenario() -> None:
        async with mcp.Client(server(root, "claude-1")) as client:
            refused, is_error = await call(client, "lease", action="acquire", patterns=["src/auth/login.py"])
            assert is_error and refused["status"] == "conflict" and refused["holder"] == "a1"
            assert refused["lease_id"] == theirs["lease_id"] and refused["expires_at"] == theirs["expires_at"]
            # an absolute path in the repository is made relative to the tree's directory, as the CLI does
            mine, is_error = await call(client, "lease", action="acquire", patterns=[str(root.parent / "docs")])
            assert not is_error and mine["lease"]["patterns"] == ["docs"] and mine["lease"]["agent"] == "claude-1"
            not_mine, is_error = await call(client, "lease", action="release", lease_id=theirs["lease_id"])
            assert is_error and not_mine["status"] == "conflict" and not_mine["holder"] == "a1"

    anyio.run(scenario)
    listed = cli(["lease", "list", "--json"], root=root)
    assert listed.code == 0
    assert sorted((lease["agent"], lease["patterns"]) for lease in listed.json()["leases"]) == [
        ("a1", ["src/auth/**"]), ("claude-1", ["docs"])]
    assert tree_problems(root) == []


@pytest.mark.slow
def test_a_hostile_title_travels_escaped_in_the_text_a_host_may_print(root: Path) -> None:
    title = "fix \u202egnp.exe\u202c login \x9b31m \x1b[2J"
    assert cli(["queue", "add", title, "--id", "t1"], root=root).code == 0

    async def scenario() -> Any:
        async with mcp.Client(server(root)) as client:
            return await client.call_tool("ready", {})

    result = anyio.run(scenario)
    text = result.content[0].text
    assert not any(char in text for char in "\u202e\u202c\x9b\x1b")
    assert json.loads(text)["tasks"][0]["title"] == title == result.structured_content["tasks"][0]["title"]
    assert tree_problems(root) == []


@pytest.mark.slow
@pytest.mark.parametrize("names", [("a1", "a2"), ("claude", "claude")], ids=["two-agents", "one-name-twice"])
def test_two_clients_racing_to_claim_never_get_the_same_task(root: Path, names: tuple[str, str]) -> None:
    """Two servers, two clients, one queue. Under one agent name too (two sessions of a host configured alike):
    each claim is still one task to one client, under the token that client was given."""
    ids = [f"t{n:02}" for n in range(24)]
    batch = root.parent / "batch.json"
    batch.write_text(json.dumps([{"id": task_id, "title": f"task {task_id}"} for task_id in ids]))
    assert cli(["queue", "add", "--from-file", str(batch)], root=root).code == 0
    got: dict[int, dict[str, str]] = {0: {}, 1: {}}  # client -> {task id: token}
    rounds = Rounds(2)

    async def agent(client_number: int) -> None:
        async with mcp.Client(server(root, names[client_number])) as client:
            for reply in await claim_in_rounds(client, rounds):
                got[client_number][reply["task_id"]] = reply["token"]

    async def race() -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(agent, 0)
            group.start_soon(agent, 1)

    anyio.run(race)
    assert sorted([*got[0], *got[1]]) == ids  # every task once: none twice, none lost
    assert got[0] and got[1], got  # both really raced (24 claims between them)
    held = {t["id"]: (t["claimed_by"], t["claim_token"]) for t in tasks_in(Store(root), "in-progress")}
    assert held == {task_id: (names[n], token) for n in (0, 1) for task_id, token in got[n].items()}
    assert tree_problems(root) == []


@pytest.mark.slow
def test_every_bad_argument_over_stdio_is_a_structured_error_and_the_tree_is_unchanged(root: Path) -> None:
    assert cli(["queue", "add", "one", "--id", "t1"], root=root).code == 0

    async def scenario() -> None:
        async with mcp.Client(server(root)) as client:
            claimed, _ = await call(client, "claim")
            before = snapshot_bytes(root)
            for name, arguments, field in BAD_ARGUMENTS:
                if arguments.get("token") == "x":
                    arguments = {**arguments, "token": claimed["token"]}
                reply, is_error = await call(client, name, **arguments)
                assert is_error and reply["status"] == "bad_input" and reply["field"] == field, (name, reply)
                assert snapshot_bytes(root) == before, (name, arguments)

    anyio.run(scenario)


def test_loki_mcp_refuses_to_start_without_an_agent_or_with_a_bad_one(root: Path) -> None:
    missing = cli(["mcp"], root=root)
    assert missing.code == 2 and "--agent" in missing.stderr
    bad = cli(["mcp", "--agent", "eng\x1b[2J"], root=root)
    assert bad.code == 2 and "agent name" in bad.stderr and "\x1b" not in bad.stderr


def test_no_command_but_loki_mcp_imports_the_sdk() -> None:
    """The extra is never on a cold path: building every command (as `loki --help` does), and `loki mcp`'s own
    module, import neither the SDK nor the server module that does."""
    import subprocess

    code = ("import sys\nfrom loki.cli.app import build_app\nbuild_app()\nimport loki.cli.mcp, loki.mcpserver.tools\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'mcp', 'mcp_types', 'starlette', 'anyio', "
            "'pydantic'}), 'loki.mcpserver.server' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout == "[] False\n"


@pytest.mark.slow
@pytest.mark.parametrize("point", ["journal-written", "between-files", "files-replaced"])
def test_a_server_killed_mid_claim_leaves_every_task_in_one_state(root: Path, point: str) -> None:
    """The server process dies as kill -9 would (the crash harness's crashpoints) inside a claim's commit: the
    client sees its connection end; the next server finishes or undoes the change; each task is in exactly one
    state, the tree is valid, and the claim the first agent never heard of is not handed out twice."""
    ids = ["t1", "t2", "t3"]
    for task_id in ids:
        assert cli(["queue", "add", f"task {task_id}", "--id", task_id], root=root).code == 0
    crashing = server(root, "a1")
    crashing.env = {**(crashing.env or {}), "LOKI_CRASHPOINT": point}

    async def crash() -> str:
        async with mcp.Client(crashing) as client:
            try:
                await client.call_tool("claim", {})
            except mcp.MCPError as exc:  # the SDK's client: the connection closed under the request
                return str(exc)
        return "answered"

    assert anyio.run(crash) == "Connection closed"
    claimed: list[str] = []

    async def after() -> None:
        async with mcp.Client(server(root, "a2")) as client:
            while True:
                reply, _ = await call(client, "claim")
                if reply["status"] != "claimed":
                    assert reply["status"] == "nothing_ready", reply
                    return
                claimed.append(reply["task_id"])

    anyio.run(after)
    store = Store(root)
    states = {state: [t["id"] for t in tasks_in(store, state)] for state in ("pending", "in-progress", "completed")}
    assert sorted(states["pending"] + states["in-progress"] + states["completed"]) == ids
    held = {t["id"]: t["claimed_by"] for t in tasks_in(store, "in-progress")}
    assert sorted(claimed) == sorted(k for k, v in held.items() if v == "a2")
    assert len(claimed) >= 2 and set(held.values()) <= {"a1", "a2"}  # at most the one a1 never heard of
    assert tree_problems(root) == []


def test_without_the_extra_loki_mcp_says_what_to_install(root: Path) -> None:
    import subprocess

    code = ("import sys\nsys.modules['mcp'] = None  # as if the extra were not installed\n"
            "sys.argv = ['loki', 'mcp', '--agent', 'a1']\nfrom loki.entry import main\nsys.exit(main())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "LOKI_ROOT": str(root)})
    assert done.returncode == 1 and done.stdout == ""
    assert "pip install 'loki-state[mcp]'" in done.stderr and done.stderr.count("\n") == 1


@pytest.mark.slow
def test_complete_over_stdio_judges_the_checks_against_the_servers_head(root: Path) -> None:
    """`loki mcp` completes a task with checks only with passing results for the HEAD of the directory it
    runs in (as `loki queue complete --evidence FILE`), and names the checks when it refuses."""
    import subprocess

    git = ["git", "-C", str(root.parent), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "one"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    assert cli(["queue", "add", "fix the parser", "--id", "t1", "--verify", "make test"], root=root).code == 0

    async def scenario() -> None:
        async with mcp.Client(server(root, "claude-1")) as client:
            claimed, _ = await call(client, "claim")
            token = claimed["token"]
            refused, is_error = await call(client, "complete", task_id="t1", token=token)
            assert is_error and refused["status"] == "unverified" and refused["checks"] == ["make test"]
            stale = [{"command": "make test", "exit_code": 0, "commit": "0" * 40}]
            refused, is_error = await call(client, "complete", task_id="t1", token=token, checks=stale)
            assert is_error and refused["status"] == "unverified"
            passing = [{"command": "make test", "exit_code": 0, "commit": head}]
            done, is_error = await call(client, "complete", task_id="t1", token=token, checks=passing)
            assert not is_error and done["status"] == "completed"

    anyio.run(scenario)
    [task] = tasks_in(Store(root), "completed")
    assert task["result"]["verification"]["commit"] == head
    assert tree_problems(root) == []
