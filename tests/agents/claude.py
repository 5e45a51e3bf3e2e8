"""The real Claude Code, pinned, installed once into an ignored cache directory, run non-interactively.

``claude_binary()`` installs ``@anthropic-ai/claude-code@CLAUDE_CODE_VERSION`` with npm into
``.cache/agents/claude-code-<version>/`` (or ``$LOKI_AGENTS_CACHE``) the first time and reuses it
afterwards; the package ships a native binary, so nothing of node stays resident once installed. The
install goes to a temp directory renamed into place, under a file lock, so an interrupted or
concurrent install never leaves half a package that later runs would trust.

``run_claude`` starts it the way a script or CI would: ``-p PROMPT --output-format json``, the Bash
tool allowed without prompts (permission rules, not ``--dangerously-skip-permissions``, which root
may not use and which would not show what a normal session does), a temporary ``HOME`` so no user
settings, credentials or history take part, a dummy API key, ``ANTHROPIC_BASE_URL`` at the scripted
model, and every kind of non-essential traffic switched off (telemetry, error reports, update
checks, release notes: ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC``), so the only network peer is
the scripted model on 127.0.0.1. Hooks come from the project's ``.claude/settings.json`` as loki
wrote it. The environment is built from nothing (``PATH``, ``HOME``, ``LANG`` and what is named), so
variables of whoever runs the tests (their own Claude Code's, say) cannot leak in.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.agents.modelserver import ModelServer, Turn

CLAUDE_CODE_VERSION = "2.1.330"
PACKAGE = "@anthropic-ai/claude-code"
REPO = Path(__file__).resolve().parents[2]
INSTALL_TIMEOUT = 900
QUIET_ENV = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",  # no telemetry, update check, release notes, ...
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_BUG_COMMAND": "1",
}
"""Each also implied by the first; named so that a version which splits them stays quiet."""
DUMMY_KEY = "sk-ant-scripted-test-key"


class AgentUnavailable(Exception):
    """The agent cannot run here (no node/npm, the install failed); the message says why."""


def cache_dir() -> Path:
    return Path(os.environ.get("LOKI_AGENTS_CACHE") or REPO / ".cache" / "agents")


def _binary_in(prefix: Path, version: str) -> Path | None:
    """The working binary under an npm prefix: the package's ``bin/claude.exe`` (its postinstall copies the
    platform's native binary there), else the platform package's own binary (a postinstall that npm did
    not run leaves a stub in ``bin/``), else None."""
    scope = prefix / "node_modules" / "@anthropic-ai"
    candidates = [scope / "claude-code" / "bin" / "claude.exe", *sorted(scope.glob("claude-code-*/claude"))]
    return next((path for path in candidates if _reports(path, version)), None)


def _reports(binary: Path, version: str) -> bool:
    """Does ``binary --version`` run and name ``version``? (A stub left by a skipped postinstall does not.)"""
    if not binary.is_file():
        return False
    try:
        done = subprocess.run([str(binary), "--version"], capture_output=True, timeout=60,
                              env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(cache_dir())})
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and done.stdout.decode(errors="replace").split()[:1] == [version]


@contextlib.contextmanager
def _install_lock(directory: Path) -> Iterator[None]:
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".install.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def claude_binary(version: str = CLAUDE_CODE_VERSION) -> Path:
    """The installed binary of Claude Code ``version``, installing it first if needed.

    Raises :class:`AgentUnavailable` when node or npm is missing or the install fails."""
    target = cache_dir() / f"claude-code-{version}"
    found = _binary_in(target, version)
    if found is not None:
        return found
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    if missing:
        raise AgentUnavailable(f"Claude Code needs {' and '.join(missing)} on PATH to install "
                               f"{PACKAGE}@{version}")
    with _install_lock(cache_dir()):
        found = _binary_in(target, version)  # another process may have installed it meanwhile
        if found is not None:
            return found
        staging = cache_dir() / f".partial-{os.getpid()}" / f"claude-code-{version}"
        shutil.rmtree(staging.parent, ignore_errors=True)
        staging.mkdir(parents=True)
        command = ["npm", "install", "--prefix", str(staging), "--no-save", "--no-audit", "--no-fund",
                   "--no-package-lock", "--loglevel=error", f"{PACKAGE}@{version}"]
        try:
            done = subprocess.run(command, capture_output=True, timeout=INSTALL_TIMEOUT, cwd=staging)
        except subprocess.TimeoutExpired:
            shutil.rmtree(staging.parent, ignore_errors=True)
            raise AgentUnavailable(f"`npm install {PACKAGE}@{version}` took over {INSTALL_TIMEOUT} s") from None
        if done.returncode != 0 or _binary_in(staging, version) is None:
            shutil.rmtree(staging.parent, ignore_errors=True)
            tail = (done.stderr or done.stdout).decode(errors="replace").strip().splitlines()[-5:]
            raise AgentUnavailable(f"`npm install {PACKAGE}@{version}` gave no working `claude` (exit "
                                   f"{done.returncode}): " + " | ".join(tail))
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
        shutil.rmtree(staging.parent, ignore_errors=True)
    found = _binary_in(target, version)
    assert found is not None, f"{target}: installed, then not found"
    return found


# -- running it ------------------------------------------------------------------------------------


@dataclass
class ClaudeRun:
    """One finished ``claude -p`` run: its exit code, output and wall time."""

    code: int
    stdout: str
    stderr: str
    seconds: float

    def documents(self) -> list[dict[str, Any]]:
        """Every JSON document printed (one with ``json``, one per line with ``stream-json``)."""
        found = []
        for line in self.stdout.splitlines():
            if line.strip():
                try:
                    found.append(json.loads(line))
                except ValueError:
                    raise AssertionError(f"claude printed a line that is not JSON: {line[:300]!r}") from None
        return found

    def result(self) -> dict[str, Any]:
        """The result document (``"type": "result"``): the reply, ``permission_denials``, ``is_error`` ..."""
        results = [d for d in self.documents() if d.get("type") == "result"]
        assert results, f"claude printed no result (exit {self.code}); stderr: {self.stderr[-2000:]}"
        return results[-1]

    @property
    def permission_denials(self) -> list[dict[str, Any]]:
        denials: list[dict[str, Any]] = self.result().get("permission_denials", [])
        return denials

    def hook_runs(self, event: str | None = None) -> list[dict[str, Any]]:
        """The hooks Claude Code ran and what they answered (``stream-json`` with ``--include-hook-events``):
        ``hook_event``, ``hook_name`` (``PreToolUse:Bash``), ``exit_code``, ``outcome``, ``stdout``, ``stderr``."""
        return [d for d in self.documents() if d.get("type") == "system" and d.get("subtype") == "hook_response"
                and (event is None or d.get("hook_event") == event)]


def tool_dirs() -> list[str]:
    """What ``PATH`` the agent gets: this interpreter's scripts (``loki``), then the system's."""
    return [os.path.dirname(sys.executable), "/usr/local/bin", "/usr/bin", "/bin"]


def claude_env(model_url: str, home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {
        "PATH": os.pathsep.join(tool_dirs()),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "SHELL": "/bin/bash",
        "ANTHROPIC_BASE_URL": model_url,
        "ANTHROPIC_API_KEY": DUMMY_KEY,
        **QUIET_ENV,
    }
    env.update({k: v for k, v in os.environ.items() if k.startswith("LOKI_") and k != "LOKI_AGENTS_CACHE"})
    env.update(extra or {})
    return env


def run_claude(binary: Path, prompt: str, *, cwd: Path, model_url: str, home: Path, hook_events: bool = True,
               args: list[str] | None = None, env: dict[str, str] | None = None, timeout: float = 180) -> ClaudeRun:
    """``claude -p PROMPT`` in ``cwd`` against the scripted model, the Bash tool allowed.

    ``hook_events``: ``--output-format stream-json --verbose --include-hook-events`` (every hook Claude
    Code ran, with its exit code and output, then the result); else ``--output-format json`` (the
    result alone, as a script reads it)."""
    home.mkdir(parents=True, exist_ok=True)
    output = ["stream-json", "--verbose", "--include-hook-events"] if hook_events else ["json"]
    command = [str(binary), "-p", prompt, "--output-format", *output, "--allowedTools", "Bash", *(args or [])]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=claude_env(model_url, home, env), capture_output=True,
                          stdin=subprocess.DEVNULL, timeout=timeout)
    return ClaudeRun(done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace"),
                     time.perf_counter() - started)


# -- a project for it to work in -----------------------------------------------------------------


def loki_command(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The ``loki`` console script of this interpreter, as a user runs it, in ``cwd``; exit 0 or an assertion."""
    script = os.path.join(os.path.dirname(sys.executable), "loki")
    full_env = {**os.environ, "PATH": os.pathsep.join(tool_dirs()), **(env or {})}
    done = subprocess.run([script, *args], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"loki {' '.join(args)}: exit {done.returncode}: {done.stderr}"
    return done


def make_project(path: Path, *, hooks: bool = True) -> Path:
    """A git repository on branch ``main`` with ``loki init`` and (``hooks``) ``loki hooks install`` run in it."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True, capture_output=True)
    loki_command(["init"], path)
    if hooks:
        loki_command(["hooks", "install"], path)
    return path


def claude_session(binary: Path, project: Path, turns: list[Turn], *, home: Path, prompt: str = "Do the task.",
                   **options: Any) -> tuple[ClaudeRun, ModelServer]:
    """One Claude Code session in ``project`` played by ``turns``: the run and the model's record.

    Fails when Claude Code talked to the model about anything but messages (a new kind of request
    in a new version shows here, not as a hang), or asked for more turns than the scenario has."""
    with ModelServer(turns) as model:
        run = run_claude(binary, prompt, cwd=project, model_url=model.url, home=home, **options)
    assert not model.unexpected(), f"unexpected requests to the model: {model.unexpected()}"
    assert model.overrun == 0, (f"Claude Code asked for {model.overrun} turn(s) more than the scenario's "
                                f"{len(turns)}; result: {run.stdout[-1500:]}")
    assert run.code == 0, f"claude exit {run.code}: {run.stderr[-2000:]} {run.stdout[-1500:]}"
    return run, model
