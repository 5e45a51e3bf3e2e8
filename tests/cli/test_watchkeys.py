"""The live view's keyboard (loki/cli/watchkeys.py) on a pseudo-terminal: cbreak mode and its undoing on
every way out, keys read on a thread without blocking, escape sequences decoded."""

from __future__ import annotations

import os
import termios
import threading
from collections.abc import Iterator

import pytest

from loki.cli.watchkeys import KeyReader, cbreak, decode


@pytest.fixture
def pty() -> Iterator[tuple[int, int]]:
    master, slave = os.openpty()
    try:
        yield master, slave
    finally:
        os.close(master)
        os.close(slave)


def canonical(fd: int) -> bool:
    lflag = termios.tcgetattr(fd)[3]
    return bool(lflag & termios.ICANON) and bool(lflag & termios.ECHO)


def test_cbreak_inside_and_the_saved_mode_back_after_a_return(pty: tuple[int, int]) -> None:
    _, slave = pty
    before = termios.tcgetattr(slave)
    assert canonical(slave)
    with cbreak(slave):
        assert not canonical(slave)
        assert termios.tcgetattr(slave)[3] & termios.ISIG  # Ctrl-C and Ctrl-Z still send their signals
    assert termios.tcgetattr(slave) == before


def test_the_saved_mode_comes_back_after_an_exception(pty: tuple[int, int]) -> None:
    _, slave = pty
    before = termios.tcgetattr(slave)
    with pytest.raises(RuntimeError, match="boom"), cbreak(slave):
        raise RuntimeError("boom")
    assert termios.tcgetattr(slave) == before


def test_keys_are_read_on_a_thread_and_wake_the_loop(pty: tuple[int, int]) -> None:
    master, slave = pty
    woken = threading.Event()
    with cbreak(slave), KeyReader(slave, woken.set) as keys:
        assert keys.drain() == []
        os.write(master, b"p\x1b[A?")
        assert woken.wait(10)
        collected: list[str] = []
        while len(collected) < 3:  # the three keys may come in one read or several
            woken.wait(10)
            woken.clear()
            collected += keys.drain()
        assert collected == ["p", "up", "?"]


@pytest.mark.parametrize(("data", "keys"), [
    ("q", ["q"]),
    ("\x1b[A\x1b[B", ["up", "down"]),
    ("\x1bOA", ["up"]),
    ("\x1b[5~\x1b[6~", ["pageup", "pagedown"]),
    ("\x1b[H\x1b[F\x1b[4~", ["home", "end", "end"]),
    ("\x1b", ["escape"]),
    ("\x1b[15~p", ["p"]),  # F5, unknown: dropped whole
    ("\x1b[1;5Aq", ["q"]),  # Ctrl-Up, unknown: dropped whole
])
def test_escape_sequences_are_decoded_into_key_names(data: str, keys: list[str]) -> None:
    assert decode(data) == keys
