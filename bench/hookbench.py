"""What the hook benchmarks share: a Claude Code payload, a project to run in, timed failure hooks."""

from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Any

from bench.common import BASE_ENV
from loki.storage.tree import init_tree

FAILURE_ERROR = "Exit code 127\n/bin/bash: line 1: cargo: command not found"


def payload(event: str, cwd: str, **fields: Any) -> bytes:
    """A hook payload as Claude Code sends it on stdin."""
    base = {"session_id": "9f0c6c1e-7a57-4b8f-9d0e-3a2b1c4d5e6f", "cwd": cwd, "permission_mode": "default",
            "transcript_path": "/home/dev/.claude/projects/x/9f0c6c1e.jsonl", "hook_event_name": event}
    return json.dumps({**base, **fields}).encode()


def project(tmp: str, name: str = "shop") -> str:
    """A checkout of ``main`` with ``.loki/`` at its top."""
    top = os.path.join(tmp, name)
    os.makedirs(os.path.join(top, ".git"))
    with open(os.path.join(top, ".git", "HEAD"), "w") as f:
        f.write("ref: refs/heads/main\n")
    init_tree(os.path.join(top, ".loki"))
    return top


def time_failures(loki: list[str], top: str, repeat: int, warmup: int = 2) -> list[float]:
    """Cold ``post-tool-use-failure`` runs; each fails a different command, so each is a first strike."""
    samples = []
    for index in range(warmup + repeat):
        stdin = payload("PostToolUseFailure", top, tool_name="Bash", tool_use_id=f"toolu_{index}",
                        tool_input={"command": f"cargo build -p crate{index}", "description": "Run it"},
                        error=FAILURE_ERROR, is_interrupt=False)
        started = time.perf_counter()
        done = subprocess.run([*loki, "hook", "post-tool-use-failure"], input=stdin, env=BASE_ENV, cwd=top,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        elapsed = (time.perf_counter() - started) * 1000
        if done.returncode != 0 or done.stderr:
            raise RuntimeError(f"post-tool-use-failure: exit {done.returncode}: {done.stderr.decode()[:300]}")
        if index >= warmup:
            samples.append(elapsed)
    return samples
