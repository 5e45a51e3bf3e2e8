"""``loki watch`` in a real terminal: tmux panes of 80x24, 120x40 and 200x60, read with ``capture-pane``.

Each screen is compared with tests/golden/watch/tmux-WxH.txt (time is frozen with LOKI_NOW, so the
screen is the same on every run); the keys go through ``send-keys``: ``q`` quits with exit 0, ``p``
pauses, ``?`` shows the help. After every way out (``q``, SIGTERM, SIGHUP) the terminal is back in
its own mode: ``stty -a`` in the same pane shows ``icanon`` and ``echo`` again.

No fixed sleeps: every wait polls the pane or a file against a deadline. These tests need tmux; where
it is not installed they are skipped, and the reason says so.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests import watchgolden, watchscene
from tests.helpers import loki_proc

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (the live view's "
                                                                       "terminal tests need it: apt-get install tmux)")]


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


class Pane:
    """One ``loki watch`` in a detached tmux session of its own (its own server socket)."""

    def __init__(self, root: Path, work: Path, width: int, height: int, *args: str) -> None:
        self.work = work
        self.session = f"loki-watch-{os.getpid()}-{time.monotonic_ns()}"
        self.pid_file, self.done, self.stty = work / "pid", work / "exit-code", work / "stty"
        watch = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "loki", "--root", str(root), "watch",
                                                   "--observer", "polling", *args])
        # The shell writes loki's pid, becomes loki, then the pane's shell records how it ended and the
        # terminal's mode after it.
        command = (f"cd {shlex.quote(str(REPO))} && LOKI_NOW={watchscene.NOW} sh -c "
                   f"{shlex.quote(f'echo $$ > {self.pid_file}; exec {watch}')}; "
                   f"echo $? > {self.done}.tmp; stty -a > {self.stty}; mv {self.done}.tmp {self.done}; "
                   "sleep 600")
        self.tmux = ["tmux", "-L", self.session]
        subprocess.run([*self.tmux, "-f", "/dev/null", "new-session", "-d", "-s", self.session, "-x", str(width),
                        "-y", str(height), command], check=True)

    def screen(self) -> str:
        return subprocess.run([*self.tmux, "capture-pane", "-p", "-t", self.session], capture_output=True,
                              text=True, check=True).stdout

    def stable_screen(self, text: str) -> str:
        """The screen once it shows ``text`` and two captures in a row agree."""
        previous: list[str] = [""]

        def settled() -> bool:
            now = self.screen()
            same = text in now and now == previous[0]
            previous[0] = now
            return same

        wait_until(settled, repr(text))
        return previous[0]

    def keys(self, *keys: str) -> None:
        subprocess.run([*self.tmux, "send-keys", "-t", self.session, *keys], check=True)

    def mode(self) -> str:
        """The pane's terminal mode now (``stty -a`` of its tty)."""
        tty = subprocess.run([*self.tmux, "display", "-p", "-t", self.session, "#{pane_tty}"], capture_output=True,
                             text=True, check=True).stdout.strip()
        return subprocess.run(["stty", "-a", "-F", tty], capture_output=True, text=True, check=True).stdout

    def pid(self) -> int:
        wait_until(lambda: self.pid_file.exists() and self.pid_file.read_text().strip() != "", "loki's pid")
        return int(self.pid_file.read_text())

    def exit_code(self) -> int:
        wait_until(self.done.exists, "loki watch to exit")
        return int(self.done.read_text())

    def kill(self) -> None:
        subprocess.run([*self.tmux, "kill-server"], capture_output=True)


@pytest.fixture
def scene() -> Iterator[Path]:
    """The scene in /tmp/loki-watch-XXXXXXXX/.loki: a path of one length, so the header lays out alike."""
    top = Path(tempfile.mkdtemp(prefix="loki-watch-", dir="/tmp"))
    try:
        watchscene.build(top / ".loki")
        yield top / ".loki"
    finally:
        shutil.rmtree(top, ignore_errors=True)


@pytest.fixture
def panes(tmp_path: Path) -> Iterator[Callable[..., Pane]]:
    started: list[Pane] = []

    def start(root: Path, width: int, height: int, *args: str) -> Pane:
        work = tmp_path / f"pane-{len(started)}"
        work.mkdir()
        started.append(Pane(root, work, width, height, *args))
        return started[-1]

    yield start
    for pane in started:
        pane.kill()


def normalised(screen: str, root: Path) -> str:
    return screen.replace(str(root.parent), "/tmp/loki-watch-XXXXXXXX").rstrip("\n")


def restored(mode: str) -> bool:
    words = mode.split()
    return "icanon" in words and "echo" in words


LAST_EVENT = "half-open: github"
"""The watcher's first tick moves github to HALF_OPEN: once it shows, the first pass is on screen."""


@pytest.mark.parametrize(("width", "height"), [(80, 24), (120, 40), (200, 60)])
def test_the_live_view_at_each_size_is_the_golden_one(scene: Path, panes: Callable[..., Pane], width: int,
                                                      height: int) -> None:
    pane = panes(scene, width, height)
    screen = pane.stable_screen(LAST_EVENT)
    lines = screen.rstrip("\n").split("\n")
    assert len(lines) <= height and lines[0].startswith("loki watch · consuming")
    watchgolden.check(f"tmux-{width}x{height}.txt", normalised(screen, scene))
    assert not restored(pane.mode()), "the live view reads keys in cbreak mode"
    pane.keys("q")
    assert pane.exit_code() == 0
    assert restored(pane.stty.read_text())


def test_keys_help_pause_and_quit(scene: Path, panes: Callable[..., Pane]) -> None:
    pane = panes(scene, 80, 24)
    pane.stable_screen(LAST_EVENT)
    pane.keys("?")
    helped = pane.stable_screen("help (any key closes it)")
    assert "  q            quit (Ctrl-C too)" in helped and "in progress (" not in helped
    pane.keys("x")  # any key closes the help
    wait_until(lambda: "in progress (" in pane.screen(), "the panels again")
    pane.keys("p")
    paused = pane.stable_screen("PAUSED")
    assert paused.split("\n")[0].endswith("  PAUSED") and "p resume" in paused
    assert loki_proc(["signal", "emit", "DOCS_NEEDED", "topic=keys"], root=scene,
                     env={"LOKI_NOW": watchscene.NOW}).code == 0
    # The watcher keeps consuming while the screen is paused: the signal is applied, only counted on screen.
    wait_until(lambda: "topic" in (scene / "logs" / "signals.jsonl").read_text(), "the signal to be consumed")
    held = pane.stable_screen("events  paused, 1 new")
    assert held.count("DOCS_NEEDED logged") == paused.count("DOCS_NEEDED logged")
    pane.keys("p")
    resumed = pane.stable_screen("p pause")
    assert resumed.count("DOCS_NEEDED logged") == paused.count("DOCS_NEEDED logged") + 1
    assert "PAUSED" not in resumed
    pane.keys("Up", "Up")
    assert "2 newer below (End: newest)" in pane.stable_screen("newer below")
    pane.keys("End")
    wait_until(lambda: "newer below" not in pane.screen(), "the newest events again")
    pane.keys("q")
    assert pane.exit_code() == 0
    assert restored(pane.stty.read_text())


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_stop_signal_ends_the_view_cleanly_and_gives_the_terminal_back(scene: Path, panes: Callable[..., Pane],
                                                                         signum: int) -> None:
    pane = panes(scene, 80, 24)
    pane.stable_screen(LAST_EVENT)
    assert not restored(pane.mode())
    os.kill(pane.pid(), signum)
    assert pane.exit_code() == 0
    assert restored(pane.stty.read_text())
    # The screen the shell had before is back: the view drew on the alternate screen.
    assert "loki watch · consuming" not in pane.screen()


def test_a_resized_terminal_gets_a_screen_made_for_its_new_size(scene: Path, panes: Callable[..., Pane]) -> None:
    pane = panes(scene, 200, 60)
    pane.stable_screen(LAST_EVENT)
    subprocess.run([*pane.tmux, "resize-window", "-t", pane.session, "-x", "80", "-y", "24"], check=True)
    wait_until(lambda: "       failed 1  cancelled 1" in pane.screen(), "the 80-column layout")
    screen = pane.stable_screen(LAST_EVENT)
    assert max(len(line) for line in screen.split("\n")) <= 80
    assert normalised(screen, scene) == (watchgolden.GOLDEN / "tmux-80x24.txt").read_text().rstrip("\n")
    pane.keys("q")
    assert pane.exit_code() == 0


def test_the_view_needs_no_keyboard(scene: Path, tmp_path: Path) -> None:
    """stdin not a terminal (``loki watch < /dev/null`` in a terminal): no keys, the view still runs and stops."""
    work = tmp_path
    session = f"loki-watch-nokeys-{os.getpid()}-{time.monotonic_ns()}"
    done = work / "exit-code"
    command = (f"cd {shlex.quote(str(REPO))} && LOKI_NOW={watchscene.NOW} {shlex.quote(sys.executable)} -m loki "
               f"--root {shlex.quote(str(scene))} watch --observer polling < /dev/null; echo $? > {done}; sleep 600")
    tmux = ["tmux", "-L", session]
    subprocess.run([*tmux, "-f", "/dev/null", "new-session", "-d", "-s", session, "-x", "80", "-y", "24", command],
                   check=True)
    try:
        def screen() -> str:
            return subprocess.run([*tmux, "capture-pane", "-p", "-t", session], capture_output=True, text=True,
                                  check=True).stdout

        wait_until(lambda: LAST_EVENT in screen(), "the first pass on screen")
        subprocess.run([*tmux, "send-keys", "-t", session, "C-c"], check=True)
        wait_until(done.exists, "loki watch to exit")
        assert done.read_text().strip() == "0"
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)


def test_every_line_of_a_screen_fits_its_width(scene: Path, panes: Callable[..., Pane]) -> None:
    """Including the wide characters of a title: tmux, not loki, counts the cells here."""
    pane = panes(scene, 80, 24)
    screen = pane.stable_screen(LAST_EVENT)
    assert "修复登录页面的编码问题" in screen
    wide = [line for line in screen.split("\n") if re.search(r"[\u4e00-\u9fff]", line)]
    assert wide and all(len(line) + sum(1 for c in line if "\u4e00" <= c <= "\u9fff") <= 80 for line in wide)
    pane.keys("q")
    assert pane.exit_code() == 0


@pytest.mark.parametrize(("start", "end"), [((80, 24), (200, 60)), ((120, 30), (80, 24)), ((80, 24), (160, 40))])
def test_the_view_follows_a_resize_both_ways(scene: Path, panes: Callable[..., Pane], start: tuple[int, int],
                                             end: tuple[int, int]) -> None:
    """Grown or shrunk, the next frame is composed for the new size: as wide as it is (the event lines no
    longer cut at the old width, none wrapped) and no taller (the header stays on the first line)."""
    pane = panes(scene, *start)
    pane.stable_screen(LAST_EVENT)
    subprocess.run([*pane.tmux, "resize-window", "-t", pane.session, "-x", str(end[0]), "-y", str(end[1])],
                   check=True)
    wait_until(lambda: pane.screen().split("\n")[0].startswith("loki watch") and
               max(len(line) for line in pane.screen().split("\n")) > start[0] if end[0] > start[0] else
               max(len(line) for line in pane.screen().split("\n")) <= end[0], "a frame for the new width")
    screen = pane.stable_screen(LAST_EVENT)
    lines = screen.rstrip("\n").split("\n")
    assert lines[0].startswith("loki watch · consuming") and len(lines) <= end[1]
    assert max(len(line) for line in lines) <= end[0]
    if end[0] == 200:
        assert normalised(screen, scene) == (watchgolden.GOLDEN / "tmux-200x60.txt").read_text().rstrip("\n")
    pane.keys("q")
    assert pane.exit_code() == 0
