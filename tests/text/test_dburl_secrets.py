"""No part of a database URL that can hold a secret is saved or printed (issue 23, docs/postgres.md).

A password in the userinfo, ``?password=``, ``?sslpassword=``, a secret quoted in ``options``; a password
holding an unescaped ``@`` or ``/`` or a bad ``%`` escape (libpq quotes the token it chokes on, or takes
the tail for a host name); an IPv6 host left open (``[::1/db``). Each is checked through the library
(:mod:`loki.storage.postgres.urls`, :mod:`loki.storage.postgres.connect`) and through the CLI: exit 1,
one line, nothing written, no secret in any output or file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loki.errors import ExitCode
from loki.storage.postgres import connect, urls
from loki.storage.postgres.connect import DatabaseError, check_url, unreachable, without_password
from tests.helpers import cli, snapshot_bytes

SECRET = "Zq9Sekr1t"  # every test's secret: no message or file may hold it
FAST_RETRY = {"LOKI_DB_RETRY_SECONDS": "0.2"}

# (what it is, the URL, what may be saved and printed of it)
CLEAN = [
    ("userinfo password", f"postgresql://ada:{SECRET}@db.internal:5432/app", "postgresql://ada@db.internal:5432/app"),
    ("sslpassword", f"postgresql://ada@db.internal/app?sslmode=verify-full&sslpassword={SECRET}",
     "postgresql://ada@db.internal/app?sslmode=verify-full"),
    ("password parameter", f"postgresql://db.internal/app?password={SECRET}&connect_timeout=5",
     "postgresql://db.internal/app?connect_timeout=5"),
    ("encoded parameter name", f"postgresql://db.internal/app?ssl%70assword={SECRET}&application_name=w1",
     "postgresql://db.internal/app?application_name=w1"),
    ("secret in options", f"postgresql://db.internal/app?options=-c%20app.api_token%3D{SECRET}&sslmode=require",
     "postgresql://db.internal/app?sslmode=require"),
    ("'?' and '#' in the password (libpq's userinfo runs to the first '@')",
     f"postgresql://ada:p?x#{SECRET}@db.internal/app", "postgresql://ada@db.internal/app"),
    ("a fragment", f"postgresql://ada@db.internal/app#{SECRET}", "postgresql://ada@db.internal/app"),
    ("several hosts", f"postgresql://ada:{SECRET}@h1:5432,h2:5433/app?target_session_attrs=read-write",
     "postgresql://ada@h1:5432,h2:5433/app?target_session_attrs=read-write"),
    ("IPv6 host", f"postgresql://ada:{SECRET}@[::1]:5432/app", "postgresql://ada@[::1]:5432/app"),
    ("schema options kept", "postgresql://ada@h/app?options=-csearch_path%3Dt_1", "postgresql://ada@h/app?options=-csearch_path%3Dt_1"),
]


@pytest.mark.parametrize(("what", "url", "saved"), CLEAN, ids=[case[0] for case in CLEAN])
def test_the_url_as_saved_and_printed_holds_no_secret(what: str, url: str, saved: str) -> None:
    assert without_password(url) == saved
    assert SECRET not in without_password(url)
    assert check_url(url, "--database") == url  # a valid URL: refused for nothing


# (what it is, the URL, the words of the refusal)
MALFORMED = [
    ("bad % escape in the password", f"postgresql://ada:ab%zz{SECRET}@127.0.0.1:9/app", "'%' not followed by two hex"),
    ("unescaped @ in the password", f"postgresql://ada:p@ss{SECRET}@127.0.0.1:9/app", "unescaped '@'"),
    ("unescaped / in the password", f"postgresql://ada:pa/ss{SECRET}@127.0.0.1:9/app", "written %2F"),
    ("IPv6 host not closed", f"postgresql://ada:{SECRET}@[::1/app", "not closed with ']'"),
    ("IPv6 host not closed, no userinfo", "postgresql://[::1/db", "not closed with ']'"),
    ("port not a number", f"postgresql://ada:{SECRET}@host:54x32/app", "a port that is not a number"),
    ("bad % escape in sslpassword", f"postgresql://host/app?sslpassword=%zz{SECRET}", "'%' not followed by two hex"),
]


@pytest.mark.parametrize(("what", "url", "words"), MALFORMED, ids=[case[0] for case in MALFORMED])
def test_a_malformed_url_is_refused_without_quoting_its_secret(what: str, url: str, words: str) -> None:
    with pytest.raises(DatabaseError) as caught:
        check_url(url, "--database")
    message = caught.value.message
    assert words in message and message.startswith("--database: ")
    assert caught.value.exit_code == ExitCode.ERROR and "\n" not in message
    assert SECRET not in message and SECRET not in json.dumps(caught.value.details)
    assert SECRET not in without_password(url)


def test_the_drivers_message_is_scrubbed_of_the_urls_secrets() -> None:
    # psycopg took the tail of a password holding an '@' for a host, and libpq quotes a bad escape
    url = f"postgresql://ada:p@ss{SECRET}@127.0.0.1:5432/app?sslpassword=S5l{SECRET}"
    exc = RuntimeError(f"failed to resolve host 'ss{SECRET}@127.0.0.1': Name or service not known\nDETAIL: x")
    error = unreachable(url, exc)
    assert SECRET not in error.message and SECRET not in json.dumps(error.details)
    assert "failed to resolve host" in error.message
    quoted = unreachable(f"postgresql://ada:ab%zz{SECRET}@h/app",
                         ValueError(f'invalid percent-encoded token: "ab%zz{SECRET}"'))
    assert SECRET not in quoted.message and "invalid percent-encoded token" in quoted.message


def test_scrub_leaves_the_user_and_host_named() -> None:
    url = f"postgresql://postgres:{SECRET}@postgres.internal/app"
    message = 'password authentication failed for user "postgres" at postgres.internal'
    assert urls.scrub(message, url) == message


def test_shown_never_raises_on_any_text() -> None:
    for text in ["", "://", "postgresql://", "postgresql://@", "postgresql://:@/", "postgresql://[", "]", "%",
                 "postgresql://a:b@[::1/x?y=%", "postgresql://h?&&=&password", "\x00\udcff"]:
        assert isinstance(without_password(text), str)
        assert connect.is_database_url(text) is False or isinstance(urls.problem(text), (str, type(None)))


# -- through the CLI: init --database, LOKI_DATABASE_URL, migrate --to, db upgrade ------------------------


@pytest.mark.parametrize(("what", "url", "words"), MALFORMED, ids=[case[0] for case in MALFORMED])
def test_init_refuses_a_malformed_url_in_one_line_without_its_secret(tmp_path: Path, what: str, url: str,
                                                                     words: str) -> None:
    result = cli(["init", "--path", str(tmp_path), "--database", url], env=FAST_RETRY)
    assert result.code == 1, (result.stdout, result.stderr)
    assert words in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert SECRET not in result.stdout + result.stderr
    assert not (tmp_path / ".loki").exists()


@pytest.mark.parametrize(("what", "url", "words"), MALFORMED, ids=[case[0] for case in MALFORMED])
def test_a_malformed_url_from_the_environment_is_refused_without_its_secret(root: Path, what: str, url: str,
                                                                           words: str) -> None:
    config = root / "config" / "loki.json"
    data = json.loads(config.read_text())
    data["storage"] = {"backend": "postgresql", "database": "postgresql://127.0.0.1:9/app"}
    config.write_text(json.dumps(data))
    for command in (["status"], ["status", "--json"], ["doctor"], ["queue", "list"]):
        result = cli(command, root=root, env={**FAST_RETRY, "LOKI_DATABASE_URL": url})
        assert result.code == 1, (command, result.stdout, result.stderr)
        assert words in result.stdout + result.stderr
        assert SECRET not in result.stdout + result.stderr


def test_migrate_to_a_malformed_url_names_no_secret(root: Path) -> None:
    before = snapshot_bytes(root)
    result = cli(["migrate", "--to", f"postgresql://ada:p@ss{SECRET}@127.0.0.1:9/app"], root=root, env=FAST_RETRY)
    assert result.code == 1 and "unescaped '@'" in result.stderr
    assert SECRET not in result.stdout + result.stderr
    assert snapshot_bytes(root) == before


def test_db_upgrade_with_a_bad_escape_names_no_secret() -> None:
    result = cli(["db", "upgrade", "--database", f"postgresql://ada:%g{SECRET}@127.0.0.1:9/app"], env=FAST_RETRY)
    assert result.code == 1 and SECRET not in result.stdout + result.stderr


def test_an_unreachable_database_names_it_without_secrets(tmp_path: Path) -> None:
    url = f"postgresql://ada:{SECRET}@127.0.0.1:9/app?sslpassword={SECRET}&sslmode=disable"
    result = cli(["init", "--path", str(tmp_path), "--database", url], env=FAST_RETRY)
    assert result.code == 1
    assert "cannot connect to postgresql://ada@127.0.0.1:9/app?sslmode=disable" in result.stderr
    assert SECRET not in result.stdout + result.stderr


@pytest.mark.slow  # a real server: init, status, doctor
def test_sslpassword_is_neither_saved_nor_printed(tmp_path: Path) -> None:
    from tests import pgserver

    url = pgserver.fresh_schema_url(migrate=False)
    secret_url = f"{url}&sslmode=disable&sslpassword={SECRET}&password={SECRET}"
    result = cli(["init", "--path", str(tmp_path), "--database", secret_url], env=FAST_RETRY)
    assert result.code == 0, result.stderr
    assert "was not saved" in result.stdout and SECRET not in result.stdout + result.stderr
    assert [name for name, data in snapshot_bytes(tmp_path / ".loki").items() if SECRET.encode() in data] == []
    saved = json.loads((tmp_path / ".loki" / "config" / "loki.json").read_text())["storage"]["database"]
    assert saved == f"{url}&sslmode=disable"
    for command in (["status"], ["status", "--json"], ["doctor"], ["validate"]):
        shown = cli(command, root=tmp_path / ".loki", env={"LOKI_DATABASE_URL": secret_url})
        assert shown.code == 0, (command, shown.stderr)
        assert SECRET not in shown.stdout + shown.stderr, command
