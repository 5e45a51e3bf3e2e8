"""The PreToolUse hook's path-lease check (loki/hooks/leasegate.py) as the console script runs it: every
tool that writes a file, the four modes, who the agent is, the Bash warning, and the imports it costs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loki.clock import ManualClock
from loki.leases.leases import PathLeases
from loki.storage.store import Store
from tests.helpers import Result, loki_proc

NOW = "2026-01-25T10:00:00Z"


@pytest.fixture
def leased(project: Path, root: Path) -> Path:
    """alice holds src/auth/** (exclusive, an hour), carol docs/** (shared)."""
    leases = PathLeases(Store(root, clock=ManualClock(NOW)), root=str(project))
    leases.acquire(["src/auth/**"], agent="alice", task=None)
    leases.acquire(["docs/**"], agent="carol", exclusive=False)
    return project


def hook(project: Path, tool: str, tool_input: dict[str, Any], *, agent: str | None = None, now: str = NOW,
         gemini: bool = False) -> Result:
    payload = {"session_id": "s1", "hook_event_name": "BeforeTool" if gemini else "PreToolUse", "tool_name": tool,
               "tool_input": tool_input, "cwd": str(project)}
    env = {"LOKI_NOW": now, **({"LOKI_AGENT": agent} if agent else {"LOKI_AGENT": ""})}
    args = ["hook", "--agent", "gemini", "before-tool"] if gemini else ["hook", "pre-tool-use"]
    return loki_proc(args, root=project / ".loki", env=env, input=json.dumps(payload))


def decision(result: Result) -> tuple[str | None, str]:
    assert result.code == 0, result.stderr
    if not result.stdout:
        return None, ""
    output = json.loads(result.stdout)["hookSpecificOutput"]
    if "permissionDecision" in output:
        return output["permissionDecision"], output["permissionDecisionReason"]
    return "context", output["additionalContext"]


@pytest.mark.parametrize(("tool", "field"), [("Edit", "file_path"), ("Write", "file_path"),
                                             ("MultiEdit", "file_path"), ("NotebookEdit", "notebook_path")])
def test_every_file_writing_tool_of_claude_code_is_denied_on_another_agents_lease(leased: Path, tool: str,
                                                                                   field: str) -> None:
    said, why = decision(hook(leased, tool, {field: str(leased / "src/auth/login.py")}, agent="bob"))
    assert said == "deny"
    assert why == ("loki: src/auth/login.py is leased: src/auth/** is held by alice (exclusive lease L1, until "
                   "2026-01-25T11:00:00Z); you are bob. Work on other files, or wait until the lease ends; a person "
                   "can end it with `loki lease break`.")


def test_the_holder_a_free_path_an_outside_path_and_an_expired_lease_say_nothing(leased: Path) -> None:
    target = {"file_path": str(leased / "src/auth/login.py")}
    assert decision(hook(leased, "Edit", target, agent="alice")) == (None, "")
    assert decision(hook(leased, "Edit", {"file_path": str(leased / "src/billing/x.py")}, agent="bob")) == (None, "")
    assert decision(hook(leased, "Edit", {"file_path": "/etc/hosts"}, agent="bob")) == (None, "")
    assert decision(hook(leased, "Edit", target, agent="bob", now="2026-01-25T11:00:00Z")) == (None, "")


def test_a_relative_path_and_no_identity_count_too(leased: Path) -> None:
    said, why = decision(hook(leased, "Write", {"file_path": "src/auth/new.py"}))
    assert said == "deny" and "this session has no agent name (LOKI_AGENT), so it is not the holder" in why


@pytest.mark.parametrize(("mode", "expected"), [("deny", "deny"), ("ask", "ask"), ("warn", "context"),
                                                ("off", None)])
def test_the_mode_is_a_setting(leased: Path, mode: str, expected: str | None) -> None:
    (leased / ".loki" / "config" / "loki.json").write_text(json.dumps({"version": 1, "leases": {"enforce": mode}}))
    said, _ = decision(hook(leased, "Edit", {"file_path": str(leased / "src/auth/a.py")}, agent="bob"))
    assert said == expected


def test_a_shared_lease_of_someone_else_only_warns(leased: Path) -> None:
    said, why = decision(hook(leased, "Edit", {"file_path": str(leased / "docs/a.md")}, agent="bob"))
    assert said == "context" and "held by carol (shared lease L2" in why


def test_a_task_claim_holds_its_paths_until_it_ends(project: Path, root: Path) -> None:
    from loki.queue.queue import Queue

    queue = Queue(Store(root, clock=ManualClock(NOW)))
    queue.add("auth", task_id="t1", paths=["src/auth/**"])
    claim = queue.claim("alice", task_id="t1")
    said, why = decision(hook(project, "Edit", {"file_path": "src/auth/x.py"}, agent="bob"))
    assert said == "deny" and "held by alice for task t1 (its claim, until 2026-01-25T11:00:00Z)" in why
    queue.complete("t1", "alice", token=claim["claim_token"])
    assert decision(hook(project, "Edit", {"file_path": "src/auth/x.py"}, agent="bob")) == (None, "")


GIT_ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True,
                          env=GIT_ENV).stdout.strip()


@pytest.mark.parametrize("end", ["landed", "unlanded"])
def test_a_landing_task_keeps_its_paths_until_it_lands_or_is_unlanded(root: Path, end: str) -> None:
    """docs/leases.md, "Landing tasks keep their paths": the hook reads ``queue/landing.json`` as it reads
    ``queue/in-progress.json`` (with and without the index beside the leases); a real git repository decides
    when the task lands (its commit merged) or is unlanded (its branch deleted)."""
    from loki.queue.landing import Landing
    from loki.queue.queue import Queue

    top = root.parent
    subprocess.run(["git", "init", "-q", "-b", "main", str(top)], check=True, env=GIT_ENV)
    git(top, "commit", "-q", "--allow-empty", "-m", "one")
    store = Store(root, clock=ManualClock(NOW))
    queue = Queue(store)
    queue.add("auth", task_id="t1", paths=["src/auth/**"], land="main")
    claim = queue.claim("alice", task_id="t1")
    git(top, "checkout", "-q", "-b", "feat")
    git(top, "commit", "-q", "--allow-empty", "-m", "fix")
    done = queue.complete("t1", "alice", token=claim["claim_token"], head=git(top, "rev-parse", "HEAD"),
                          work_branch="feat")
    assert done["status"] == "landing"
    target = {"file_path": "src/auth/x.py"}
    for with_index in (False, True):
        if with_index:  # a lease elsewhere: the hook reads the index beside the leases, and the queue files
            PathLeases(store, root=str(top)).acquire(["docs/**"], agent="carol")
        said, why = decision(hook(top, "Edit", target, agent="bob"))
        assert said == "deny", why
        assert "held by alice for task t1 (waiting to land, until 2026-01-26T10:00:00Z)" in why
        assert decision(hook(top, "Edit", target, agent="alice")) == (None, "")
        assert decision(hook(top, "Edit", target, agent="bob", now="2026-01-26T10:00:00Z")) == (None, "")
    if end == "landed":
        git(top, "checkout", "-q", "main")
        git(top, "merge", "-q", "--no-ff", "feat", "-m", "merge")
    else:
        git(top, "checkout", "-q", "main")
        git(top, "branch", "-q", "-D", "feat")
    assert [e["action"] for e in Landing(store, repo=str(top)).resolve()] == [end]
    assert decision(hook(top, "Edit", target, agent="bob")) == (None, "")


def test_a_bash_command_naming_a_leased_path_warns(leased: Path) -> None:
    said, why = decision(hook(leased, "Bash", {"command": "sed -i s/a/b/ src/auth/login.py"}, agent="bob"))
    assert said == "context" and why.startswith("loki: this command names src/auth/login.py, which is leased")
    assert decision(hook(leased, "Bash", {"command": "make test"}, agent="bob")) == (None, "")


def test_gemini_clis_file_writing_tools_are_denied(leased: Path) -> None:
    for tool in ("write_file", "replace"):
        result = hook(leased, tool, {"file_path": str(leased / "src/auth/a.py")}, agent="bob", gemini=True)
        answer = json.loads(result.stdout)
        assert answer["decision"] == "deny" and "held by alice" in answer["reason"]


def codex_hook(project: Path, tool: str, tool_input: dict[str, Any], *, agent: str | None = None) -> Result:
    """``loki hook --agent codex pre-tool-use`` with the payload Codex CLI 0.169.0 sends (recorded from the real
    CLI: tests/agents/test_codex_leases.py)."""
    payload = {"session_id": "s1", "turn_id": "t1", "hook_event_name": "PreToolUse", "model": "gpt-5.5",
               "permission_mode": "bypassPermissions", "tool_name": tool, "tool_input": tool_input,
               "tool_use_id": "call_p1", "cwd": str(project)}
    env = {"LOKI_NOW": NOW, "LOKI_AGENT": agent or ""}
    return loki_proc(["hook", "--agent", "codex", "pre-tool-use"], root=project / ".loki", env=env,
                     input=json.dumps(payload))


def patch(*lines: str) -> str:
    return "\n".join(["*** Begin Patch", *lines, "*** End Patch", ""])


@pytest.mark.parametrize("line", ["*** Update File: src/auth/login.py", "*** Add File: src/auth/new.py",
                                  "*** Delete File: src/auth/old.py"])
def test_a_codex_apply_patch_on_another_agents_lease_is_denied(leased: Path, line: str) -> None:
    body = patch("*** Update File: README.md", "@@", "-a", "+b", line, "@@", "-c", "+d")
    said, why = decision(codex_hook(leased, "apply_patch", {"command": body}, agent="bob"))
    rel = line.rsplit(": ", 1)[1]
    assert said == "deny"
    assert why.startswith(f"loki: {rel} is leased: src/auth/** is held by alice (exclusive lease L1, until "
                          "2026-01-25T11:00:00Z); you are bob.")


def test_a_codex_patch_moving_a_file_into_a_lease_is_denied_and_the_holders_patch_goes_through(leased: Path) -> None:
    moving = patch("*** Update File: src/billing/x.py", "*** Move to: src/auth/x.py", "@@", "-a", "+b")
    assert decision(codex_hook(leased, "apply_patch", {"command": moving}, agent="bob"))[0] == "deny"
    assert decision(codex_hook(leased, "apply_patch", {"command": moving}, agent="alice")) == (None, "")
    elsewhere = patch("*** Update File: src/billing/x.py", "@@", "-a", "+b")
    assert decision(codex_hook(leased, "apply_patch", {"command": elsewhere}, agent="bob")) == (None, "")


def test_a_codex_patch_through_the_shell_is_decided_as_an_edit(leased: Path) -> None:
    body = patch("*** Update File: src/auth/login.py", "@@", "-a", "+b")
    said, why = decision(codex_hook(leased, "Bash", {"command": f"apply_patch <<'EOF'\n{body}EOF\n"}, agent="bob"))
    assert said == "deny" and "held by alice" in why
    # A patch only written to a file by the shell is not an edit of the files it names: the Bash warning.
    said, why = decision(codex_hook(leased, "Bash", {"command": f"cat > x.patch <<'EOF'\n{body}EOF\n"},
                                    agent="bob"))
    assert said == "context" and why.startswith("loki: this command names src/auth/login.py, which is leased")


def test_a_codex_patch_on_a_shared_lease_only_warns(leased: Path) -> None:
    body = patch("*** Update File: docs/a.md", "@@", "-a", "+b")
    said, why = decision(codex_hook(leased, "apply_patch", {"command": body}, agent="bob"))
    assert said == "context" and "docs/a.md is leased: docs/** is held by carol" in why


def test_patch_paths_reads_every_file_line_once() -> None:
    from loki.hooks.leasegate import patch_paths

    body = patch("*** Add File: a.py", "+x", "*** Update File: b.py", "*** Move to: c.py", "@@", "-y", "+z",
                 "*** Delete File: a.py", "*** Update File:   ", "+*** Update File: not-a-header.py")
    assert patch_paths(body) == ["a.py", "b.py", "c.py"]


FORBIDDEN = ("typer", "rich", "jsonschema", "portalocker", "typing", "dataclasses", "loki.storage.store",
             "loki.storage.schema", "subprocess", "pathlib")
PROBE = """
import json, os, sys
sys.argv = ["loki", "hook", "pre-tool-use"]
from loki.entry import main
try:
    main()
except SystemExit:
    pass
with open(os.environ["MODULES_OUT"], "w") as f:
    json.dump(sorted(sys.modules), f)
"""


def test_the_lease_check_keeps_the_hot_path_light(leased: Path, tmp_path: Path) -> None:
    out = tmp_path / "modules.json"
    payload = {"session_id": "s1", "hook_event_name": "PreToolUse", "tool_name": "Edit",
               "tool_input": {"file_path": str(leased / "src/auth/a.py")}, "cwd": str(leased)}
    done = subprocess.run([sys.executable, "-c", PROBE], input=json.dumps(payload).encode(), capture_output=True,
                          cwd=leased, timeout=60, env={**os.environ, "MODULES_OUT": str(out), "LOKI_NOW": NOW})
    assert b'"permissionDecision": "deny"' in done.stdout, done.stderr
    heavy = [m for m in json.loads(out.read_text()) if m.split(".")[0] in FORBIDDEN or m in FORBIDDEN]
    assert heavy == []


def test_the_setting_is_documented_validated_and_defaults_to_deny(root: Path) -> None:
    from loki.config import DEFAULTS
    from loki.hooks.leasegate import DEFAULT_MODE
    from tests.helpers import cli

    assert DEFAULTS["leases"]["enforce"] == DEFAULT_MODE == "deny"
    (root / "config" / "loki.json").write_text(json.dumps({"version": 1, "leases": {"enforce": "warn"}}))
    assert cli(["validate"], root=root).code == 0
    (root / "config" / "loki.json").write_text(json.dumps({"version": 1, "leases": {"enforce": "maybe"}}))
    assert cli(["validate"], root=root).code == 1
