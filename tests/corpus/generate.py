"""Regenerate the error-scan corpus by running real commands.

Run from the repository root:  .venv/bin/python tests/corpus/generate.py

Every case below is executed with ``bash -c`` in a scratch workspace under /tmp, and its combined
stdout+stderr and exit code are saved to ``tests/corpus/<name>.json`` together with the expected label.
The outputs are therefore what the tools really print on the machine that ran this script; rerunning it
on another machine may change versions, pids and timings in the text, not the labels.
The TypeScript case needs ``tsc`` from ``npm install typescript@5`` in $LOKI_TSC_DIR (default /tmp/tsdir);
without it that case is left as it is.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
WORK = Path("/tmp/loki-corpus")
TSC_DIR = Path(os.environ.get("LOKI_TSC_DIR", "/tmp/tsdir"))
MAX_OUTPUT = 20_000

FILES: dict[str, str] = {
    "app/config_loader.py": """\
import json


def load(path):
    with open(path) as fh:
        return json.load(fh)


def database_url(config):
    return config["database"]["url"]


def main():
    config = {"service": {"name": "billing"}}
    print("connecting to", database_url(config))


if __name__ == "__main__":
    main()
""",
    "app/models.py": """\
class User:
    def __init__(self, name):
        self.name = name


def greet(user):
    return "hello " + user.full_name


print(greet(User("ada")))
""",
    "app/broken_syntax.py": """\
def total(items):
    result = 0
    for item in items
        result += item
    return result
""",
    "app/bad_indent.py": """\
def handler(event):
    if event:
        return 1
      return 0
""",
    "app/chained.py": """\
import json


def parse(raw):
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid payload: {raw!r}") from exc


parse("{not json")
""",
    "app/run_cmd.py": """\
import subprocess

subprocess.run(["false"], check=True)
""",
    "app/typed.py": """\
def port(value: str) -> int:
    return value


count: int = "three"
""",
    "app/lint_me.py": """\
import os
import sys


def main():
    return 1
""",
    "app/retry_demo.py": """\
attempts = ["timeout talking to cache", None]
for n, problem in enumerate(attempts, 1):
    if problem:
        print(f"attempt {n} failed: {problem}; retrying")
    else:
        print(f"attempt {n} ok")
print("done: 1 retry, 0 errors")
""",
    "app/error_handling.py": """\
import logging

log = logging.getLogger(__name__)


class ValidationError(Exception):
    pass


def parse_port(raw):
    try:
        return int(raw)
    except ValueError:
        log.error("invalid port %r", raw)
        raise ValidationError(f"port must be an integer, got {raw!r}")
""",
    "app/logged_failure.py": """\
import logging
import traceback

logging.basicConfig(format="%(levelname)s %(message)s")
for name in ["a.csv", "b.csv"]:
    try:
        if name == "a.csv":
            raise KeyError("customer_id")
        print(f"imported {name}")
    except KeyError:
        logging.error("import of %s failed", name)
        traceback.print_exc()
print("import finished")
""",
    "pyproj/warn/test_deprecations.py": """\
import warnings


def parse_legacy(value):
    warnings.warn("parse_legacy() swallows error details; use parse()", DeprecationWarning, stacklevel=2)
    return value


def test_legacy_error_path():
    assert parse_legacy("x") == "x"
""",
    "tools/check_links.py": """\
links = ["README.md", "docs/errors.md", "docs/error-handling.md"]
for link in links:
    print(f"ok   {link}")
print(f"Checked {len(links)} links: 0 errors, 0 warnings")
print("errors: 0")
""",
    "pyproj/tests/test_calc.py": """\
def add(a, b):
    return a - b


def test_add():
    assert add(2, 3) == 5


def test_add_zero():
    assert add(0, 0) == 0


def test_lookup():
    prices = {"apple": 3}
    assert prices["pear"] == 2
""",
    "pyproj/tests/test_errors.py": """\
import pytest


def login(user, password):
    if password != "s3cret-for-tests":
        raise PermissionError("bad password")
    return True


def test_failed_login():
    with pytest.raises(PermissionError):
        login("ada", "wrong")


def test_handles_error_response():
    assert login("ada", "s3cret-for-tests")


def test_error_message_is_clear():
    with pytest.raises(PermissionError, match="bad password"):
        login("ada", "nope")


@pytest.mark.parametrize("code", [400, 404, 500])
def test_http_error_codes(code):
    assert code >= 400
""",
    "pyproj/broken/test_broken_import.py": """\
import yamlish_parser_missing


def test_parse():
    assert yamlish_parser_missing.load("a: 1") == {"a": 1}
""",
    "ut/test_parser_errors.py": """\
import unittest


class ParserErrorTests(unittest.TestCase):
    def test_reports_error_line(self):
        self.assertEqual(len("line 3"), 6)

    def test_failed_parse_returns_none(self):
        self.assertIsNone(None)
""",
    "utfail/test_math.py": """\
import unittest


class MathTests(unittest.TestCase):
    def test_division(self):
        self.assertEqual(7 // 2, 3.5)

    def test_keys(self):
        self.assertIn("b", {"a": 1})
""",
    "docs/error-handling.md": "# Error handling\n\nErrors are wrapped in LokiError.\n",
    "docs/errors.py": "ERRORS = {}\n",
    "docs/test_error_cases.py": "def test_nothing():\n    pass\n",
    "docs/failed-jobs.log": "",
    "docs/troubleshooting.md": """\
# Troubleshooting

If the shell reports `command not found`, install the tool and check your PATH.
A permission denied error on deploy usually means the script lost its executable bit.
Rate limits: the API answers 429 when you exceed the rate limit; the client backs off.
We fixed the segmentation fault in the image decoder in 2.3.1.
""",
    "docs/CHANGELOG.md": """\
# Changelog

## 2.3.1
- Fixed segmentation fault when decoding truncated PNG files
- Retry on ECONNREFUSED instead of failing the whole batch
- `loki doctor` no longer reports 0 errors as a failure

## 2.3.0
- New: error-handling guide
- Tests: 0 failed, 212 passed on CI
""",
    "src/server.js": """\
const http = require("http");

function handle(req, res) {
  try {
    res.end(JSON.stringify({ ok: true }));
  } catch (error) {
    console.error("request failed", error);
    res.statusCode = 500;
    res.end();
  }
}

process.on("uncaughtException", (err) => {
  console.error("fatal:", err.message);
  require("fs").appendFileSync("error.log", String(err) + "\\n");
});

http.createServer(handle).listen(process.env.PORT || 3000);
""",
    "src/app.js": """\
function formatUser(user) {
  return user.profile.displayName.toUpperCase();
}

const users = [{ name: "ada" }];
console.log(users.map(formatUser));
""",
    "src/broken.js": """\
function main() {
  const items = [1, 2, 3;
  return items;
}
main();
""",
    "src/client.js": """\
const http = require("http");
http.get("http://127.0.0.1:59999/health", (res) => console.log(res.statusCode));
""",
    "src/spawn.js": """\
const { spawn } = require("child_process");
const child = spawn("prettier-nonexistent", ["--check", "."]);
child.on("error", (err) => { throw err; });
""",
    "nodetest/test/errors.test.js": """\
const test = require("node:test");
const assert = require("node:assert");

test("handles error responses", () => {
  assert.strictEqual(typeof new Error("x").message, "string");
});

test("failed login is rejected", () => {
  assert.ok(true);
});
""",
    "nodefail/test/cart.test.js": """\
const test = require("node:test");
const assert = require("node:assert");

function total(items) {
  return items.reduce((sum, item) => sum + item.price, 1);
}

test("cart total", () => {
  assert.strictEqual(total([{ price: 2 }, { price: 3 }]), 5);
});

test("empty cart", () => {
  assert.strictEqual(total([]), 0);
});
""",
    "npmproj/package.json": json.dumps(
        {
            "name": "webapp",
            "version": "1.0.0",
            "scripts": {"build": "node -e \"console.log('built 3 bundles, 0 errors')\"",
                        "test": "node --test test/"},
        },
        indent=2,
    )
    + "\n",
    "npmproj/test/errors.test.js": """\
const test = require("node:test");
test("error banner renders", () => {});
test("failed upload retries", () => {});
""",
    "rust/mismatch.rs": """\
fn parse_port(raw: &str) -> u16 {
    raw.len()
}

fn main() {
    let port: u16 = parse_port("8080");
    println!("{}", port);
}
""",
    "rust/borrow.rs": """\
fn main() {
    let names = vec![String::from("ada")];
    let first = &names[0];
    let moved = names;
    println!("{} {}", first, moved.len());
}
""",
    "rust/unresolved.rs": """\
use std::collections::HashMapp;

fn main() {
    let m: HashMapp<u8, u8> = HashMapp::new();
    println!("{}", m.len());
}
""",
    "rust/panic.rs": """\
fn config_value(key: &str) -> Option<&'static str> {
    if key == "port" { Some("8080") } else { None }
}

fn main() {
    let host = config_value("host").unwrap();
    println!("{}", host);
}
""",
    "rust/ok.rs": """\
fn main() {
    let unused = 3;
    println!("processed 12 files, 0 errors");
}
""",
    "rustlib/Cargo.toml": """\
[package]
name = "rustlib"
version = "0.1.0"
edition = "2021"
""",
    "rustlib/src/lib.rs": """\
pub fn slugify(s: &str) -> String {
    s.to_lowercase().replace(' ', "_")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_error_titles() {
        assert_eq!(slugify("Error Page"), "error_page");
    }

    #[test]
    fn replaces_spaces_with_dashes() {
        assert_eq!(slugify("a b"), "a-b");
    }
}
""",
    "rustok/Cargo.toml": """\
[package]
name = "rustok"
version = "0.1.0"
edition = "2021"
""",
    "rustok/src/lib.rs": """\
pub fn double(x: i32) -> i32 { x * 2 }

#[cfg(test)]
mod tests {
    #[test]
    fn error_free_doubling() { assert_eq!(super::double(2), 4); }
    #[test]
    fn failed_cases_are_none() { assert_eq!(super::double(0), 0); }
}
""",
    "c/main.c": """\
#include <stdio.h>

int main(void) {
    int count = 3
    printf("%d\\n", count);
    return 0;
}
""",
    "c/link.c": """\
int compute(int x);

int main(void) {
    return compute(2);
}
""",
    "c/header.c": """\
#include "config_generated.h"

int main(void) { return 0; }
""",
    "c/segv.c": """\
#include <stddef.h>

struct node { int value; struct node *next; };

int main(void) {
    struct node *head = NULL;
    return head->next->value;
}
""",
    "c/abort.c": """\
#include <assert.h>

int main(void) {
    int balance = -5;
    assert(balance >= 0);
    return 0;
}
""",
    "c/warn.c": """\
#include <stdio.h>

int main(void) {
    int unused;
    printf("build ok\\n");
    return 0;
}
""",
    "mk/fail/Makefile": "build:\n\tgcc -o app missing_main.c\n",
    "mk/ok/Makefile": "all: app\n\napp: main.c\n\tgcc -Wall -o app main.c\n\techo 'linked app: 0 errors'\n",
    "mk/ok/main.c": "int main(void) { return 0; }\n",
    "mk/tool/Makefile": "lint:\n\tfrobnicate-lint src/\n",
    "java/Main.java": """\
import java.util.HashMap;
import java.util.Map;

public class Main {
    static String region(Map<String, String> cfg) {
        return cfg.get("region").toUpperCase();
    }

    public static void main(String[] args) {
        System.out.println(region(new HashMap<>()));
    }
}
""",
    "javabad/Bad.java": """\
public class Bad {
    public static void main(String[] args) {
        int total = 0
        System.out.println(total);
    }
}
""",
    "javaok/Ok.java": """\
public class Ok {
    public static void main(String[] args) {
        System.out.println("Processed 10 records, 0 errors");
    }
}
""",
    "ts/src/user.ts": """\
interface User { id: number; name: string }

export function label(user: User): string {
  const id: string = user.id;
  return `${id}: ${user.nmae}`;
}
""",
    "ts/tsconfig.json": '{"compilerOptions": {"strict": true, "noEmit": true}, "include": ["src"]}\n',
    "logs/app.log": """\
2026-11-20T10:41:58Z INFO  [api] listening on :8080
2026-11-20T10:42:13Z ERROR [mailer] failed to send welcome email: Connection refused (retry 1/3)
2026-11-20T10:42:15Z WARN  [mailer] retry succeeded
2026-11-20T10:43:01Z INFO  [api] GET /health 200 1ms
""",
    "logs/worker.log": """\
2026-11-20 10:42:13,481 INFO worker started
2026-11-20 10:42:14,002 ERROR job 81 crashed
Traceback (most recent call last):
  File "/srv/worker/jobs.py", line 44, in run
    payload = decode(raw)
  File "/srv/worker/codec.py", line 12, in decode
    return json.loads(raw)
json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)
2026-11-20 10:42:14,010 INFO job 81 requeued
""",
    "scripts/deploy.sh": "#!/bin/sh\necho deploying\n",
    "scripts/bad.sh": "#!/bin/bash\nif [ -f config ]; then\n  echo ok\nfi fi\n",
    "data/bad.json": '{"name": "x",\n "tags": ["a" "b"]\n}\n',
}

# (name, command, expected_error, expected_class)
CASES: list[tuple[str, str, bool, str | None]] = [
    # Python
    ("py_zero_division", 'python3 -c "print(sum([3, 4]) / 0)"', True, "python_exception"),
    ("py_key_error_script", "python3 app/config_loader.py", True, "python_exception"),
    ("py_attribute_error", "python3 app/models.py", True, "python_exception"),
    ("py_module_not_found", 'python3 -c "import nosuchmodule"', True, "missing_module"),
    ("py_syntax_error", "python3 app/broken_syntax.py", True, "syntax"),
    ("py_indentation_error", "python3 app/bad_indent.py", True, "syntax"),
    ("py_file_not_found", "python3 -c \"open('data/missing.csv').read()\"", True, "missing_file"),
    ("py_connection_refused",
     "python3 -c \"import urllib.request; urllib.request.urlopen('http://localhost:1/')\"",
     True, "network"),
    ("py_memory_error", 'python3 -c "x = bytearray(10**15)"', True, "resource"),
    ("py_chained_value_error", "python3 app/chained.py", True, "python_exception"),
    ("py_called_process_error", "python3 app/run_cmd.py", True, "python_exception"),
    ("py_traceback_or_true", "python3 app/config_loader.py || true", True, "python_exception"),
    ("py_script_missing", "python3 app/does_not_exist.py", True, "missing_file"),
    ("py_argparse_error", "python3 -m http.server notaport", True, None),
    ("py_json_tool_invalid", "python3 -m json.tool data/bad.json", True, None),
    ("py_retry_log_ok", "python3 app/retry_demo.py", False, None),
    ("py_summary_zero_errors", "python3 tools/check_links.py", False, None),
    # pytest / unittest
    ("pytest_fail_quiet", "cd pyproj && pytest -q tests/test_calc.py", True, "test_failure"),
    ("pytest_fail_verbose", "cd pyproj && pytest -v -p no:cacheprovider tests/test_calc.py", True,
     "test_failure"),
    ("pytest_fail_piped_tail", "cd pyproj && pytest -q -p no:cacheprovider tests/ 2>&1 | tail -n 6", True,
     "test_failure"),
    ("pytest_collection_error", "cd pyproj && pytest -q -p no:cacheprovider broken/", True, "test_failure"),
    ("pytest_pass_error_names", "cd pyproj && pytest -v -p no:cacheprovider tests/test_errors.py", False,
     None),
    ("pytest_pass_quiet", "cd pyproj && pytest -q -p no:cacheprovider tests/test_errors.py", False, None),
    ("pytest_collect_only", "cd pyproj && pytest --co -q -p no:cacheprovider tests/test_errors.py", False,
     None),
    ("unittest_fail", "python3 -m unittest discover -s utfail", True, "test_failure"),
    ("unittest_pass_error_names", "python3 -m unittest discover -s ut -v", False, None),
    # mypy / ruff
    ("mypy_errors", "mypy --no-incremental app/typed.py", True, "compile_error"),
    ("mypy_clean", "mypy --no-incremental app/retry_demo.py", False, None),
    ("ruff_violations", "ruff check --no-cache app/lint_me.py", True, "lint"),
    ("ruff_clean", "ruff check --no-cache app/retry_demo.py", False, None),
    # shell
    ("bash_command_not_found", "terraformx plan -out=tfplan", True, "missing_command"),
    ("sh_command_not_found", "sh -c 'frobnicate --all'", True, "missing_command"),
    ("exec_permission_denied", "./scripts/deploy.sh", True, "permission"),
    ("touch_permission_denied", "runuser -u nobody -- touch /root/loki-forbidden.txt", True, "permission"),
    ("cat_missing_file", "cat config/settings.yaml", True, "missing_file"),
    ("ls_missing_dir", "ls docs/missing", True, "missing_file"),
    ("cd_missing_dir", "cd build/output && ls", True, "missing_file"),
    ("bash_syntax_error", "bash scripts/bad.sh", True, "syntax"),
    ("false_no_output", "false", True, "exit_status"),
    ("test_file_missing", "test -f build/app.tar.gz", True, "exit_status"),
    ("timeout_killed", "timeout 1 sleep 5", True, "timeout"),
    ("sigkill_killed",
     "python3 -c \"import os, signal; print('loading', flush=True); os.kill(os.getpid(), signal.SIGKILL)\";"
     " exit $?",
     True, "resource"),
    ("ls_error_named_files", "ls docs/", False, None),
    ("ls_long_error_named_files", "ls -la docs/", False, None),
    ("find_error_files", "find . -name '*error*' -not -path './rust*' | sort", False, None),
    ("grep_error_in_source", "grep -rn 'error' src/ app/error_handling.py", False, None),
    ("cat_js_console_error", "cat src/server.js", False, None),
    ("cat_py_error_handling", "cat app/error_handling.py", False, None),
    ("cat_troubleshooting_doc", "cat docs/troubleshooting.md", False, None),
    ("head_changelog", "head -n 12 docs/CHANGELOG.md", False, None),
    ("cat_app_log_with_errors", "cat logs/app.log", False, None),
    ("cat_worker_log_traceback", "cat logs/worker.log", False, None),
    ("curl_file_doc", "curl -sS file://$PWD/docs/error-handling.md", False, None),
    # network
    ("curl_connection_refused", "curl -sS http://localhost:1/health", True, "network"),
    ("curl_dns_failure", "curl -sS https://api.loki-corpus.invalid/v1/status", True, "network"),
    # node / npm
    ("node_cannot_find_module", "node -e \"require('left-pad-not-installed')\"", True, "missing_module"),
    ("node_enoent", "node -e \"require('fs').readFileSync('config/app.json')\"", True, "missing_file"),
    ("node_type_error", "node src/app.js", True, "js_exception"),
    ("node_econnrefused", "node src/client.js", True, "network"),
    ("node_syntax_error", "node src/broken.js", True, "syntax"),
    ("node_spawn_enoent", "node src/spawn.js", True, "missing_command"),
    ("node_test_fail", "cd nodefail && node --test", True, "test_failure"),
    ("node_test_pass", "cd nodetest && node --test", False, None),
    ("npm_missing_script", "cd npmproj && npm run buidl", True, "package_manager"),
    ("npm_ci_no_lockfile", "cd npmproj && npm ci --no-audit 2>&1 | head -n 8", True, "package_manager"),
    ("npm_build_ok", "cd npmproj && npm run build", False, None),
    ("npm_test_ok", "cd npmproj && npm test", False, None),
    ("node_heap_oom",
     "node --max-old-space-size=16 -e \"const a = []; for (;;) a.push(new Array(1e5).fill(7))\" 2>&1"
     " | grep -v '^ *[0-9]*: 0x' | head -n 20; exit ${PIPESTATUS[0]}",
     True, "resource"),
    # rust
    ("rustc_type_mismatch", "cd rust && rustc mismatch.rs", True, "compile_error"),
    ("rustc_borrow_error", "cd rust && rustc borrow.rs", True, "compile_error"),
    ("rustc_unresolved_import", "cd rust && rustc unresolved.rs", True, "compile_error"),
    ("rustc_error_piped_head", "cd rust && rustc mismatch.rs 2>&1 | head -n 12", True, "compile_error"),
    ("rust_panic", "cd rust && rustc -o /tmp/loki-corpus/panic panic.rs && /tmp/loki-corpus/panic", True,
     "crash"),
    ("rust_panic_backtrace",
     "cd rust && RUST_BACKTRACE=1 /tmp/loki-corpus/panic 2>&1 | head -n 14; exit ${PIPESTATUS[0]}", True,
     "crash"),
    ("rustc_warning_ok", "cd rust && rustc -o /tmp/loki-corpus/okbin ok.rs && /tmp/loki-corpus/okbin",
     False, None),
    ("cargo_test_fail", "cd rustlib && cargo test --offline -q 2>&1 | grep -v '^ *Compiling\\|Finished'"
     "; exit ${PIPESTATUS[0]}", True, "test_failure"),
    ("cargo_test_pass", "cd rustok && cargo test --offline 2>&1 | grep -v 'Compiling\\|Finished\\|Running'",
     False, None),
    # C / make
    ("gcc_syntax_error", "cd c && gcc -o main main.c", True, "compile_error"),
    ("gcc_link_error", "cd c && gcc -o link link.c", True, "compile_error"),
    ("gcc_missing_header", "cd c && gcc -o header header.c", True, None),
    ("c_segfault", "cd c && gcc -o segv segv.c && ./segv; exit $?", True, "crash"),
    ("c_assert_abort", "cd c && gcc -o abrt abort.c && ./abrt; exit $?", True, "crash"),
    ("gcc_warning_ok", "cd c && gcc -Wall -o warn warn.c && ./warn", False, None),
    ("make_recipe_error", "cd mk/fail && make", True, None),
    ("make_no_rule", "cd mk/ok && make install", True, "build_failure"),
    ("make_missing_tool", "cd mk/tool && make lint", True, None),
    ("make_error_piped", "cd mk/fail && make 2>&1 | tail -n 3", True, None),
    ("make_ok", "cd mk/ok && rm -f app && make", False, None),
    # java
    ("java_npe", "cd java && javac Main.java && java Main", True, "java_exception"),
    ("javac_error", "cd javabad && javac Bad.java", True, "compile_error"),
    ("java_ok", "cd javaok && javac Ok.java && java Ok", False, None),
    # typescript
    ("tsc_errors", f"cd ts && {TSC_DIR}/node_modules/.bin/tsc -p .", True, "compile_error"),
    # git
    ("git_not_a_repo", "cd /tmp && git status", True, "git"),
    ("git_bad_pathspec", "cd repo && git checkout no-such-branch", True, "git"),
    ("git_merge_conflict", "cd conflict && git merge feature", True, "git"),
    ("git_push_no_remote", "cd repo && git push", True, "git"),
    ("git_log_ok", "cd repo && git log --format='%h %s'", False, None),
    ("git_diff_ok", "cd repo && git diff HEAD~1 --stat && git diff HEAD~1 -- handler.js", False, None),
    ("git_status_clean", "cd repo && git status", False, None),
    # pip
    ("pip_missing_requirements", "python3 -m pip install -r requirements-missing.txt", True, "missing_file"),
    # more realistic near-misses and errors
    ("gcc_werror", "cd c && gcc -Wall -Werror -o warn warn.c", True, "compile_error"),
    ("py_address_in_use",
     "python3 -m http.server 18766 >/dev/null 2>&1 & sleep 1; python3 -m http.server 18766; rc=$?;"
     " kill %1; exit $rc", True, "network"),
    ("curl_http_404",
     "python3 -m http.server 18765 >/dev/null 2>&1 & sleep 1; curl -fsS http://127.0.0.1:18765/missing.json;"
     " rc=$?; kill %1; exit $rc", True, "http"),
    ("curl_http_listing_ok",
     "cd docs && python3 -m http.server 18767 >/dev/null 2>&1 & sleep 1; curl -fsS http://127.0.0.1:18767/;"
     " rc=$?; kill %1; exit $rc", False, None),
    ("git_nothing_to_commit", "cd repo && git commit -m 'Fix failing test'", True, "exit_status"),
    ("git_clone_missing", "git clone /tmp/loki-corpus/no-such-repo.git", True, "git"),
    ("node_json_parse", "node -e \"JSON.parse('{bad json')\"", True, "syntax"),
    ("py_json_decode", "python3 -c \"import json; json.loads('{bad json')\"", True, "python_exception"),
    ("py_sys_exit_message", "python3 -c \"import sys; sys.exit('config error: DATABASE_URL is not set')\"",
     True, None),
    ("py_logged_traceback_continue", "python3 app/logged_failure.py", True, "python_exception"),
    ("py_logging_error_ok",
     "python3 -c \"import logging; logging.basicConfig(); logging.error('cache miss for key error_page')\"",
     False, None),
    ("pytest_pass_with_warnings", "cd pyproj && pytest -q -p no:cacheprovider warn/", False, None),
    ("ls_recursive", "ls -R docs nodetest", False, None),
    ("tar_missing_archive", "tar xzf release-1.2.tar.gz", True, "missing_file"),
    ("rm_missing_file", "rm build/cache.db", True, "missing_file"),
    ("mkdir_exists", "mkdir docs", True, "exit_status"),
    ("ssh_connection_refused", "ssh -o BatchMode=yes -o StrictHostKeyChecking=no -p 1 localhost true", True,
     "network"),
    ("sqlite_no_table", "sqlite3 :memory: 'select * from users'", True, None),
    ("cargo_build_ok", "cd rustok && cargo build --offline", False, None),
    ("wc_error_files_ok", "wc -l docs/*.py app/error_handling.py", False, None),
]


def setup() -> None:
    if WORK.exists():
        shutil.rmtree(WORK)
    ws = WORK / "ws"
    for rel, text in FILES.items():
        path = ws / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (ws / "scripts/deploy.sh").chmod(0o644)
    (ws / "scripts/bad.sh").chmod(0o755)
    git_env = {
        "GIT_AUTHOR_NAME": "Ada", "GIT_AUTHOR_EMAIL": "ada@example.com",
        "GIT_COMMITTER_NAME": "Ada", "GIT_COMMITTER_EMAIL": "ada@example.com",
    }
    script = """
set -e
git init -q -b main repo && cd repo
printf 'function handle(req) {\\n  return req;\\n}\\n' > handler.js
git add . && git commit -qm 'Add request handler'
printf 'function handle(req) {\\n  try {\\n    return req;\\n' > handler.js
printf '  } catch (error) {\\n    console.error(error);\\n  }\\n}\\n' >> handler.js
git commit -qam 'Fix error handling for failed requests'
cd ..
git init -q -b main conflict && cd conflict
echo 'timeout = 10' > settings.ini && git add . && git commit -qm init
git checkout -qb feature && echo 'timeout = 30' > settings.ini && git commit -qam 'raise timeout'
git checkout -q main && echo 'timeout = 5' > settings.ini && git commit -qam 'lower timeout'
"""
    subprocess.run(["bash", "-c", script], cwd=ws, check=True, env={**os.environ, **git_env})


def run_case(command: str) -> tuple[str, int]:
    env = {
        **os.environ,
        "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "NO_COLOR": "1", "TERM": "dumb",
        "PATH": f"{ROOT / '.venv' / 'bin'}:{os.environ['PATH']}",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    env.pop("RUST_BACKTRACE", None)
    proc = subprocess.run(
        ["bash", "-c", command], cwd=WORK / "ws", env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, timeout=300, check=False,
    )
    output = proc.stdout.decode("utf-8", "replace")
    if len(output) > MAX_OUTPUT:
        output = "[... truncated ...]\n" + output[-MAX_OUTPUT:]
    return output, proc.returncode


def main(argv: list[str]) -> int:
    only = set(argv)
    setup()
    for name, command, expected_error, expected_class in CASES:
        if only and name not in only:
            continue
        if name == "tsc_errors" and not (TSC_DIR / "node_modules/.bin/tsc").exists():
            print(f"skip {name}: no tsc in {TSC_DIR}", file=sys.stderr)
            continue
        output, code = run_case(command)
        case = {
            "command": command,
            "exit_code": code,
            "output": output,
            "expected_error": expected_error,
            "expected_class": expected_class,
        }
        (HERE / f"{name}.json").write_text(json.dumps(case, indent=2, ensure_ascii=False) + "\n")
        print(f"{name:32} exit={code}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
