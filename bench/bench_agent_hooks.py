"""Hook overhead as the real Claude Code sees it (issue 17): 50 Bash calls with loki's hooks and without.

The pinned Claude Code (tests/agents/claude.py; installed into .cache/agents/ on first use) runs a
scripted session of 50 Bash tool calls against the scripted model (tests/agents/modelserver.py) in four
projects, alternately, in the same run:

* **no hooks**: the baseline;
* **loki's hooks**: where `loki hooks install` ran (the five events; a Bash call runs PreToolUse and
  PostToolUse);
* **loki's hooks over HTTP**: `loki hooks install --via http` and `loki serve` (docs/serve.md): PreToolUse and
  PostToolUse are HTTP requests to the resident server, SessionStart and Stop stay commands;
* on PostgreSQL (when a server is there, bench/pgserver.py): loki's command hooks and loki's hooks over HTTP on a
  tree whose state is in the database;
* two controls with the same five events running something else, to say where the time goes:
  ``true`` (Claude Code's own cost of running a hook command) and ``python -c pass`` with loki's
  interpreter (the floor of any hook written in Python).

The time per tool call is the gap between two consecutive requests to the model: Claude Code running
PreToolUse, the command, PostToolUse, and sending the next request. Medians over every call of every
session; the ratio divides by the calls without hooks. Each command is distinct (`echo call-N`) and
succeeds: the common path of a session. Session start-up (SessionStart's briefing included) is outside
the gaps; the whole session's wall time is in the note.

The HTTP configurations run the server under bench/serve_timed.py, which logs each request's time at the server:
the note gives its p50/p99, so a loaded machine's session numbers can be told from the server's own cost, and
splits a call's gap at the two hook requests (the log's ``at`` and the model's request times share one clock).
"""

from __future__ import annotations

import itertools
import json
import os
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.common import QUICK, median, row

CALLS = 50
ROUNDS = int(os.environ.get("LOKI_BENCH_ROUNDS", "0")) or (1 if QUICK else 3)
"""Sessions per configuration (``LOKI_BENCH_ROUNDS`` for more on a loaded machine)."""
CONTROLS = {"true": "true", "python -c pass": f"{shlex.quote(sys.executable)} -c pass"}


def _session(binary: Path, project: Path, home: Path) -> tuple[list[float], float, list[float]]:
    from loki.resident import files
    from tests.agents.claude import claude_session
    from tests.agents.modelserver import bash, text

    turns = [bash(f"echo call-{index}") for index in range(CALLS)] + [text("done")]
    secret = files.token(str(project / ".loki"), create=False)  # the project whose hooks go to `loki serve`
    env = {files.TOKEN_ENV: secret} if secret else None
    run, model = claude_session(binary, project, turns, home=home, hook_events=False, env=env)
    gaps = model.gaps_ms()
    if len(gaps) != CALLS:
        raise RuntimeError(f"expected {CALLS} tool calls, the model saw {len(gaps)}")
    return gaps, run.seconds * 1000, [request.at for request in model.conversation]


def _projects(top: Path) -> tuple[dict[str, Path], dict[str, Any]]:
    """One project per configuration, each a git checkout with `loki init` run; and the HTTP ones' servers."""
    from tests.agents.claude import make_project

    projects = {"no hooks": make_project(top / "bare", hooks=False), "loki's hooks": make_project(top / "loki")}
    installed = json.loads((projects["loki's hooks"] / ".claude" / "settings.json").read_text())["hooks"]
    for name, command in CONTROLS.items():
        project = make_project(top / name.replace(" ", "-"), hooks=False)
        # The same events and matchers as loki's, each running the control command instead.
        hooks = {event: [{**group, "hooks": [{"type": "command", "command": command}]} for group in groups]
                 for event, groups in installed.items()}
        (project / ".claude").mkdir()
        (project / ".claude" / "settings.json").write_text(json.dumps({"hooks": hooks}, indent=2))
        projects[f"hooks running `{name}`"] = project
    servers: dict[str, Any] = {}
    try:
        import uvicorn  # noqa: F401  (the serve extra)
    except ImportError:
        return projects, servers
    from bench.pgserver import point_tree, schema_url
    from tests.agents.claude import loki_command

    projects[HTTP] = _http_project(top / "http", servers, HTTP)
    url, where = schema_url()
    if url is not None:
        pg_project = make_project(top / "pg-loki", hooks=False)
        point_tree(str(pg_project / ".loki"), url)
        loki_command(["hooks", "install"], pg_project)
        projects["loki's hooks, PostgreSQL"] = pg_project
        second, _ = schema_url()
        assert second is not None
        projects[HTTP_PG] = _http_project(top / "pg-http", servers, HTTP_PG, second)
        servers["where"] = where
    return projects, servers


HTTP = "loki's hooks over HTTP (loki serve)"
HTTP_PG = "loki's hooks over HTTP (loki serve), PostgreSQL"


def _http_project(path: Path, servers: dict[str, Any], name: str, url: str | None = None) -> Path:
    """A project whose hooks go to its own `loki serve`, run under bench/serve_timed.py (its log beside it)."""
    import subprocess

    from bench.pgserver import point_tree
    from tests.agents.claude import loki_command, make_project

    project = make_project(path, hooks=False)
    if url is not None:
        point_tree(str(project / ".loki"), url)
    loki_command(["hooks", "install", "--via", "http"], project)
    log = path.parent / f"{path.name}-requests.jsonl"
    server = subprocess.Popen([sys.executable, "-m", "bench.serve_timed", str(project / ".loki"), str(log)],
                              stdout=subprocess.PIPE, text=True, cwd=str(Path(__file__).resolve().parent.parent))
    assert server.stdout is not None
    if not server.stdout.readline():
        raise RuntimeError(f"loki serve did not start for {path}")
    servers[name] = (server, log)
    return project


def _at_server(log: Path, turns: list[list[float]]) -> str:
    from bench.common import percentile

    times = [json.loads(line) for line in log.read_text().splitlines()]
    hooks = [t["ms"] for t in times if t["path"].startswith("/hook/")]
    if not hooks:
        return "no hook request reached the server"
    return (f"at the server: p50 {median(hooks):.2f} ms, p99 {percentile(hooks, 99):.2f} ms over {len(hooks)} "
            f"hook requests; {_parts(times, turns)}")


def _parts(times: list[dict[str, Any]], turns: list[list[float]]) -> str:
    """Where a call's gap goes, from the model's request times and the server's (one monotonic clock): Claude
    Code before PreToolUse, the request, the command between the two hooks, PostToolUse, and Claude Code after
    it until the next request to the model (medians over the calls with exactly one of each hook)."""
    parts: dict[str, list[float]] = {"to PreToolUse": [], "PreToolUse": [], "to PostToolUse": [],
                                     "PostToolUse": [], "to the next model request": []}
    for session in turns:
        for start, end in itertools.pairwise(session):
            inside = [t for t in times if "at" in t and start <= t["at"] <= end]
            pre = [t for t in inside if t["path"] == "/hook/pre-tool-use"]
            post = [t for t in inside if t["path"] == "/hook/post-tool-use"]
            if len(pre) != 1 or len(post) != 1:
                continue
            parts["to PreToolUse"].append((pre[0]["at"] - start) * 1000)
            parts["PreToolUse"].append(pre[0]["ms"])
            parts["to PostToolUse"].append((post[0]["at"] - pre[0]["at"]) * 1000 - pre[0]["ms"])
            parts["PostToolUse"].append(post[0]["ms"])
            parts["to the next model request"].append((end - post[0]["at"]) * 1000 - post[0]["ms"])
    if not parts["PreToolUse"]:
        return "no call's hooks matched to its gap"
    return "a call's gap: " + ", ".join(f"{name} {median(values):.1f} ms" for name, values in parts.items())


def run() -> list[dict[str, Any]]:
    from tests.agents.claude import CLAUDE_CODE_VERSION, AgentUnavailable, claude_binary

    try:
        binary = claude_binary()
    except AgentUnavailable as exc:
        return [row("Claude Code: per Bash call (not run)", 0.0, note=str(exc))]
    with tempfile.TemporaryDirectory() as tmp:
        projects, servers = _projects(Path(tmp))
        samples: dict[str, list[float]] = {name: [] for name in projects}
        walls: dict[str, list[float]] = {name: [] for name in projects}
        turns: dict[str, list[list[float]]] = {name: [] for name in projects}
        try:
            for index in range(ROUNDS):  # alternate, so drift in the machine's load hits every configuration alike
                for number, (name, project) in enumerate(projects.items()):
                    gaps, wall, at = _session(binary, project, Path(tmp) / f"home-{number}-{index}")
                    samples[name] += gaps
                    walls[name].append(wall)
                    turns[name].append(at)
            served = {name: _at_server(log, turns[name]) for name, (_server, log) in
                      ((k, v) for k, v in servers.items() if k != "where")}
        finally:
            for key, value in servers.items():
                if key != "where":
                    value[0].terminate()
                    value[0].wait(timeout=30)
        load = os.getloadavg()
    baseline = median(samples["no hooks"])
    rows = []
    for name, values in samples.items():
        value = median(values)
        note = f"{len(values)} calls in {ROUNDS} session(s); session wall {median(walls[name]) / 1000:.1f} s"
        if name != "no hooks":
            note += f"; {value - baseline:+.1f} ms per call"
        if name in served:
            note += f"; {served[name]}"
        if name == "no hooks":
            note += f"; load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} at the end"
        if "PostgreSQL" in name and "where" in servers:
            note += f"; {servers['where']}"
        rows.append(row(f"Claude Code {CLAUDE_CODE_VERSION}: per Bash call, {name}", value,
                        floor_name=None if name == "no hooks" else "no hooks",
                        floor_ms=None if name == "no hooks" else baseline, note=note))
    return rows
