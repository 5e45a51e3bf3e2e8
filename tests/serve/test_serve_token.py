"""The serve token file (loki/resident/files.py): created 0600 from its first byte, never readable by
others; first callers racing in several processes end with one token, the one every caller got."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from loki.resident import files


def test_the_token_is_never_in_a_file_others_may_read(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every regular file flushed while the token is made is 0600 at that moment (the token is in it)."""
    seen: list[int] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        mode = os.fstat(fd).st_mode
        if stat.S_ISREG(mode):
            seen.append(stat.S_IMODE(mode))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    old = os.umask(0o022)
    try:
        made = files.token(str(root))
    finally:
        os.umask(old)
    assert made and seen and all(mode == 0o600 for mode in seen), [oct(m) for m in seen]
    target = files.path(str(root), files.TOKEN_FILE)
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600
    assert files.token(str(root)) == made  # made once, then read
    assert os.listdir(os.path.dirname(target)) == [os.path.basename(target)]  # no temp file left


def test_an_empty_token_file_is_written_over_0600(root: Path) -> None:
    target = files.path(str(root), files.TOKEN_FILE)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    Path(target).write_text("")
    made = files.token(str(root))
    assert made and Path(target).read_text() == made + "\n"
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600


def test_an_old_token_file_readable_by_others_is_tightened_when_read(root: Path) -> None:
    """A token written 0644 (before the file was made 0600, or chmod'ed since) is 0600 after the next use, through
    the library and through the CLI (`loki serve --env` reads it), and it is the same token."""
    target = files.path(str(root), files.TOKEN_FILE)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    Path(target).write_text("an-old-token\n")
    os.chmod(target, 0o644)
    assert files.token(str(root)) == "an-old-token"
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600
    os.chmod(target, 0o640)
    from tests.helpers import cli

    shown = cli(["serve", "--env"], root=root)
    assert shown.code == 0 and "an-old-token" in shown.stdout
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600


RACER = """
import sys
from loki.resident import files
sys.stdin.read()  # the start line: every racer is waiting before any begins
print(files.token(sys.argv[1]))
"""


@pytest.mark.slow
def test_first_callers_racing_in_processes_all_get_the_one_token(root: Path) -> None:
    for _ in range(5):
        target = files.path(str(root), files.TOKEN_FILE)
        if os.path.exists(target):
            os.unlink(target)
        racers = [subprocess.Popen([sys.executable, "-c", RACER, str(root)], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, text=True) for _ in range(8)]
        for racer in racers:
            assert racer.stdin is not None
            racer.stdin.close()  # go
        tokens = set()
        for racer in racers:
            assert racer.stdout is not None
            tokens.add(racer.stdout.read().strip())
            racer.stdout.close()
            assert racer.wait(timeout=60) == 0
        assert tokens == {Path(target).read_text().strip()}
        assert stat.S_IMODE(os.stat(target).st_mode) == 0o600
        assert os.listdir(os.path.dirname(target)) == [os.path.basename(target)]
