"""Hook overhead as the real Claude Code sees it (issue 17): 50 Bash calls with loki's hooks and without.

The pinned Claude Code (tests/agents/claude.py; installed into .cache/agents/ on first use) runs a
scripted session of 50 Bash tool calls against the scripted model (tests/agents/modelserver.py) in four
projects, alternately, in the same run:

* **no hooks**: the baseline;
* **loki's hooks**: where `loki hooks install` ran (the five events; a Bash call runs PreToolUse and
  PostToolUse);
* **loki's hooks over HTTP**: `loki hooks install --via http` and `loki serve` (docs/serve.md): PreToolUse and
  PostToolUse are HTTP requests to the resident server, SessionStart and Stop stay commands;
* two controls with the same five events running something else, to say where the time goes:
  ``true`` (Claude Code's own cost of running a hook command) and ``python -c pass`` with loki's
  interpreter (the floor of any hook written in Python).

The time per tool call is the gap between two consecutive requests to the model: Claude Code running
PreToolUse, the command, PostToolUse, and sending the next request. Medians over every call of every
session; the ratio divides by the calls without hooks. Each command is distinct (`echo call-N`) and
succeeds: the common path of a session. Session start-up (SessionStart's briefing included) is outside
the gaps; the whole session's wall time is in the note.
"""

from __future__ import annotations

import json
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.common import QUICK, median, row

CALLS = 50
ROUNDS = 1 if QUICK else 3
CONTROLS = {"true": "true", "python -c pass": f"{shlex.quote(sys.executable)} -c pass"}


def _session(binary: Path, project: Path, home: Path) -> tuple[list[float], float]:
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
    return gaps, run.seconds * 1000


def _projects(top: Path) -> dict[str, Path]:
    """One project per configuration, each a git checkout with `loki init` run."""
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
    try:
        import uvicorn  # noqa: F401  (the serve extra)
    except ImportError:
        return projects
    from tests.agents.claude import loki_command

    http = make_project(top / "http", hooks=False)
    loki_command(["hooks", "install", "--via", "http"], http)
    loki_command(["serve", "--detach"], http)
    projects["loki's hooks over HTTP (loki serve)"] = http
    return projects


def run() -> list[dict[str, Any]]:
    from tests.agents.claude import CLAUDE_CODE_VERSION, AgentUnavailable, claude_binary

    try:
        binary = claude_binary()
    except AgentUnavailable as exc:
        return [row("Claude Code: per Bash call (not run)", 0.0, note=str(exc))]
    with tempfile.TemporaryDirectory() as tmp:
        projects = _projects(Path(tmp))
        samples: dict[str, list[float]] = {name: [] for name in projects}
        walls: dict[str, list[float]] = {name: [] for name in projects}
        for index in range(ROUNDS):  # alternate, so drift in the machine's load hits every configuration alike
            for number, (name, project) in enumerate(projects.items()):
                gaps, wall = _session(binary, project, Path(tmp) / f"home-{number}-{index}")
                samples[name] += gaps
                walls[name].append(wall)
        from loki.resident import files

        for project in projects.values():
            run = files.read_run(str(project / ".loki"))
            if run is not None:
                import os
                import signal

                os.kill(run["pid"], signal.SIGTERM)
    baseline = median(samples["no hooks"])
    rows = []
    for name, values in samples.items():
        value = median(values)
        note = f"{len(values)} calls in {ROUNDS} session(s); session wall {median(walls[name]) / 1000:.1f} s"
        if name != "no hooks":
            note += f"; {value - baseline:+.1f} ms per call"
        rows.append(row(f"Claude Code {CLAUDE_CODE_VERSION}: per Bash call, {name}", value,
                        floor_name=None if name == "no hooks" else "no hooks",
                        floor_ms=None if name == "no hooks" else baseline, note=note))
    return rows
