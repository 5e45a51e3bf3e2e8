"""Debian's headless Chromium driven through its own chromedriver (selenium): nothing is downloaded.

`make browser` installs the two packages (`apt-get install -y chromium chromium-driver`; `.ci/run` runs it as
root). Without them the browser tests skip, saying so; with LOKI_REQUIRE_BROWSER=1 (CI) that is a failure.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
REQUIRE = "LOKI_REQUIRE_BROWSER"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage")
ARTEFACTS = Path(os.environ.get("LOKI_TEST_ARTEFACTS") or Path(__file__).resolve().parents[2] / "test-artefacts")
"""Where the screenshots go (ignored by git): CI keeps this directory."""


def browser_missing() -> str | None:
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not os.path.exists(path):
            return f"{path} is missing: `make browser` installs Debian's {package}"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (the dev extra)"
    return None


def require_browser() -> None:
    missing = browser_missing()
    if missing is None:
        return
    if os.environ.get(REQUIRE) == "1":
        pytest.fail(f"{missing} ({REQUIRE}=1: the board's browser tests must run)", pytrace=False)
    pytest.skip(missing)


@contextmanager
def chromium(width: int = 1440, height: int = 900) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="loki-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.add_argument(f"--window-size={width},{height}")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def screenshot(driver: Any, name: str, width: int, height: int) -> Path:
    driver.set_window_size(width, height)
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTEFACTS / f"{name}-{width}x{height}.png"
    assert driver.save_screenshot(str(path))
    return path
