"""Remove secrets from text and JSON-like values before anything is written to disk.

Hook payloads carry whatever the agent typed or a tool printed: API keys in ``curl`` commands, passwords in
database URLs, tokens in ``.env`` files it cat'ed. Everything loki stores from a hook (strike state, error
memory, escalations) goes through :func:`redact` or :func:`redact_obj` first.

Each secret becomes ``[REDACTED:<kind>]`` and the text around it is kept, so a redacted command is still
recognisable. Rules are either *shapes* (a token format that is a secret wherever it appears: ``ghp_…``,
``AKIA…``, a PEM private key) or *contexts* (a value after ``password=``, ``Authorization:``, ``--token``).
Context rules leave placeholders, variable references and code alone (``password=os.environ[...]``,
``token=${TOKEN}``, ``max_tokens=5``), so printed source code and prose are not mangled.

Cost: a rule's regex only runs when one of its literal needles occurs in the text; every regex starts with
a literal so the engine can skip to candidates, and none has nested unbounded repetition. Case-insensitive
rules run on the lower-cased text (the engine cannot skip ahead under IGNORECASE). Regexes are compiled on
first use, keeping the hook's import cheap.
"""

from __future__ import annotations

import re

from loki.lazyre import LazyRegex

TYPE_CHECKING = False  # typing costs ~8 ms of import; only the type checker needs it
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import Any

MARK = "[REDACTED:"


def _mark(kind: str) -> str:
    return f"{MARK}{kind}]"




class _Rule:
    """One redaction rule.

    ``replace(text, match)`` decides what a match becomes (the match's offsets index ``text``); without it
    the whole match becomes the rule's mark. A ``folded`` rule is written in lower case and matched against
    the lower-cased text, which is how it is case-insensitive without IGNORECASE's cost.
    """

    __slots__ = ("folded", "kind", "needles", "regex", "replace", "unfolded")

    def __init__(
        self,
        kind: str,
        source: str,
        needles: tuple[str, ...],
        *,
        replace: Callable[[str, re.Match[str]], str] | None = None,
        folded: bool = False,
    ) -> None:
        self.kind = kind
        self.needles = needles  # lower-case; looked for in the lower-cased text
        self.replace = replace
        self.folded = folded
        self.regex = LazyRegex(source)
        self.unfolded = LazyRegex(source, re.IGNORECASE)

    def apply(self, text: str, lowered: str) -> str:
        if self.folded:
            # lower() keeps offsets unless some character's lower case is longer ("İ"); then fall back
            if len(lowered) == len(text):
                return self._substitute(text, self.regex.get().finditer(lowered))
            return self._substitute(text, self.unfolded.get().finditer(text))
        if self.replace is None:
            return self.regex.get().sub(_mark(self.kind), text)
        return self._substitute(text, self.regex.get().finditer(text))

    def _substitute(self, text: str, matches: Iterable[re.Match[str]]) -> str:
        parts: list[str] = []
        last = 0
        for match in matches:
            parts.append(text[last : match.start()])
            parts.append(self.replace(text, match) if self.replace else _mark(self.kind))
            last = match.end()
        if not parts:
            return text
        parts.append(text[last:])
        return "".join(parts)


def _group(text: str, match: re.Match[str], name: str) -> str | None:
    start, end = match.span(name)
    return None if start < 0 else text[start:end]


# Words that make a key sensitive when the key *ends* with them (db_password, GITHUB_TOKEN, x-api-key).
# Keys merely containing them (max_tokens, token_count, password_hint) are ordinary settings.
_SECRET_WORDS = (
    r"password|passwd|passphrase|secret|token|api[_-]?key|apikey|access[_-]?key|private[_-]?key"
    r"|client[_-]?secret"
)
_SENSITIVE_KEY = LazyRegex(rf"^[\w.-]*?(?:{_SECRET_WORDS})$|^(?:proxy-)?authorization$|^(?:set-)?cookie$", re.I)
_SECRET_WORD = LazyRegex(_SECRET_WORDS, re.IGNORECASE)
_CODE_REFERENCE = LazyRegex(r"[A-Za-z_][\w.]*")
_ENV_REFERENCE = LazyRegex(r"\$\{?\w+\}?|%\w+%")
_PLACEHOLDERS = frozenset({
    "", "null", "none", "nil", "undefined", "true", "false", "***", "****", "*****", "xxx", "xxxx", "...",
    "changeme", "redacted", "<redacted>",
})
_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


def _is_placeholder(value: str) -> bool:
    stripped = value.strip()
    return (
        stripped.lower() in _PLACEHOLDERS
        or stripped.startswith(MARK)
        or _ENV_REFERENCE.get().fullmatch(stripped) is not None
    )


def _is_literal_secret(value: str, key: str = "") -> bool:
    """False for placeholders, references and code, which are left as they are."""
    stripped = value.strip()
    if _is_placeholder(stripped) or stripped[:1] in ("$", "<", "{", "[", "%"):
        return False
    if stripped.startswith(("os.environ", "process.env")):
        return False
    # password=password, token=self.token, api_key=API_KEY: a variable being passed along, not a secret
    if _CODE_REFERENCE.get().fullmatch(stripped) and _SECRET_WORD.get().search(stripped):
        return not ("." in stripped or "_" in stripped or stripped.lower() == key.lower())
    return True


def _looks_like_prose_word(value: str) -> bool:
    """A short all-letter word ("flag", "see", "required") after a separator is prose, not a credential."""
    return len(value) < 6 and value.isalpha()


def _key_before(text: str, end: int) -> str:
    start = end
    while start > 0 and end - start < 64 and text[start - 1] in _KEY_CHARS:
        start -= 1
    return text[start:end]


def _kind_of_key(key: str) -> str:
    key = key.lower().replace("-", "_")
    if key.endswith("aws_secret_access_key"):
        return "aws_secret_access_key"
    for word, kind in (
        ("pass", "password"),
        ("client_secret", "client_secret"),
        ("private", "private_key"),
        ("secret", "secret"),
        ("access", "access_key"),
        ("api", "api_key"),
        ("token", "token"),
        ("authorization", "authorization"),
        ("cookie", "cookie"),
    ):
        if word in key:
            return kind
    return "secret"


def _replace_assignment(text: str, match: re.Match[str]) -> str:
    whole = text[match.start() : match.end()]
    word = _group(text, match, "word") or ""
    sep = _group(text, match, "sep") or ""
    quoted = _group(text, match, "dq")
    quote = '"'
    if quoted is None:
        quoted, quote = _group(text, match, "sq"), "'"
    key = _key_before(text, match.start()) + word
    value = quoted if quoted is not None else _group(text, match, "bare") or ""
    if not _is_literal_secret(value, key):
        return whole
    if quoted is None:
        quote = ""
        if text[match.end() : match.end() + 1] in ("(", "["):
            return whole  # a call or subscript: code, not a value
        if ":" in sep and _looks_like_prose_word(value):
            return whole
    return f"{word}{sep}{quote}{_mark(_kind_of_key(key))}{quote}"


def _replace_flag(text: str, match: re.Match[str]) -> str:
    value = _group(text, match, "value") or ""
    quote = value[0] if len(value) > 1 and value[0] in ("'", '"') and value[-1] == value[0] else ""
    inner = value[1:-1] if quote else value
    if not _is_literal_secret(inner) or (not quote and _looks_like_prose_word(inner)):
        return text[match.start() : match.end()]
    kind = _kind_of_key(_group(text, match, "flag") or "")
    return f"{_group(text, match, 'lead')}{quote}{_mark(kind)}{quote}"


def _replace_authorization(text: str, match: re.Match[str]) -> str:
    if not _is_literal_secret(_group(text, match, "value") or ""):
        return text[match.start() : match.end()]
    scheme = (_group(text, match, "scheme") or "").lower()
    return f"{_group(text, match, 'lead')}{_mark('bearer_token' if scheme == 'bearer' else 'authorization')}"


def _replace_bearer(text: str, match: re.Match[str]) -> str:
    value = _group(text, match, "value") or ""
    # "bearer authentication" is prose; real tokens are long or carry digits
    if len(value) < 8 or (len(value) < 24 and not any(ch.isdigit() for ch in value)):
        return text[match.start() : match.end()]
    return f"{_group(text, match, 'lead')}{_mark('bearer_token')}"


def _replace_url_password(text: str, match: re.Match[str]) -> str:
    if not _is_literal_secret(_group(text, match, "password") or ""):
        return text[match.start() : match.end()]
    return f"://{_group(text, match, 'user')}:{_mark('password')}@"


def _replace_openai(text: str, match: re.Match[str]) -> str:
    return _mark("anthropic_key" if text.startswith("sk-ant-", match.start()) else "openai_key")


# Where a token must not be glued to a longer word, a look-behind placed *after* the token's literal
# prefix checks the character before it, so the pattern still starts with a literal.
# Shapes come first: they are unambiguous, and their marks then shield values from the context rules.
_RULES: tuple[_Rule, ...] = (
    _Rule(
        "private_key",
        r"-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
        r"(?:(?!-----END)[\s\S]){0,65536}"
        r"(?:-----END[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----)?",
        ("private key",),
    ),
    _Rule("openai_key", r"sk-(?<![\w-]sk-)[A-Za-z0-9_-]{20,}", ("sk-",), replace=_replace_openai),
    _Rule(
        "github_token",
        r"(?:gh[pousr]_|github_pat_)(?<!\wgh._)(?<!\wgithub_pat_)[A-Za-z0-9_]{20,}",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    ),
    _Rule(
        "aws_access_key_id",
        r"A(?:KIA|SIA)(?<![A-Z0-9]....)[A-Z0-9]{16}(?![A-Za-z0-9])",
        ("akia", "asia"),
    ),
    _Rule("slack_token", r"xox[abposr]-(?<![\w-]xox.-)[A-Za-z0-9-]{10,}", ("xox",)),
    _Rule("slack_webhook", r"https://hooks\.slack\.com/services/[A-Za-z0-9/_-]{10,}", ("hooks.slack.com",)),
    _Rule("jwt", r"eyJ(?<![\w-]eyJ)[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}", ("eyj",)),
    _Rule("google_api_key", r"AIza(?<![\w-]AIza)[0-9A-Za-z_-]{35}", ("aiza",)),
    _Rule(
        "stripe_key",
        r"(?:sk|rk)_(?:live|test)_(?<!\w.._live_)(?<!\w.._test_)[A-Za-z0-9]{16,}",
        ("_live_", "_test_"),
    ),
    _Rule("npm_token", r"npm_(?<!\wnpm_)[A-Za-z0-9]{36}(?![A-Za-z0-9])", ("npm_",)),
    _Rule("pypi_token", r"pypi-AgE[A-Za-z0-9_-]{50,}", ("pypi-",)),
    _Rule("huggingface_token", r"hf_(?<!\whf_)[A-Za-z0-9]{30,}", ("hf_",)),
    _Rule("gitlab_token", r"glpat-[A-Za-z0-9_-]{20,}", ("glpat-",)),
    _Rule(
        "password",
        r"://(?P<user>[^\s:/?#@'\"\[\]]{0,256}):(?P<password>[^\s/?#@'\"]{1,256})@",
        ("://",),
        replace=_replace_url_password,
    ),
    _Rule(
        "authorization",
        r"(?P<lead>authorization[\"']?[ \t]*[:=][ \t]*[\"']?(?:(?P<scheme>bearer|basic|token|digest)[ \t]+)?)"
        r"(?P<value>[^\s\"',;]{4,})",
        ("authorization",),
        replace=_replace_authorization,
        folded=True,
    ),
    _Rule(
        "bearer_token",
        r"(?P<lead>bearer(?<!\wbearer)[ \t]+)(?P<value>[a-z0-9._~+/-]+=*)",
        ("bearer",),
        replace=_replace_bearer,
        folded=True,
    ),
    _Rule(
        "flag",
        r"(?P<lead>-(?<![\w-]-)-?(?P<flag>password|passwd|pass|token|secret|api[_-]key|apikey|client-secret"
        r"|access-token|auth-token)(?:=|[ \t]+))(?P<value>\"[^\"\n]*\"|'[^'\n]*'|[^\s\"';&|,()<>`]+)",
        ("-pass", "-token", "-secret", "-api", "-client-secret", "-access-token", "-auth-token"),
        replace=_replace_flag,
        folded=True,
    ),
    _Rule(
        "assignment",
        rf"(?P<word>{_SECRET_WORDS})(?P<sep>[\"']?[ \t]*[:=][ \t]*)"
        r"(?:\"(?P<dq>[^\"\n]*)\"|'(?P<sq>[^'\n]*)'|(?P<bare>[^\s\"',;&|(){}\[\]<>`]+))",
        ("pass", "secret", "token", "key"),
        replace=_replace_assignment,
        folded=True,
    ),
)


def redact(text: str) -> str:
    """``text`` with every secret replaced by ``[REDACTED:<kind>]``."""
    if not text:
        return text
    lowered = text.lower()
    for rule in _RULES:
        if any(needle in lowered for needle in rule.needles):
            redacted = rule.apply(text, lowered)
            if redacted != text:
                text = redacted
                lowered = text.lower()
    return text


def redact_obj(value: Any) -> Any:
    """A copy of ``value`` with strings redacted and the values of sensitive keys replaced.

    Dicts and lists are walked recursively (tuples stay tuples). A key like ``password``, ``api_key``,
    ``GITHUB_TOKEN`` or ``Authorization`` has its whole scalar value replaced; other strings go through
    :func:`redact`. Keys are kept as they are.
    """
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        for key, item in value.items():
            if isinstance(key, str) and _is_secret_scalar(item) and _SENSITIVE_KEY.get().match(key):
                out[key] = _mark(_kind_of_key(key))
            else:
                out[key] = redact_obj(item)
        return out
    if isinstance(value, list):
        return [redact_obj(item) for item in value]
    if isinstance(value, tuple):
        return tuple(redact_obj(item) for item in value)
    return value


def _is_secret_scalar(item: Any) -> bool:
    # Under a sensitive key everything but a placeholder or a reference is a secret: a config value
    # "password123" is a password even though it contains the word.
    if isinstance(item, str):
        return not _is_placeholder(item)
    return isinstance(item, (int, float)) and not isinstance(item, bool)
