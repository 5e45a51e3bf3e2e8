"""No secret reaches the disk, whichever way loki writes free text (docs/storage.md, "Secrets").

Each test feeds the shapes of tests/text/test_redact.py (the 12 the review found stored in clear, plus the
older ones) through one kind of write place, then reads every byte under ``.loki/`` (the SQLite index
included) and looks for each secret value. A hypothesis test does the same with generated secrets of
these shapes embedded in realistic surrounding text.
"""

from __future__ import annotations

import base64
import io
import json
import os
import random
import string
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loki.hooks.boundary import run as run_hook
from loki.storage import layout
from loki.storage.tree import init_tree
from loki.text.redact import redact
from tests.helpers import cli, loki_proc, snapshot_bytes
from tests.hooks.test_hooks import hook, payload
from tests.text.test_redact import AWS_SECRET, GHP, SHAPES

SECRETS = [secret for _, secret, _ in SHAPES.values()] + [GHP, "s3cr3t-Pa55word"]
# All the shapes in one text, each on its own line(s), as a terminal would show `cat .env; ...` and errors.
BLOB = "\n".join(text for text, _, _ in SHAPES.values()) + f"\ngit push https://ada:s3cr3t-Pa55word@x.io {GHP}"


def leaked(root: Path, secrets: list[str], *, theirs: tuple[str, ...] = ()) -> list[str]:
    """The secrets found in any file under ``root`` but ``theirs`` (what an agent wrote there itself)."""
    files = snapshot_bytes(root)
    everything = b"\n".join(data for name, data in files.items() if name not in theirs)
    assert b"REDACTED" in everything  # the test did write what it meant to
    return [secret for secret in secrets if secret.encode() in everything]


def test_the_blob_holds_every_shape_and_redacts_clean() -> None:
    assert all(secret in BLOB for secret in SECRETS)
    assert not [secret for secret in SECRETS if secret in redact(BLOB)]


# -- hooks: strike state, error memory (log, index, hints), the strike escalation, its signal ----------


def test_hook_failures_leave_no_secret_under_loki(project: Path) -> None:
    root = project / ".loki"
    command = "set -e; " + "; ".join(text for text, _, _ in SHAPES.values() if "\n" not in text)
    for session in ("a", "b", "c", "d", "e"):  # through the warn tier to the stop tier: escalation + signal
        data = payload("post_tool_use_failure_bash", project, tool_input={"command": command, "description": "x"},
                       error=f"Exit code 1\n{BLOB}", session_id=session)
        result = hook("post-tool-use-failure", data, cwd=project)
        assert result.code == 0, result.stderr
    assert os.listdir(root / layout.ESCALATIONS_DIR)
    assert cli(["watch", "--once", "--no-tui"], root=root).code == 0  # the signal -> logs/signals.jsonl
    assert (root / "logs" / "signals.jsonl").stat().st_size > 0
    ok = payload("post_tool_use_bash", project, tool_input={"command": command + " --retry", "description": "x"},
                 tool_response={"stdout": "ok", "stderr": "", "interrupted": False, "isImage": False})
    assert hook("post-tool-use", ok, cwd=project).code == 0
    assert cli(["errors", "search", "SignatureDoesNotMatch", "--json"], root=root).code == 0  # errors.db
    assert (root / layout.MEMORY_INDEX).exists()
    assert leaked(root, SECRETS) == []


# -- the queue, dead-letter, escalations, breakers, signals and the watcher -----------------------------


def _claim(root: Path, task_id: str) -> None:
    claimed = cli(["queue", "claim", "--agent", "dev", "--json"], root=root)
    assert claimed.code == 0 and claimed.json()["task"]["id"] == task_id, claimed.stdout + claimed.stderr


def test_queue_and_escalation_errors_leave_no_secret(root: Path) -> None:
    for task_id in ("t-fail", "t-esc"):
        assert cli(["queue", "add", f"task {task_id}", "--id", task_id, "--max-attempts", "1"], root=root).code == 0
    _claim(root, "t-fail")
    # attempts' error_message, last_error, the dead-letter entry and its error_summary
    assert cli(["queue", "fail", "t-fail", "--agent", "dev", "--error", BLOB], root=root).code == 0
    assert cli(["deadletter", "review"], root=root).code == 0
    # loki escalate: the file (template render), the blocked reason, the note, HUMAN_REVIEW_NEEDED
    escalated = cli(["escalate", "t-esc", "--trigger", "mysql -u root -pS3cr3tPw! fails", "--analysis", BLOB,
                     "--option", "rotate " + AWS_SECRET], root=root)
    assert escalated.code == 0, escalated.stderr
    # a breaker's last_error and its recovery log
    assert cli(["breaker", "failure", "api/x", "--error", BLOB], root=root).code == 0
    # the escalation's resolution (a human's note, through HUMAN_APPROVED)
    assert cli(["signal", "emit", "HUMAN_APPROVED", "--task", "t-esc", "decision=approve",
                "note=use docker login -u ada -p Dck3rPa55 registry.example.com"], root=root).code == 0
    assert cli(["watch", "--once", "--no-tui"], root=root).code == 0
    assert leaked(root, SECRETS) == []


def test_a_lock_file_records_no_secret_from_the_command_line(root: Path) -> None:
    # A lock file keeps its holder record (pid, command, host, since) after the holder is gone:
    # a secret on the command line (--error, `loki run -- mysql -pPW`) must not stay in it.
    assert cli(["queue", "add", "task t1", "--id", "t1"], root=root).code == 0
    _claim(root, "t1")
    failed = loki_proc(["queue", "fail", "t1", "--agent", "dev", "--error", BLOB], root=root)
    assert failed.code == 0, failed.stderr
    record = json.loads((root / layout.QUEUE_LOCK).read_text())
    assert "... queue fail ..." in record["holder"]["command"]  # still says what held it
    assert leaked(root, SECRETS) == []


def test_signals_emitted_and_dropped_by_hand_leave_no_secret(root: Path) -> None:
    assert cli(["queue", "add", "task t1", "--id", "t1"], root=root).code == 0
    _claim(root, "t1")
    # emitted through loki: the signal file and the drift log
    assert cli(["signal", "emit", "FEATURE_READY", "--subject", "auth", f"summary={BLOB}"], root=root).code == 0
    assert cli(["signal", "emit", "DRIFT_DETECTED", "--task", "t1", "--severity", "low",
                f"detected_drift={BLOB}"], root=root).code == 0
    # dropped by hand: the watcher's effects (a failed attempt, Markdown, the friction map) and its log
    signals_dir = root / layout.SIGNALS_DIR
    stamp = "2026-01-25T10:00:00Z"
    (signals_dir / "TESTS_FAILED_auth").write_text(json.dumps({"timestamp": stamp, "task_id": "t1", "error": BLOB}))
    (signals_dir / "INSTITUTIONAL_KNOWLEDGE_FOUND").write_text(json.dumps(
        {"timestamp": stamp, "knowledge": BLOB, "location": "settings.py"}))
    (signals_dir / "FRICTION_DETECTED").write_text(json.dumps(
        {"timestamp": stamp, "friction_id": "f1", "location": "deploy.sh", "behavior": BLOB}))
    with open(signals_dir / "DRIFT_DETECTED", "a", encoding="utf-8") as log:
        log.write(json.dumps({"timestamp": stamp, "task_id": "t1", "severity": "low", "detected_drift": BLOB}) + "\n")
    watched = cli(["watch", "--once", "--json"], root=root)
    assert watched.code == 0, watched.stderr
    task = cli(["queue", "show", "t1", "--json"], root=root).json()["task"]
    assert task["attempts"] and "[REDACTED:" in task["attempts"][0]["error_message"]
    assert "[REDACTED:" in (root / layout.KNOWLEDGE).read_text()
    # The drift log keeps the line the agent appended itself (loki never rewrites what others wrote, see
    # docs/storage.md); the line loki appended, and everything the watcher derived from both, is clean.
    emitted = (signals_dir / "DRIFT_DETECTED").read_text().splitlines()[0]
    assert "[REDACTED:" in emitted and not [s for s in SECRETS if s in emitted]
    assert leaked(root, SECRETS, theirs=("signals/DRIFT_DETECTED",)) == []


# -- fuzz: generated secrets of every shape, in realistic text, through the hook ---------------------------

B64 = string.ascii_letters + string.digits + "+/"
ALNUM = string.ascii_letters + string.digits


def _secret(rng: random.Random, shape: str) -> tuple[str, str]:
    """(text around it, secret) for one shape, with a value drawn like the real thing is generated."""
    def pick(alphabet: str, n: int) -> str:
        return "".join(rng.choice(alphabet) for _ in range(n))

    password = pick(ALNUM, 6) + rng.choice("!@#%^*") + pick(ALNUM, rng.randint(4, 12))
    if shape == "aws":
        value = pick(B64, 40)
        return rng.choice([f"Error: invalid secret {value} for profile dev", f"creds: ('{value}',)",
                           f"aws configure set aws_secret_access_key {value}"]), value
    if shape == "env":
        key = rng.choice(["SECRET_KEY", "DB_PASS", "ENCRYPTION_KEY", "DB_PASSWORD", "JWT_SECRET", "API_TOKEN",
                          "MYSQL_PWD", "SIGNING_KEY", "AUTH_TOKEN", "STRIPE_SECRET_KEY"])
        return f"$ cat .env\nDEBUG=true\n{key}={password}\nPORT=8000", password
    if shape == "django":
        value = "django-insecure-" + pick(ALNUM + "!@#%^&*(-_=+)", 40)
        return f"# settings.py\nSECRET_KEY = '{value}'\nDEBUG = True", value
    if shape == "mysql":
        return f"mysql -u {pick(string.ascii_lowercase, 5)} -p{password} -h db app", password
    if shape == "curl":
        return f"curl -sS -u {pick(string.ascii_lowercase, 5)}:{password} https://api.example.com/v1", password
    if shape == "docker":
        return f"docker login -u ada -p {password} registry.example.com", password
    if shape == "netrc":
        return f"machine api.example.com\n  login ada\n  password {password}\n", password
    if shape == "dockerauth":
        value = base64.b64encode(f"ada:{password}".encode()).decode()
        return json.dumps({"auths": {"registry.example.com": {"auth": value}}}), value
    if shape == "azure":
        value = base64.b64encode(bytes(rng.randrange(256) for _ in range(64))).decode()
        return (f"DefaultEndpointsProtocol=https;AccountName=acct{pick(string.digits, 3)};AccountKey={value};"
                "EndpointSuffix=core.windows.net"), value
    return _secret_23(rng, shape, pick, password)


def _secret_23(rng: random.Random, shape: str, pick: Any, password: str) -> tuple[str, str]:
    """The shapes issue 23 found stored in clear, drawn like the real ones."""
    hexdigits = "0123456789abcdef"
    if shape == "ya29":
        value = "ya29." + pick(ALNUM + "_-", rng.randint(60, 160))
        return f"$ gcloud auth print-access-token\n{value}", value
    if shape == "sas":
        value = pick(ALNUM, 30) + "%2B" + pick(ALNUM, 10) + "%3D"
        return f"GET https://acct.blob.core.windows.net/c/f?sv=2022-11-02&sp=r&sig={value} 403", value
    if shape == "sendgrid":
        value = f"SG.{pick(ALNUM + '_-', 22)}.{pick(ALNUM + '_-', 43)}"
        return f"sendgrid.SendGridAPIClient('{value}')", value
    if shape == "vault":
        value = "hvs." + pick(ALNUM + "_-", rng.randint(24, 95))
        return f"$ vault login {value}\nSuccess! You are now authenticated.", value
    if shape == "telegram":
        value = f"{rng.randint(10**8, 10**10 - 1)}:AA{pick(ALNUM + '_-', 33)}"
        return f"requests.get('https://api.telegram.org/bot{value}/sendMessage')", value
    if shape == "gcp":
        value = pick(hexdigits, 40)
        return json.dumps({"type": "service_account", "project_id": "p", "private_key_id": value}), value
    if shape == "age":
        value = "AGE-SECRET-KEY-1" + pick(string.ascii_uppercase + string.digits, 58)
        return f"# public key: age1{pick(string.ascii_lowercase, 30)}\n{value}", value
    if shape == "sshpass":
        return f"sshpass -p '{password}' ssh -o StrictHostKeyChecking=no deploy@10.0.0.{rng.randint(1, 254)}", password
    if shape == "htpasswd":
        return f"htpasswd -b{rng.choice(['', 'B', 'c'])} /etc/nginx/.htpasswd admin {password}", password
    assert shape in ("digitalocean", "shopify")
    value = ("dop_v1_" + pick(hexdigits, 64)) if shape == "digitalocean" else ("shpat_" + pick(hexdigits, 32))
    return f"export TOKEN_VALUE={value}", value


SHAPE_NAMES = ["aws", "env", "django", "mysql", "curl", "docker", "netrc", "dockerauth", "azure", "ya29", "sas",
               "sendgrid", "vault", "telegram", "gcp", "age", "sshpass", "htpasswd", "digitalocean", "shopify"]
NOISE = ["Traceback (most recent call last):", "  File \"/app/main.py\", line 12, in <module>",
         "npm ERR! code ELIFECYCLE", "error: could not compile `app`",
         "commit da39a3ee5e6b4b0d3255bfef95601890afd80709",
         "INFO request ok path=/api/items status=200", "KeyError: 'token'", "SORT_KEY=created_at"]


@st.composite
def secret_texts(draw: st.DrawFn) -> tuple[str, list[str]]:
    rng = random.Random(draw(st.integers(0, 2**32)))
    shapes = draw(st.lists(st.sampled_from(SHAPE_NAMES), min_size=1, max_size=4))
    parts, secrets = [], []
    for shape in shapes:
        text, secret = _secret(rng, shape)
        parts += [*draw(st.lists(st.sampled_from(NOISE), max_size=2)), text]
        secrets.append(secret)
    return "\n".join(parts), secrets


@pytest.mark.slow  # fuzz: hypothesis-generated secrets
@settings(max_examples=int(os.environ.get("LOKI_FUZZ_EXAMPLES", "150")), deadline=None)
@given(secret_texts())
def test_fuzz_no_generated_secret_survives_redaction(case: tuple[str, list[str]]) -> None:
    text, secrets = case
    out = redact(text)
    assert [s for s in secrets if s in out] == []
    assert redact(out) == out


@pytest.mark.slow  # fuzz: hypothesis-generated secrets
@settings(max_examples=max(5, int(os.environ.get("LOKI_FUZZ_EXAMPLES", "150")) // 10), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=secret_texts())
def test_fuzz_no_generated_secret_reaches_the_disk(tmp_path_factory: pytest.TempPathFactory,
                                                   case: tuple[str, list[str]]) -> None:
    text, secrets = case
    top = tmp_path_factory.mktemp("fuzz")
    init_tree(str(top / ".loki"))
    (top / ".git").mkdir()
    (top / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    # the command that printed it: one of the shapes that are commands, else a `cat` of the files
    commands = [line for line in text.splitlines() if line.startswith(("mysql ", "curl ", "docker ", "aws "))]
    command = commands[0] if commands else "cat .env ~/.netrc ~/.docker/config.json settings.py"
    for session in ("a", "b", "c", "d", "e"):  # to the stop tier: the escalation file and its signal too
        data = payload("post_tool_use_failure_bash", top, tool_input={"command": command, "description": "x"},
                       error=f"Exit code 1\n{text}", session_id=session)
        err = io.StringIO()
        assert run_hook("post-tool-use-failure", None, io.BytesIO(json.dumps(data).encode()), io.StringIO(), err) == 0
        assert err.getvalue() == ""
    assert os.listdir(top / ".loki" / layout.ESCALATIONS_DIR)
    assert leaked(top / ".loki", secrets) == []


# -- Loki Mode's own files: an imported task's error is loki's to write from then on ------------------


def test_a_loki_mode_tasks_last_error_is_redacted_when_loki_rewrites_the_file(root: Path) -> None:
    pending = root / "queue/pending.json"
    dead = {"id": "t-dead", "type": "eng", "priority": 5, "createdAt": "2026-01-25T09:00:00Z", "retries": 3,
            "maxRetries": 3, "lastError": BLOB}
    pending.write_text(json.dumps([
        {"id": "t-1", "type": "eng", "priority": 5, "createdAt": "2026-01-25T09:00:00Z", "lastError": BLOB}]))
    (root / layout.DEADLETTER).write_text(json.dumps([dead]))
    assert cli(["queue", "claim", "--agent", "a"], root=root).code == 0  # rewrites pending.json in loki's format
    assert cli(["deadletter", "review", "--force"], root=root).code == 0  # and the dead-letter file
    assert leaked(root, SECRETS) == []
