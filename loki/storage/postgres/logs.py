"""Append-only logs as rows read after a position (the pg-state engineer fills this in)."""

from __future__ import annotations


class Logs:
    """``append_lines``, ``append_text``, ``rewrite_lines``, ``log_end``, ``read_after`` ..."""
