"""A database URL as loki may save or print it: no part that can hold a secret.

A PostgreSQL URL carries secrets in two places: the password of its userinfo, and query parameters
(``password=``, ``sslpassword=``, and whatever a value quotes). libpq reads the URL its own way, which is
not :func:`urllib.parse.urlsplit`'s: the userinfo runs to the *first* ``@`` before any ``/`` (so a ``?``
or ``#`` in a password is still the password), the rest up to ``/`` or ``?`` is the host list. This module
reads it the way libpq does, so what it drops is exactly what libpq would take as the password.

* :func:`problem` names what makes a URL malformed (an unescaped ``@`` or ``/`` or a bad ``%`` escape in
  the userinfo, an unclosed IPv6 bracket, a port that is not a number) in words that quote no part of the
  URL: libpq's own messages quote the token they choke on, which is the password.
* :func:`shown` is the URL without its password and without any query parameter that can hold a secret;
  it never raises, whatever the text. It is what ``config/loki.json`` saves and every message prints.
* :func:`secrets_in` lists the substrings of a URL that must not appear in a message (what libpq or the
  driver may quote back), for :func:`scrub`.

Standard library only: the cold CLI path reaches it without psycopg.
"""

from __future__ import annotations

import re

# libpq's parameters that hold a secret; the others name hosts, ports, files, modes and timeouts.
SECRET_PARAMS = frozenset({"password", "sslpassword"})
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
_PORT = re.compile(r"[0-9]*")


class _Parts:
    """A URL cut where libpq cuts it (nothing decoded)."""

    __slots__ = ("hosts", "path", "query", "scheme", "userinfo")

    def __init__(self, url: str) -> None:
        scheme, sep, rest = url.partition("://")
        if not sep:
            scheme, rest = "", url
        self.scheme = scheme
        # libpq: the userinfo ends at the first '@' met before any '/'
        stop = _first_of(rest, "@/")
        if stop < len(rest) and rest[stop] == "@":
            self.userinfo: str | None = rest[:stop]
            rest = rest[stop + 1 :]
        else:
            self.userinfo = None
        host_end = _first_of(rest, "/?")
        self.hosts = rest[:host_end]
        rest = rest[host_end:]
        path, _, self.query = rest.partition("?")
        self.path = path.partition("#")[0]
        self.query = self.query.partition("#")[0]


def _first_of(text: str, chars: str) -> int:
    """The index of the first of ``chars`` in ``text`` (its length when there is none)."""
    return next((index for index, char in enumerate(text) if char in chars), len(text))


def problem(url: str) -> str | None:
    """Why libpq would misread ``url`` or quote its password back, in words that quote none of it; None if
    nothing does."""
    parts = _Parts(url)
    if parts.userinfo is not None and _BAD_ESCAPE.search(parts.userinfo):
        return "the user or password holds a '%' not followed by two hex digits (write a '%' as %25)"
    if "@" in parts.hosts:
        return "the user or password holds an unescaped '@' (write it as %40)"
    if parts.userinfo is None and "@" in parts.path:
        return ("an '@' after a '/': a '/' in the user or password is written %2F, an '@' in the database "
                "name %40")
    for host in parts.hosts.split(","):
        if host.startswith("["):
            close = host.find("]")
            if close < 0:
                return "an IPv6 host opened with '[' is not closed with ']'"
            port = host[close + 1 :].removeprefix(":")
        elif "]" in host:
            return "a ']' without its '[' in the host"
        else:
            port = host.partition(":")[2]
        if not _PORT.fullmatch(port) or len(port) > 5 or (port and int(port) > 65535):
            return "a port that is not a number from 0 to 65535"
    if _BAD_ESCAPE.search(parts.query) or _BAD_ESCAPE.search(parts.path):
        return "the database name or a query parameter holds a '%' not followed by two hex digits (write %25)"
    return None


def names_database(url: str) -> bool:
    """A database in the path (``…/DATABASE``) or a ``dbname=`` parameter."""
    parts = _Parts(url)
    return bool(parts.path.strip("/")) or any(pair.partition("=")[0] == "dbname" for pair in parts.query.split("&"))


def _decoded(text: str) -> str:
    from urllib.parse import unquote

    return unquote(text.replace("+", " "))


def _safe_param(name: str, value: str) -> bool:
    from loki.text.redact import redact

    plain = _decoded(name).strip().lower()
    if plain in SECRET_PARAMS:
        return False
    # any other parameter whose name or value the redactor sees a secret in (options=-c x.token=..., a
    # misspelt password parameter) is left out too: what it holds is not needed to name the database
    return redact(f"{plain}={_decoded(value)}") == f"{plain}={_decoded(value)}"


def shown(url: str) -> str:
    """``url`` with its password and secret query parameters taken out; never raises.

    The user is kept (libpq reads it up to the first ``:``), the hosts, the database and the query
    parameters that cannot hold a secret; the fragment goes. A URL libpq would misread (see
    :func:`problem`) shows its scheme and host part only, cut before any ``@`` or ``/`` that might start
    a password's tail.
    """
    from loki.text.redact import redact

    parts = _Parts(url)
    scheme = f"{parts.scheme}://" if parts.scheme else ""
    if problem(url) is not None:
        hosts = parts.hosts.rpartition("@")[2] if parts.userinfo is not None else ""
        return f"{scheme}{redact(hosts.partition('[')[0] if '[' in hosts and ']' not in hosts else hosts)}…"
    user = parts.userinfo.partition(":")[0] if parts.userinfo is not None else ""
    user_part = f"{redact(user)}@" if user else ""
    kept = []
    for pair in parts.query.split("&") if parts.query else []:
        name, _, value = pair.partition("=")
        if _safe_param(name, value):
            kept.append(pair)
    query = f"?{'&'.join(kept)}" if kept else ""
    return f"{scheme}{user_part}{parts.hosts}{redact(parts.path)}{query}"


def secrets_in(url: str) -> list[str]:
    """The parts of ``url`` no message may quote (longest first): its userinfo, password and secret query
    values, each as written and decoded, and whatever follows an unescaped ``@`` in the host part."""
    parts = _Parts(url)
    found: list[str] = []
    if parts.userinfo is not None:
        _, colon, password = parts.userinfo.partition(":")
        if colon and password:  # a user alone is no secret, and messages name it
            found += [parts.userinfo, password, _decoded(password)]
    if "@" in parts.hosts:  # the tail of a password holding an '@': libpq took it for a host
        found += [parts.hosts, parts.hosts.rpartition("@")[0]]
    if parts.userinfo is None and "@" in parts.path:
        found += [parts.hosts, parts.path]
    for pair in parts.query.split("&") if parts.query else []:
        name, _, value = pair.partition("=")
        if value and not _safe_param(name, value):
            found += [value, _decoded(value)]
    return sorted({text for text in found if text}, key=len, reverse=True)


def scrub(message: str, url: str) -> str:
    """``message`` (the driver's or libpq's) with every part of ``url`` that can hold a secret taken out."""
    from loki.text.redact import redact

    for secret in secrets_in(url):
        if len(secret) >= 3:  # a one- or two-character password would take every such letter with it
            message = message.replace(secret, "[REDACTED:password]")
    return redact(message)
