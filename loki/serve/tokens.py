"""What the board derives from the tree's token: the session cookie and the CSRF token (never the token itself)."""

from __future__ import annotations

import hashlib
import hmac

COOKIE = "loki_session"


def derived(token: str, purpose: str) -> str:
    """A value only the token's holder can make, one per ``purpose`` ("session", "csrf")."""
    return hmac.new(token.encode(), purpose.encode(), hashlib.sha256).hexdigest()
