"""Documents under lock domains, as rows (the pg-tasks engineer fills this in: see docs/postgres.md)."""

from __future__ import annotations


class Documents:
    """``transaction``, ``read``, ``write``, ``snapshot``, ``exists``, ``read_text``, ``write_text``,
    ``remove``, ``list``, ``change_token``, ``config``, ``setting``, ``write_config``."""
