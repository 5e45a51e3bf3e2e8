"""Remove secrets from text and JSON-like values before anything is written to disk.

Hook payloads carry whatever the agent typed or a tool printed: API keys in ``curl`` commands, passwords in
database URLs, tokens in ``.env`` files it cat'ed. Everything loki stores from a hook (strike state, error
memory, escalations) goes through :func:`redact` or :func:`redact_obj` first.

Each secret becomes ``[REDACTED:<kind>]`` and the text around it is kept, so a redacted command is still
recognisable. Rules are either *shapes* (a token format that is a secret wherever it appears: ``ghp_…``,
``AKIA…``, a PEM private key) or *contexts* (a value after ``password=``, ``Authorization:``, ``--token``).
Context rules leave placeholders, variable references and code alone (``password=os.environ[...]``,
``token=${TOKEN}``, ``max_tokens=5``), so printed source code and prose are not mangled.

Keys are judged whole: ``DB_PASS``, ``SECRET_KEY``, ``AccountKey`` name a secret; ``SORT_KEY``, ``key``
and docker's ``auth`` are generic, and count only with a generated-looking value; ``PWD``, ``bypass``,
``max_tokens`` name none. Commands with their own password syntax (``mysql -pPW``, ``curl -u user:pw``,
``docker login -p``, ``aws configure set``, ``.netrc``) have a rule each, and a bare 40-character AWS
secret key is told from a git SHA or an identifier by its letters (see :func:`_replace_bare_aws_secret`).
The shapes follow the rule lists of gitleaks and detect-secrets (the regexes here are loki's own; running
either tool from a hook would cost more than the hook's whole budget); tests/text/test_redact.py has a secret
and a near miss for each.

Cost: a rule's regex only runs when one of its literal needles occurs in the text; every regex but the
bare AWS key's starts with a literal so the engine can skip to candidates, and none has nested unbounded
repetition. Case-insensitive rules run on the lower-cased text (the engine cannot skip ahead under
IGNORECASE). The token shapes (most rules) are ``long``: one scan for a run of 16 token characters
decides whether any of them can match, so prose, logs and tracebacks skip their needle look-ups. Regexes
are compiled on first use, keeping the hook's import cheap. About 0.3 ms per 5 KB.
"""

from __future__ import annotations

import re

from loki.text.lazyre import LazyRegex

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
    the lower-cased text, which is how it is case-insensitive without IGNORECASE's cost. A ``long`` rule
    (most token shapes) runs only on a text with a run of 16 or more token characters: one scan spares the
    look for its needles in ordinary prose, logs and tracebacks.
    """

    __slots__ = ("folded", "kind", "long", "needles", "regex", "replace", "unfolded")

    def __init__(
        self,
        kind: str,
        source: str,
        needles: tuple[str, ...],
        *,
        replace: Callable[[str, re.Match[str]], str] | None = None,
        folded: bool = False,
        long: bool = False,
    ) -> None:
        self.kind = kind
        self.long = long  # a token shape with a run of 16+ token characters: skipped when the text has none
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


# Words that make a key sensitive when the key *ends* with them (db_password, GITHUB_TOKEN, x-api-key,
# DB_PASS, SECRET_KEY). Keys merely containing them (max_tokens, token_count, password_hint) are ordinary
# settings. The assignment rule finds the last word of a key with _KEY_WORDS and then judges the whole key
# (_secret_key_class), so `bypass=1`, `PWD=/home/ada` and `SORT_KEY=name` stay as they are.
_SECRET_WORDS = (
    r"password|passwd|passphrase|pass|pwd|secret|token|api[_-]?key|apikey|access[_-]?key|private[_-]?key"
    r"|client[_-]?secret|key"
)
_KEY_WORDS = r"pass(?:word|wd|phrase)?|pwd|secret|token|key|auth"
# The key, normalised (camelCase split, lower case, '-' and '.' as '_'), names a secret outright...
_STRONG_KEY = LazyRegex(
    r"(?:password|passwd|passphrase|(?:^|_)pass|_pwd|secret|token|apikey|(?:^|_)(?:"
    # ...or is a key whose qualifier says what kind: SECRET_KEY, ENCRYPTION_KEY, AccountKey, x-api-key
    r"secret|encryption|encrypt|decryption|signing|sign|master|private|priv|api|access|auth|app|session|service"
    r"|account|client|db|database|hmac|jwt|crypto|cipher|fernet|license|storage|webhook|deploy|ssh|gpg|pgp|aes"
    r"|rsa|shared_access|sas|stripe|twilio|sendgrid|mailgun|openai|anthropic|consumer|bot|admin|root)_key)$"
    r"|^(?:proxy_)?authorization$|^(?:set_)?cookie$"
)
# ...or is a bare generic key (key, auth, npm's _auth) whose value counts only if it looks generated.
# Other *_KEY keys name no secret (SORT_KEY, strike_key, idempotency_key: ids and hashes by design).
_WEAK_KEY = LazyRegex(r"^_?(?:key|auth)$")
_CAMEL = LazyRegex(r"(?<=[a-z0-9])(?=[A-Z])")


def _normalised_key(key: str) -> str:
    return _CAMEL.get().sub("_", key).lower().replace("-", "_").replace(".", "_")


def _secret_key_class(key: str) -> str | None:
    """"strong" when ``key`` names a secret, "weak" when only a generated-looking value is one, else None."""
    normal = _normalised_key(key)
    if _STRONG_KEY.get().search(normal):
        return "strong"
    if _WEAK_KEY.get().search(normal):
        return "weak"
    return None


def _looks_generated(value: str) -> bool:
    """A value under a generic key (SORT_KEY, auth) that is a secret: long, letters and digits, no spaces.

    ``created_at``, ``user:42`` and ``required`` are settings; ``k8Xq2...`` (16+ characters) and a base64
    ``user:password`` (docker's ``auth``) are not.
    """
    if len(value) < 12 or any(ch.isspace() for ch in value):
        return False
    if len(value) >= 16 and any(ch.isdigit() for ch in value) and any(ch.isalpha() for ch in value):
        return True
    return ":" in _base64_text(value)


def _base64_text(value: str) -> str:
    if len(value) % 4 or not _BASE64.get().fullmatch(value):
        return ""
    import binascii

    try:
        return binascii.a2b_base64(value).decode("utf-8", "replace")
    except (binascii.Error, ValueError):
        return ""


_BASE64 = LazyRegex(r"[A-Za-z0-9+/]+={0,2}")
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
        ("pwd", "password"),
        ("client_secret", "client_secret"),
        ("private", "private_key"),
        ("secret", "secret"),
        ("access", "access_key"),
        ("api", "api_key"),
        ("token", "token"),
        ("authorization", "authorization"),
        ("cookie", "cookie"),
        ("auth", "auth"),
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
    strength = _secret_key_class(key)
    if strength is None or not _is_literal_secret(value, key):
        return whole
    if strength == "weak" and not _looks_generated(value.strip()):
        return whole
    if quoted is None:
        quote = ""
        if text[match.end() : match.end() + 1] in ("(", "["):
            return whole  # a call or subscript: code, not a value
        if ":" in sep and _looks_like_prose_word(value):
            return whole
    return f"{word}{sep}{quote}{_mark(_kind_of_key(key))}{quote}"


def _replace_env_line(text: str, match: re.Match[str]) -> str:
    """``KEY=value`` at the start of a line (a .env file, ``env`` output): the value runs to the next blank,
    ``&``, ``;`` and ``(`` included, as dotenv reads it (``key = value`` with blanks is code: the assignment
    rule judges it)."""
    key = _group(text, match, "key") or ""
    value = _group(text, match, "value") or ""
    strength = _secret_key_class(key)
    if strength is None or not _is_literal_secret(value, key) or _CALL.get().match(value):
        return text[match.start() : match.end()]
    if strength == "weak" and not _looks_generated(value):
        return text[match.start() : match.end()]
    return f"{_group(text, match, 'lead')}{_mark(_kind_of_key(key))}"


def _replace_netrc_line(text: str, match: re.Match[str]) -> str:
    """``password VALUE`` alone on a line; prose (``Password expired``) is a lower-case word, a password
    rarely is (one that is stays caught with its ``machine`` line, by the netrc rule)."""
    value = _group(text, match, "value") or ""
    if (value.isalpha() and value[1:].islower()) or not _is_literal_secret(value):
        return text[match.start() : match.end()]
    return f"{_group(text, match, 'lead')}{_mark('password')}"


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


def _replace_value(kind: str, *, prose_check: bool = False) -> Callable[[str, re.Match[str]], str]:
    """A replacement keeping group ``lead`` and redacting group ``value`` (quotes kept), unless it is a
    placeholder or reference (or, with ``prose_check``, a short word of prose)."""
    def replace(text: str, match: re.Match[str]) -> str:
        value = _group(text, match, "value") or ""
        quote = value[0] if len(value) > 1 and value[0] in ("'", '"') and value[-1] == value[0] else ""
        inner = value[1:-1] if quote else value
        if not _is_literal_secret(inner) or (prose_check and not quote and _looks_like_prose_word(inner)):
            return text[match.start() : match.end()]
        return f"{_group(text, match, 'lead')}{quote}{_mark(kind)}{quote}"

    return replace


def _replace_configure_set(text: str, match: re.Match[str]) -> str:
    """``aws configure set aws_secret_access_key VALUE``: only keys that name a secret."""
    key = _group(text, match, "key") or ""
    if _secret_key_class(key.rsplit(".", 1)[-1]) != "strong":
        return text[match.start() : match.end()]
    return _replace_value(_kind_of_key(key))(text, match)


_LONG_RUN = LazyRegex(r"[A-Za-z0-9_-]{16}")
_CALL = LazyRegex(r"[A-Za-z_][\w.]*[(\[]")  # get_key(), env["X"]: code, not a value
_LOWER_RUN = LazyRegex(r"[a-z]{3,}")


def _replace_bare_aws_secret(text: str, match: re.Match[str]) -> str:
    """A bare 40-character AWS secret access key (base64 of 30 random bytes), told from look-alikes.

    * a git SHA or any hex digest has no upper case: both cases are required;
    * an identifier or a path (``getUserAccountPreferencesFromDatabase123``) is made of words: 28 or more
      of its 40 characters sit in runs of 3+ lower-case letters, which 1 random key in more than 300,000
      reaches;
    * filler (``AAAA...A``) has little variety: at least 12 distinct characters (a random key has ~30).
    """
    value = text[match.start() : match.end()]
    if value.lower() == value or value.upper() == value:
        return value
    if len(set(value)) < 12 or sum(len(run) for run in _LOWER_RUN.get().findall(value)) >= 28:
        return value
    return _mark("aws_secret_access_key")


def _replace_unless_hex(text: str, match: re.Match[str]) -> str:
    value = text[match.start() : match.end()]
    tail = value.split("-", 1)[1]
    if all(ch in "0123456789abcdef" for ch in tail):
        return value
    return _mark("mailgun_key")


_WORD = LazyRegex(r"'[^'\n]*'|\"[^\"\n]*\"|[^\s'\"]+")
_HTPASSWD_VALUED = frozenset({"-C", "-r"})  # options that take a value (bcrypt cost, rounds)


def _replace_htpasswd(text: str, match: re.Match[str]) -> str:
    """``htpasswd -b`` takes the password as an argument: FILE USER PASSWORD, or USER PASSWORD with -n.

    The options are read the way htpasswd reads them (clustered, ``-C 10`` taking a value); without -b
    there is no password on the command line and the text is kept.
    """
    start = match.start("rest")
    words = list(_WORD.get().finditer(text, start, match.end()))
    flags, skip = "", False
    positional: list[re.Match[str]] = []
    for word in words:
        value = word.group()
        if skip:
            skip = False
        elif not positional and value.startswith("-") and len(value) > 1:
            flags += value[1:]
            skip = value in _HTPASSWD_VALUED
        else:
            positional.append(word)
    wanted = 2 if "n" in flags else 3
    if "b" not in flags or len(positional) < wanted:
        return text[match.start() : match.end()]
    secret = positional[wanted - 1]
    value = secret.group()
    quote = value[0] if len(value) > 1 and value[0] in ("'", '"') and value[-1] == value[0] else ""
    if not _is_literal_secret(value[1:-1] if quote else value):
        return text[match.start() : match.end()]
    return f"{text[match.start() : secret.start()]}{quote}{_mark('password')}{quote}{text[secret.end() : match.end()]}"


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
    _Rule(
        "gitlab_token",
        r"gl(?:pat|dt|rt|ptt|soat|cbt|oas|ft|imt|agent|ffct)-(?<!\wgl....-)(?<!\wgl.....-)(?<!\wgl...-)"
        r"(?<!\wgl..-)[A-Za-z0-9_-]{20,}",
        ("glpat-", "gldt-", "glrt-", "glptt-", "glsoat-", "glcbt-", "gloas-", "glft-", "glimt-", "glagent-",
         "glffct-"),
    ),
    _Rule("gitlab_runner_token", r"GR1348941(?<![\w-]GR1348941)[A-Za-z0-9_-]{20,}", ("gr1348941",), long=True),
    # -- the shapes issue 23 found stored in clear, then more from gitleaks' and detect-secrets' lists
    _Rule("google_oauth_token", r"ya29\.(?<![\w.-]ya29\.)[A-Za-z0-9_-]{20,}", ("ya29.",), long=True),
    _Rule("google_refresh_token", r"1//0(?<![\w/]1//0)[A-Za-z0-9_-]{30,}", ("1//0",), long=True),
    _Rule("google_client_secret", r"GOCSPX-(?<![\w-]GOCSPX-)[A-Za-z0-9_-]{20,}", ("gocspx-",), long=True),
    _Rule(  # an Azure (or any) shared access signature: the value of sig= in a URL's query
        "azure_sas",
        r"(?P<lead>[?&;]sig=)(?P<value>[A-Za-z0-9%+/=_-]{16,})",
        ("sig=",),
        replace=_replace_value("azure_sas"),
    ),
    _Rule("sendgrid_key", r"SG\.(?<![\w.-]SG\.)[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}", ("sg.",), long=True),
    _Rule("digitalocean_token", r"do[opr]_v1_(?<!\wdo._v1_)[a-f0-9]{32,}", ("_v1_",), long=True),
    _Rule("shopify_token", r"shp(?:at|ca|pa|ss)_(?<!\wshp.._)[a-fA-F0-9]{32}",
          ("shpat_", "shpca_", "shppa_", "shpss_"),
        long=True,
    ),
    _Rule("vault_token", r"hv[sbr]\.(?<![\w.-]hv.\.)[A-Za-z0-9_-]{24,}", ("hvs.", "hvb.", "hvr."), long=True),
    _Rule(  # 123456789:AA... (the bot's id, a colon, 35 characters that start with AA)
        "telegram_bot_token",
        r"(?:(?<=bot)|(?<![\w:]))[0-9]{8,10}:AA[A-Za-z0-9_-]{30,}",  # bot<token> in the API's URLs
        (":aa",),
        long=True,
    ),
    _Rule(  # a GCP service-account key file's "private_key_id" (its "private_key" is a PEM block, above)
        "gcp_private_key_id",
        r"(?P<lead>\"private_key_id\"[ \t]*:[ \t]*)(?P<value>\"[a-f0-9]{16,}\")",
        ("private_key_id",),
        replace=_replace_value("gcp_private_key_id"),
        long=True,
    ),
    _Rule("age_secret_key", r"AGE-SECRET-KEY-1[0-9A-Z]{50,}", ("age-secret-key-1",), long=True),
    _Rule("slack_app_token", r"xapp-(?<![\w-]xapp-)[0-9]-[A-Za-z0-9-]{10,}", ("xapp-",), long=True),
    _Rule("stripe_webhook_secret", r"whsec_(?<!\wwhsec_)[A-Za-z0-9]{24,}", ("whsec_",), long=True),
    _Rule("twilio_api_key", r"SK(?<![\w-]SK)[0-9a-f]{32}(?![A-Za-z0-9])", ("sk",), long=True),
    _Rule(  # key- and 32 letters and digits; a hex digest after key- (a cache key) is not one
        "mailgun_key",
        r"key-(?<![\w-]key-)[0-9a-z]{32}(?![A-Za-z0-9])",
        ("key-",),
        replace=_replace_unless_hex,
        long=True,
    ),
    _Rule("heroku_key", r"HRKU-(?<![\w-]HRKU-)[A-Za-z0-9_-]{40,}", ("hrku-",), long=True),
    _Rule("huggingface_org_token", r"api_org_(?<!\wapi_org_)[A-Za-z0-9]{30,}", ("api_org_",), long=True),
    _Rule("databricks_token", r"dapi(?<![\w-]dapi)[a-f0-9]{32}(?:-[0-9])?(?![A-Za-z0-9])", ("dapi",), long=True),
    _Rule("linear_key", r"lin_api_(?<!\wlin_api_)[A-Za-z0-9]{40}", ("lin_api_",), long=True),
    _Rule("doppler_token", r"dp\.(?<![\w.-]dp\.)(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9]{40,}", ("dp.",), long=True),
    _Rule("pulumi_token", r"pul-(?<![\w-]pul-)[a-f0-9]{40}", ("pul-",), long=True),
    _Rule("postman_key", r"PMAK-(?<![\w-]PMAK-)[a-f0-9]{24}-[a-f0-9]{34}", ("pmak-",), long=True),
    _Rule("grafana_token", r"gl(?:sa|c)_(?<!\wglsa_)(?<!\wglc_)[A-Za-z0-9_=+/-]{32,}", ("glsa_", "glc_"), long=True),
    _Rule("newrelic_key", r"NR(?:AK|II|JS)-(?<![\w-]NR..-)[A-Za-z0-9]{20,}", ("nrak-", "nrii-", "nrjs-"), long=True),
    _Rule("sentry_token", r"sntry[su]_(?<!\wsntry._)[A-Za-z0-9+/=_-]{40,}", ("sntrys_", "sntryu_"), long=True),
    _Rule("atlassian_token", r"ATATT3(?<![\w-]ATATT3)[A-Za-z0-9_=-]{50,}", ("atatt3",), long=True),
    _Rule("square_token", r"sq0(?:atp|csp)-(?<![\w-]sq0...-)[A-Za-z0-9_-]{22,}", ("sq0atp-", "sq0csp-"), long=True),
    _Rule("docker_hub_token", r"dckr_pat_(?<!\wdckr_pat_)[A-Za-z0-9_-]{20,}", ("dckr_pat_",), long=True),
    _Rule("rubygems_key", r"rubygems_(?<!\wrubygems_)[a-f0-9]{48}", ("rubygems_",), long=True),
    _Rule("planetscale_token", r"pscale_(?:tkn|pw|oauth)_(?<!\wpscale_...)[A-Za-z0-9_.=-]{32,}", ("pscale_",),
          long=True),
    _Rule("sourcegraph_token", r"sgp_(?<!\wsgp_)[a-fA-F0-9_]{40,}", ("sgp_",), long=True),
    _Rule("tailscale_key", r"tskey-(?<![\w-]tskey-)[a-z]+-[A-Za-z0-9]{10,}-[A-Za-z0-9]{20,}", ("tskey-",), long=True),
    _Rule("terraform_token", r"[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=-]{60,}", (".atlasv1.",), long=True),
    _Rule("flyio_token", r"(?:fm[12]_|fo1_)(?<!\wfm1_)(?<!\wfm2_)(?<!\wfo1_)[A-Za-z0-9+/=_-]{40,}",
          ("fm1_", "fm2_", "fo1_"),
        long=True,
    ),
    _Rule("replicate_token", r"r8_(?<!\wr8_)[A-Za-z0-9]{37}(?![A-Za-z0-9])", ("r8_",), long=True),
    _Rule("groq_key", r"gsk_(?<!\wgsk_)[A-Za-z0-9]{48,}", ("gsk_",), long=True),
    _Rule("perplexity_key", r"pplx-(?<![\w-]pplx-)[A-Za-z0-9]{40,}", ("pplx-",), long=True),
    _Rule("xai_key", r"xai-(?<![\w-]xai-)[A-Za-z0-9]{60,}", ("xai-",), long=True),
    _Rule("notion_token", r"(?:ntn_|secret_)(?<!\wntn_)(?<!\wsecret_)[A-Za-z0-9]{43,}", ("ntn_", "secret_"), long=True),
    _Rule("airtable_token", r"pat(?<!\wpat)[A-Za-z0-9]{14}\.[a-f0-9]{64}", ("pat",), long=True),
    _Rule("mailchimp_key", r"(?<![A-Za-z0-9])[0-9a-f]{32}-us[0-9]{1,2}(?![A-Za-z0-9])", ("-us",), long=True),
    _Rule("alibaba_key_id", r"LTAI(?<![\w-]LTAI)[A-Za-z0-9]{20}(?![A-Za-z0-9])", ("ltai",), long=True),
    _Rule("azure_ad_client_secret", r"(?<![A-Za-z0-9_~.-])[A-Za-z0-9_~.]{3}[0-9]Q~[A-Za-z0-9_~.-]{31,34}", ("q~",),
          long=True),
    _Rule("artifactory_key", r"AKCp(?<![\w-]AKCp)[A-Za-z0-9]{69}", ("akcp",), long=True),
    _Rule("dynatrace_token", r"dt0c01\.(?<![\w.-]dt0c01\.)[A-Z0-9]{24}\.[A-Z0-9]{64}", ("dt0c01.",), long=True),
    _Rule("discord_webhook", r"https://(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/[0-9]+/[A-Za-z0-9_-]{20,}",
          ("discord",),
        long=True,
    ),
    _Rule("teams_webhook", r"https://[A-Za-z0-9-]+\.webhook\.office\.com/webhookb2/[A-Za-z0-9@/_-]{20,}",
          (".webhook.office.com",),
        long=True,
    ),
    # No literal to look for: runs on every text (linear: the look-behind rejects every position inside a run).
    _Rule(
        "aws_secret_access_key",
        r"(?<![A-Za-z0-9/+])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])",
        (),
        replace=_replace_bare_aws_secret,
    ),
    # Commands that take a password in their own way. Each starts at the program's name; the option must
    # be a word of its own (after a blank) within the same command (no newline, ';', '&', '|').
    _Rule(
        "mysql_password",
        r"(?P<lead>(?:mysql|mariadb)[\w-]*[ \t][^\n;&|]{0,500}?(?<=[ \t])-p)"
        r"(?P<value>'[^'\n]*'|\"[^\"\n]*\"|[^\s'\";&|]+)",
        ("mysql", "mariadb"),
        replace=_replace_value("password"),
    ),
    _Rule(  # sshpass -p PW / -pPW, among sshpass's own options (a -p after the program is the program's)
        "sshpass_password",
        r"(?P<lead>sshpass(?<![\w-]sshpass)(?:[ \t]+(?:-[fdP][ \t]*[^\s]+|-[ev]\w*))*[ \t]+-p[ \t]*)"
        r"(?P<value>'[^'\n]*'|\"[^\"\n]*\"|[^\s'\";&|]+)",
        ("sshpass",),
        replace=_replace_value("password"),
    ),
    _Rule(  # htpasswd -b[...] FILE USER PASSWORD (or -nb USER PASSWORD): the last word is the password
        "htpasswd_password",
        r"htpasswd(?<![\w-]htpasswd)(?P<rest>[ \t][^\n;&|]{0,500})",
        ("htpasswd",),
        replace=_replace_htpasswd,
    ),
    _Rule(
        "registry_password",
        r"(?P<lead>(?:docker|podman|buildah|nerdctl|skopeo)[ \t]+login[ \t][^\n;&|]{0,500}?(?<=[ \t])-p(?:[ \t]+|=)?)"
        r"(?P<value>'[^'\n]*'|\"[^\"\n]*\"|[^\s'\";&|]+)",
        ("login",),
        replace=_replace_value("password"),
    ),
    _Rule(
        "curl_user",
        r"(?P<lead>curl[ \t][^\n;&|]{0,500}?(?<=[ \t])(?:-u|--user|--proxy-user|-U)(?:[ \t]+|=)?"
        r"(?:(?P<sq>')|(?P<dq>\"))?[^\s:'\"]{0,256}:)(?P<value>(?(sq)[^'\n]+|(?(dq)[^\"\n]+|[^\s'\"]+)))",
        ("curl",),
        replace=_replace_value("password"),
    ),
    _Rule(
        "aws_configure",
        r"(?P<lead>aws[ \t]+configure[ \t]+set[ \t]+(?:--profile[ \t=]+[^\s]+[ \t]+)?(?P<key>[\w.-]+)[ \t]+)"
        r"(?P<value>'[^'\n]*'|\"[^\"\n]*\"|[^\s'\"]+)",
        ("configure",),
        replace=_replace_configure_set,
    ),
    _Rule(  # ~/.netrc: machine HOST [login USER] [account A] password PW
        "netrc_password",
        r"(?P<lead>(?:machine[ \t\r\n]+[^\s]+|default)(?:[ \t\r\n]+(?:login|account|port)[ \t\r\n]+[^\s]+){0,3}"
        r"[ \t\r\n]+password[ \t\r\n]+)(?P<value>[^\s]+)",
        ("password",),
        replace=_replace_value("password", prose_check=True),
        folded=True,
    ),
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
    _Rule(  # the password line of a .netrc on its own: the line an error message or a grep shows
        "netrc_line",
        r"(?m)^(?P<lead>[ \t]*password[ \t]+)(?P<value>[^\s]+)[ \t]*$",
        ("password",),
        replace=_replace_netrc_line,
        folded=True,
    ),
    _Rule(
        "env_line",
        r"(?m)^(?P<lead>[ \t]*(?:export[ \t]+)?(?P<key>[A-Za-z_][\w.-]{0,63})=)(?P<value>[^\s'\"][^\s]*)",
        ("pass", "pwd", "secret", "token", "key", "auth"),
        replace=_replace_env_line,
    ),
    _Rule(
        "assignment",
        rf"(?P<word>{_KEY_WORDS})(?P<sep>[\"']?[ \t]*[:=][ \t]*)"
        r"(?:\"(?P<dq>[^\"\n]*)\"|'(?P<sq>[^'\n]*)'|(?P<bare>[^\s\"',;&|(){}\[\]<>`]+))",
        ("pass", "pwd", "secret", "token", "key", "auth"),
        replace=_replace_assignment,
        folded=True,
    ),
)


def redact(text: str) -> str:
    """``text`` with every secret replaced by ``[REDACTED:<kind>]``."""
    if not text:
        return text
    lowered = text.lower()
    has_long_run = _LONG_RUN.get().search(text) is not None
    for rule in _RULES:
        if rule.long and not has_long_run:
            continue
        if not rule.needles or any(needle in lowered for needle in rule.needles):
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
            if isinstance(key, str) and _is_secret_item(key, item):
                out[key] = _mark(_kind_of_key(key))
            else:
                out[key] = redact_obj(item)
        return out
    if isinstance(value, list):
        return [redact_obj(item) for item in value]
    if isinstance(value, tuple):
        return tuple(redact_obj(item) for item in value)
    return value


def _is_secret_item(key: str, item: Any) -> bool:
    strength = _secret_key_class(key)
    if strength == "weak":  # a generic key (sort_key, auth): only a generated-looking value is a secret
        return isinstance(item, str) and _looks_generated(item.strip()) and not _is_placeholder(item)
    return strength == "strong" and _is_secret_scalar(item)


def _is_secret_scalar(item: Any) -> bool:
    # Under a sensitive key everything but a placeholder or a reference is a secret: a config value
    # "password123" is a password even though it contains the word.
    if isinstance(item, str):
        return not _is_placeholder(item)
    return isinstance(item, (int, float)) and not isinstance(item, bool)
