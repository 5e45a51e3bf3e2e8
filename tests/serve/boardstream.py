"""A board's live feed as a browser's EventSource reads it: ``GET /events`` on a raw socket, then one server-sent
``live`` event at a time (the board's tests and bench/bench_serve.py)."""

from __future__ import annotations

import socket
import time

WAIT_SECONDS = 30.0
"""How long a reader waits for the next ``live`` event before it fails."""


def open_board_stream(port: int, cookie: str) -> socket.socket:
    """A connection to the board's ``/events`` with the session ``cookie``, the request sent (a socket timeout of
    30 s fails a read of a server that sends nothing at all)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT_SECONDS)
    sock.sendall(f"GET /events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nCookie: {cookie}\r\n"
                 "Accept: text/event-stream\r\n\r\n".encode())
    return sock


class BoardStream:
    """A board's ``/events`` stream, read one ``live`` event at a time."""

    def __init__(self, port: int, cookie: str) -> None:
        self.sock = open_board_stream(port, cookie)
        self.buffer = b""

    def next_live(self) -> str:
        """The next ``live`` event's region (its ``data:`` lines). Fails after :data:`WAIT_SECONDS` without one: the
        stream's keep-alive comment (every 15 s) would otherwise keep a socket timeout from ever firing."""
        deadline = time.monotonic() + WAIT_SECONDS
        while True:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no live event within {WAIT_SECONDS:g} s")
            end = self.buffer.find(b"\n\n")
            while end < 0:
                chunk = self.sock.recv(65536)
                if not chunk:
                    raise ConnectionError("the event stream closed")
                self.buffer += chunk
                end = self.buffer.find(b"\n\n")
            event, self.buffer = self.buffer[:end], self.buffer[end + 2:]
            lines = event.decode("utf-8", "replace").splitlines()
            if any(line == "event: live" for line in lines):
                return "\n".join(line[6:] for line in lines if line.startswith("data: "))

    def next_live_showing(self, text: str, within: int = 5) -> str:
        """The first of the next ``within`` live events whose region shows ``text``. A wake that came before a
        change committed (the listener's own start, another writer) may render a region without the change
        first: the board's reads are separate statements, so a region read across another writer's commit
        can differ from the last one sent and still not show that commit (seen once in `make test`)."""
        regions = []
        for _ in range(within):
            regions.append(self.next_live())
            if text in regions[-1]:
                return regions[-1]
        raise AssertionError(f"{text!r} is in none of the next {within} live events; the last: {regions[-1]}")

    def close(self) -> None:
        self.sock.close()
