"""Install a pinned npm package (a real agent CLI) into the ignored cache ``.cache/agents/``.

The end-to-end tests run the agents themselves, never a mock: the test setup installs the pinned
version with npm once per checkout (``.cache/agents/<package>@<version>/``, in .gitignore) and
reuses it afterwards. Without node or npm the tests are skipped with the reason shown (``-ra``);
with ``LOKI_REQUIRE_AGENTS=1`` (CI) a missing agent fails the test instead, so CI cannot go green
without having run them.

Installing is atomic: npm writes into a temporary directory that is renamed into place when
complete, so a killed install never leaves a half-installed agent behind, and two test runs
installing at once both end with one complete copy.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

CACHE = Path(__file__).resolve().parents[2] / ".cache" / "agents"
REQUIRE = "LOKI_REQUIRE_AGENTS"
INSTALL_TIMEOUT = 600


def unavailable(reason: str) -> None:
    """Skip with ``reason``, or fail under ``LOKI_REQUIRE_AGENTS=1``."""
    if os.environ.get(REQUIRE) == "1":
        pytest.fail(f"{reason}, and {REQUIRE}=1 requires the agent end-to-end tests to run")
    pytest.skip(reason)


def installed_bin(package: str, version: str, command: str) -> Path:
    """The path of ``command`` from ``package@version``, installing it first if needed."""
    target = CACHE / f"{package.replace('/', '+')}@{version}"
    binary = target / "node_modules" / ".bin" / command
    if binary.exists():
        return binary
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            unavailable(f"{tool} is not installed: the {package} end-to-end tests need it")
    CACHE.mkdir(parents=True, exist_ok=True)
    staging = CACHE / f".{target.name}.{os.getpid()}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    done = subprocess.run(["npm", "install", "--prefix", str(staging), "--no-audit", "--no-fund", "--no-save",
                           "--loglevel=error", f"{package}@{version}"],
                          capture_output=True, text=True, timeout=INSTALL_TIMEOUT)
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        unavailable(f"npm could not install {package}@{version}: {done.stderr.strip()[-500:]}")
    try:
        staging.rename(target)
    except OSError:  # another run finished first: keep its copy
        shutil.rmtree(staging, ignore_errors=True)
    if not binary.exists():
        pytest.fail(f"{package}@{version} installed, but it has no {command} in node_modules/.bin")
    return binary
