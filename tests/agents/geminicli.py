"""Run the real Gemini CLI, pinned, against a scripted model (:mod:`tests.agents.geminiserver`).

Gemini CLI sends its model requests to ``GOOGLE_GEMINI_BASE_URL`` when the auth type is an API key
(``security.auth.selectedType: gemini-api-key`` in the user settings; any key will do for a local
server). Each run gets its own ``HOME`` (Gemini's user settings, history and trust store live under
``~/.gemini``) and a minimal environment: nothing of the developer's own Gemini setup, no
``GITHUB_SHA`` (under which Gemini strips every unknown variable from the hooks' environment),
no network use beyond 127.0.0.1 (usage statistics and update checks off).

Headless: ``gemini -p PROMPT --yolo --output-format json`` (``--yolo`` approves the tool calls a
person would; the hooks still run), ``-m`` names the model so that no routing request is made, and
``GEMINI_CLI_TRUST_WORKSPACE=true`` trusts the project, as a CI job must (an untrusted folder runs
no project hooks). ``GEMINI_CLI_NO_RELAUNCH=true`` runs the session in the process started, as the child the CLI
would relaunch itself into runs it (that variable, the same environment), without the child's larger heap limit
(``--max-old-space-size`` at half the RAM; these sessions are small) and one node start fewer.
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

from tests.agents.geminiserver import GeminiServer, Parts
from tests.agents.npmcache import installed_bin

PACKAGE = "@google/gemini-cli"
VERSION = "0.61.0"
MODEL = "gemini-2.5-flash"
RUN_TIMEOUT = 180

USER_SETTINGS = {
    "security": {"auth": {"selectedType": "gemini-api-key"}},
    "privacy": {"usageStatisticsEnabled": False},
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
}


def gemini_bin() -> Path:
    return installed_bin(PACKAGE, VERSION, "gemini")


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str
    requests: list[dict[str, Any]]

    def output(self) -> dict[str, Any]:
        """``--output-format json``: ``response``, ``stats`` (tool calls, failures), ``error``."""
        result: dict[str, Any] = json.loads(self.stdout)
        return result

    def tool_stats(self, name: str = "run_shell_command") -> dict[str, Any]:
        stats: dict[str, Any] = self.output()["stats"]["tools"]["byName"].get(name, {})
        return stats


def environment(home: Path, server_url: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    node = shutil.which("node")
    path = [os.path.dirname(sys.executable), *([os.path.dirname(node)] if node else []), "/usr/local/bin", "/usr/bin",
            "/bin"]
    return {
        "PATH": os.pathsep.join(dict.fromkeys(path)),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "NO_COLOR": "1",
        "GEMINI_API_KEY": "scripted-model-key",
        "GOOGLE_GEMINI_BASE_URL": server_url,
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
        # Without it the CLI starts a second node process that runs the session with this variable set (and a heap
        # limit of half the RAM) and only waits for it: the same session, twice the start-up (~1 s of CPU a run).
        "GEMINI_CLI_NO_RELAUNCH": "true",
        "LOKI_VALIDATE_ALL": "1",  # every write the hooks make is validated in full, as in the rest of the suite
        **(extra or {}),
    }


def run_gemini(project: Path, home: Path, script: list[Parts], prompt: str = "Build the project.", *,
               env: dict[str, str] | None = None) -> Run:
    """One headless session in ``project`` against a fresh scripted model."""
    (home / ".gemini").mkdir(parents=True, exist_ok=True)
    settings = home / ".gemini" / "settings.json"
    if not settings.exists():
        settings.write_text(json.dumps(USER_SETTINGS, indent=2))
    binary = gemini_bin()
    with GeminiServer(script) as server:
        done = subprocess.run([str(binary), "-m", MODEL, "-p", prompt, "--yolo", "--output-format", "json"],
                              cwd=project, env=environment(home, server.url, env), capture_output=True, text=True,
                              timeout=RUN_TIMEOUT, stdin=subprocess.DEVNULL)
    assert server.others == [], f"unexpected model requests: {server.others}"
    return Run(done.returncode, done.stdout, done.stderr, server.requests)
