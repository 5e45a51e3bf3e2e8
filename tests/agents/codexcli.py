"""Run the real Codex CLI, pinned, against a scripted model (:mod:`tests.agents.responsesserver`).

Each run gets its own ``CODEX_HOME`` with a ``config.toml`` naming a model provider on 127.0.0.1
(``wire_api = "responses"``, a key from an environment variable, no OpenAI login) and marking the
project trusted (untrusted projects load no ``.codex/`` hooks). ``codex exec`` runs headless with
``--dangerously-bypass-approvals-and-sandbox`` (the commands run as a person's approved ones would;
the test's temporary project is the boundary) and ``--dangerously-bypass-hook-trust``: Codex runs
a new hook only once a person has reviewed it, which is exactly what a CI job cannot do.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.agents.npmcache import installed_bin
from tests.agents.responsesserver import Item, ResponsesServer

PACKAGE = "@openai/codex"
VERSION = "0.169.0"
MODEL = "gpt-5.1-codex"
PATCH_MODEL = "gpt-5.5"
"""A model Codex 0.169.0 knows (its bundled model list): only with its metadata does Codex offer the model the
``apply_patch`` tool (freeform); with the unknown ``MODEL`` it falls back to metadata without it."""
RUN_TIMEOUT = 180


def codex_bin() -> Path:
    return installed_bin(PACKAGE, VERSION, "codex")


@dataclass
class Run:
    code: int
    events: list[dict[str, Any]]
    """``codex exec --json``: one event per line (items started and completed, turn usage)."""
    stderr: str
    requests: list[dict[str, Any]]

    def commands(self) -> list[dict[str, Any]]:
        """The shell commands Codex ran: ``command``, ``exit_code``, ``status``."""
        return [e["item"] for e in self.events if e.get("type") == "item.completed"
                and e["item"].get("type") == "command_execution"]


def config(codex_home: Path, project: Path, url: str, model: str = MODEL) -> None:
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(
        f'model = "{model}"\nmodel_provider = "scripted"\n\n'
        '[model_providers.scripted]\nname = "scripted"\n'
        f'base_url = "{url}"\nwire_api = "responses"\nenv_key = "SCRIPTED_MODEL_KEY"\nrequires_openai_auth = false\n\n'
        f'[projects.{json.dumps(str(project.resolve()))}]\ntrust_level = "trusted"\n')


def run_codex(project: Path, codex_home: Path, script: list[Item], prompt: str = "Build the project.", *,
              env: dict[str, str] | None = None, model: str = MODEL) -> Run:
    """One ``codex exec`` session in ``project`` against a fresh scripted model."""
    binary = codex_bin()
    node = shutil.which("node")
    path = [os.path.dirname(sys.executable), *([os.path.dirname(node)] if node else []), "/usr/local/bin", "/usr/bin",
            "/bin"]
    with ResponsesServer(script) as server:
        config(codex_home, project, server.url, model)
        done = subprocess.run(
            [str(binary), "exec", "--json", "--dangerously-bypass-approvals-and-sandbox",
             "--dangerously-bypass-hook-trust", prompt],
            cwd=project, capture_output=True, text=True, timeout=RUN_TIMEOUT, stdin=subprocess.DEVNULL,
            env={"PATH": os.pathsep.join(dict.fromkeys(path)), "HOME": str(codex_home.parent),
                 "CODEX_HOME": str(codex_home), "SCRIPTED_MODEL_KEY": "scripted", "LANG": "C.UTF-8",
                 "NO_COLOR": "1", "LOKI_VALIDATE_ALL": "1", **(env or {})})
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return Run(done.returncode, events, done.stderr, server.requests)
