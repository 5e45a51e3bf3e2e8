"""Published items, their exclusive claim, and long-held locks (the pg-state engineer fills this in)."""

from __future__ import annotations


class Items:
    """``create_unique``, ``claim_into``, ``drop_twin``, ``finish``, ``scan``, ``entry``, ``lock`` ..."""
