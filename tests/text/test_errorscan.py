from __future__ import annotations

import json
from pathlib import Path

import pytest

from loki.text.errorscan import (
    HEAD_CHARS,
    MAX_MESSAGE_CHARS,
    MAX_SCAN_CHARS,
    MAX_STACK_CHARS,
    PATTERNS,
    ErrorPattern,
    FileRef,
    ScanResult,
    extract_file_refs,
    extract_stack_trace,
    normalise_error,
    scan,
)

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
from tests import corpus_score  # noqa: E402  (tests/corpus_score.py: the scorer, also runnable on its own)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "error-patterns.md"


def lines(*parts: str) -> str:
    return "\n".join(parts) + "\n"


PY_TRACE_HEAD = lines(
    "Traceback (most recent call last):",
    '  File "/srv/app/main.py", line 12, in <module>',
    "    run()",
    '  File "/srv/app/main.py", line 8, in run',
    "    handle(payload)",
)

# pattern name -> (real-looking outputs it must decide, near misses that must not be errors at all)
CASES: dict[str, tuple[list[str], list[str]]] = {
    "pytest_failed_test": (
        [lines("FAILED tests/test_api.py::test_create_user - AssertionError: 201 != 400", "1 failed")],
        [lines("tests/test_errors.py::test_failed_login PASSED                [ 50%]",
               "tests/test_errors.py::test_error_page PASSED                  [100%]")],
    ),
    "pytest_summary": (
        [lines("F.", "=========== 1 failed, 1 passed in 0.12s ===========")],
        [lines("..", "=========== 2 passed, 1 warning in 0.08s ===========", "0 failed")],
    ),
    "unittest_failure": (
        [lines("Ran 4 tests in 0.003s", "", "FAILED (failures=1, errors=1)")],
        [lines("test_failed_parse (tests.ParserTests.test_failed_parse) ... ok", "Ran 1 test in 0.001s", "", "OK")],
    ),
    "jest_failure": (
        [lines(" FAIL  src/cart.test.js", "  ● cart › applies discount", "Tests:       1 failed, 11 passed, 12 total")],
        [lines(" PASS  src/error-banner.test.js", "  ● Console", "Tests:       0 failed, 12 passed, 12 total")],
    ),
    "tap_failure": (
        [lines("TAP version 13", "not ok 1 - cart total", "# pass 3", "# fail 1")],
        [lines("TAP version 13", "ok 1 - failed login is rejected", "# pass 1", "# fail 0")],
    ),
    "cargo_test_failure": (
        [lines("test tests::slug ... FAILED", "test result: FAILED. 1 passed; 1 failed; 0 ignored")],
        [lines("test tests::error_free ... ok", "test result: ok. 2 passed; 0 failed; 0 ignored")],
    ),
    "go_test_failure": (
        [lines("--- FAIL: TestParseError (0.00s)", "    parse_test.go:14: got 3, want 4",
               "FAIL\texample.com/app\t0.01s")],
        [lines("--- PASS: TestParseError (0.00s)", "ok  \texample.com/app/errors\t0.01s")],
    ),
    "rust_panic": (
        [lines("thread 'main' (4242) panicked at src/main.rs:6:37:", "called `Option::unwrap()` on a `None` value")],
        [lines("// the worker thread panicked at startup before we added the guard", "fn main() {}")],
    ),
    "go_panic": (
        [lines("panic: runtime error: index out of range [3] with length 3", "", "goroutine 1 [running]:",
               "main.main()", "\t/app/main.go:9 +0x1d", "exit status 2")],
        [lines("panic: false", "retries: 3", "log_level: info")],
    ),
    "segmentation_fault": (
        [lines("bash: line 1:  7246 Segmentation fault      ./decoder input.png")],
        [lines("- Fixed a segmentation fault when decoding truncated PNG files")],
    ),
    "core_dumped": (
        [lines("./server --port 8080", "Illegal hardware instruction (core dumped)")],
        [lines("docs: how core dumps are collected on CI", "set ulimit -c unlimited to get a core")],
    ),
    "fatal_signal": (
        [lines("app: worker.c:88: flush: Assertion `queue->len > 0' failed.", "bash: line 1:  7255 Aborted  ./app")],
        [lines("Aborted merges are cleaned up by the nightly job.", "assertion count: 12")],
    ),
    "fatal_python_error": (
        [lines("Fatal Python error: Segmentation fault", "", "Current thread 0x00007f (most recent call first):")],
        [lines("# Fatal Python errors are rare; see docs/debugging.md")],
    ),
    "rustc_error": (
        [lines("error[E0308]: mismatched types", " --> src/main.rs:2:5", "  |", "2 |     raw.len()")],
        [lines("warning: unused variable: `x`", " --> src/main.rs:2:9", "warning: 1 warning emitted")],
    ),
    "typescript_error": (
        [lines("src/user.ts(4,9): error TS2322: Type 'number' is not assignable to type 'string'.")],
        [lines("src/errors.ts", "src/error-types.d.ts", "Found 0 errors. Watching for file changes.")],
    ),
    "compiler_diagnostic": (
        [lines("main.c: In function 'main':", "main.c:5:5: error: expected ';' before 'printf'")],
        [lines("main.c:4:9: warning: unused variable 'unused' [-Wunused-variable]", "build ok")],
    ),
    "linker_error": (
        [lines("/usr/bin/ld: /tmp/ccX.o: in function `main':", "link.c:(.text+0xa): undefined reference to `compute'")],
        [lines("linking app ... done", "ld: 0 warnings")],
    ),
    "lint_violation": (
        [lines("app/models.py:1:8: F401 [*] `os` imported but unused", "Found 1 error.")],
        [lines("All checks passed!")],
    ),
    "error_count_summary": (
        [lines("checking 12 files", "Found 3 errors in 2 files (checked 12 source files)")],
        [lines("Success: no issues found in 12 source files", "Found 0 errors")],
    ),
    "command_not_found": (
        [lines("bash: line 1: terraformx: command not found")],
        [lines("docs/command-not-found.md", "If the shell reports `command not found`, fix PATH.")],
    ),
    "auth_failure": (
        [lines("git@github.com: Permission denied (publickey).", "fatal: Could not read from remote repository.")],
        [lines("docs/auth.md: how authentication works", "status: 200 OK")],
    ),
    "permission_denied": (
        [lines("bash: line 1: ./scripts/deploy.sh: Permission denied")],
        [lines("A permission denied error on deploy usually means the script lost its executable bit.")],
    ),
    "eacces": (
        [lines("node:events:497", "      throw er; // Unhandled 'error' event", "{", "  errno: -13,",
               "  code: 'EACCES',", "  syscall: 'listen',", "  port: 80", "}")],
        [lines("if (err.code === 'EACCES') { retryWithSudo(); }")],
    ),
    "enoent": (
        [lines("node:fs:573", "Error: ENOENT: no such file or directory, open 'config/app.json'")],
        [lines("case 'ENOENT': return null;")],
    ),
    "no_such_file": (
        [lines("cat: config/settings.yaml: No such file or directory")],
        [lines("tests/test_no_such_file_or_directory.py", "handles 'No such file or directory' messages")],
    ),
    "out_of_memory": (
        [lines("FATAL ERROR: Reached heap limit Allocation failed - JavaScript heap out of memory")],
        [lines("MemoryErrorHandler.java", "memory: 512Mi")],
    ),
    "resource_limit": (
        [lines("OSError: [Errno 28] No space left on device: '/var/lib/build/cache.bin'")],
        [lines("disk usage: 41% of 200G", "open files: 212")],
    ),
    "killed": (
        [lines("loading model", "bash: line 1:  6507 Killed                  python3 train.py")],
        [lines("processes killed: 0", "skill_level: 3")],
    ),
    "rate_limit": (
        [lines('{"type":"error","error":{"type":"rate_limit_error","message":"Number of requests exceeded"}}')],
        [lines("Rate limits: the API answers 429 when you exceed the rate limit; the client backs off.")],
    ),
    "connection_refused": (
        [lines("curl: (7) Failed to connect to localhost port 1 after 0 ms: Couldn't connect to server")],
        [lines("- Retry on ECONNREFUSED instead of failing the whole batch")],
    ),
    "host_unreachable": (
        [lines("curl: (6) Could not resolve host: api.example.invalid")],
        [lines("resolver: 8.8.8.8", "hosts: 3 reachable")],
    ),
    "connection_reset": (
        [lines("requests.exceptions.ConnectionError: ('Connection aborted.', ConnectionResetError(104, "
               "'Connection reset by peer'))")],
        [lines("reconnect_on_reset: true")],
    ),
    "address_in_use": (
        [lines("Error: listen EADDRINUSE: address already in use :::3000")],
        [lines("listening on :3000")],
    ),
    "tls_error": (
        [lines("curl: (60) SSL certificate problem: unable to get local issuer certificate")],
        [lines("certs/ca-bundle.pem", "tls: enabled")],
    ),
    "timeout": (
        [lines("ssh: connect to host build-01 port 22: Connection timed out")],
        [lines("timeout = 30", "--timeout 10s")],
    ),
    "import_error": (
        [lines("ModuleNotFoundError: No module named 'yaml'")],
        [lines("import_errors.py", "from .errors import ImportErrorHint")],
    ),
    "cannot_find_module": (
        [lines("Error: Cannot find module 'left-pad'", "Require stack:", "- /app/index.js")],
        [lines("// we cannot find modules installed globally here, so vendor them")],
    ),
    "syntax_error": (
        [lines('  File "app.py", line 3', "    for item in items", "                     ^",
               "SyntaxError: expected ':'")],
        [lines("tests/test_syntax_errors.py", "class SyntaxErrorReporter:")],
    ),
    "shell_syntax_error": (
        [lines("scripts/bad.sh: line 4: syntax error near unexpected token `fi'")],
        [lines("# checks scripts for syntax errors before deploy")],
    ),
    "make_error": (
        [lines("gcc -o app main.c", "make: *** [Makefile:2: build] Error 1")],
        [lines("make: Nothing to be done for 'all'.")],
    ),
    "failed_to_compile": (
        [lines("Failed to compile.", "", "./src/App.js", "Line 5: 'foo' is not defined")],
        [lines("Compiled successfully!", "webpack compiled with 0 errors")],
    ),
    "npm_error": (
        [lines('npm error Missing script: "buidl"', "npm error", "npm error To see a list of scripts, run:")],
        [lines('npm warn Unknown user config "nodedir".', "up to date, audited 12 packages in 1s")],
    ),
    "pip_error": (
        [lines("ERROR: Could not find a version that satisfies the requirement torchx==9.9",
               "ERROR: No matching distribution found for torchx==9.9")],
        [lines("Requirement already satisfied: pytest in ./.venv/lib/python3.11/site-packages")],
    ),
    "java_exception": (
        [lines('Exception in thread "main" java.lang.NullPointerException: region is null',
               "\tat Main.region(Main.java:6)", "\tat Main.main(Main.java:10)")],
        [lines("Processed 10 records, 0 errors", "ExceptionHandler.java compiled")],
    ),
    "js_uncaught_exception": (
        [lines("TypeError: Cannot read properties of undefined (reading 'name')",
               "    at formatUser (/app/src/app.js:2:23)", "    at Array.map (<anonymous>)")],
        [lines("console.error('request failed', error);", "} catch (error) {")],
    ),
    "type_error": (
        [lines("TypeError: unsupported operand type(s) for +: 'int' and 'str'")],
        [lines("    except TypeError:", "        return None")],
    ),
    "value_error": (
        [lines("ValueError: invalid literal for int() with base 10: 'abc'")],
        [lines('        raise ValueError("port must be an integer")')],
    ),
    "key_error": (
        [lines("KeyError: 'database'")],
        [lines("KeyErrors are raised for missing keys; use .get().")],
    ),
    "index_error": (
        [lines("IndexError: list index out of range")],
        [lines("    except IndexError:", "        pass")],
    ),
    "attribute_error": (
        [lines("AttributeError: 'NoneType' object has no attribute 'strip'")],
        [lines("test_attribute_error_message.py")],
    ),
    "name_error": (
        [lines("NameError: name 'reqeusts' is not defined")],
        [lines("nameerror_examples.md")],
    ),
    "assertion_error": (
        [lines("AssertionError: expected 42, got 24")],
        [lines("    with pytest.raises(AssertionError):")],
    ),
    "python_traceback": (
        [PY_TRACE_HEAD + lines("ZeroDivisionError: division by zero")],
        [lines('    print("Traceback (most recent call last): is what Python prints")')],
    ),
    "exception_line": (
        [lines("yaml.scanner.ScannerError: mapping values are not allowed here")],
        [lines("ValidationError is raised when the schema does not match.", "class ConfigError(Exception):")],
    ),
    "git_error": (
        [lines("fatal: not a git repository (or any of the parent directories): .git")],
        [lines("9d994ac Fix fatal error in parser", "nothing to commit, working tree clean")],
    ),
    "http_error": (
        [lines("curl: (22) The requested URL returned error: 404")],
        [lines("HTTP/1.1 200 OK", "content-type: application/json")],
    ),
    "exit_code": (
        [lines("Command failed with exit code 2.")],
        [lines("Process finished with exit code 0", "exited with 0 errors")],
    ),
    "error_line": (
        [lines("usage: server.py [-h] [port]", "server.py: error: argument port: invalid int value: 'x'")],
        [lines("errors: 0", "error-handling.md", "    error: str | None = None")],
    ),
    "test_timeout": (
        [lines("  ● report › fetches the report", "", '    thrown: "Exceeded timeout of 300 ms for a test.')],
        [lines("PASS slow.test.js", "  raised the timeout of the report test to 2000 ms")],
    ),
    "surefire_failure": (
        [lines("[ERROR] Tests run: 2, Failures: 1, Errors: 0, Skipped: 0, Time elapsed: 0.05 s <<< FAILURE!")],
        [lines("[INFO] Tests run: 4, Failures: 0, Errors: 0, Skipped: 0", "[INFO] BUILD SUCCESS")],
    ),
    "rspec_failure": (
        [lines("Finished in 0.01 seconds", "2 examples, 1 failure", "", "rspec ./spec/calc_spec.rb:4 # Calc adds")],
        [lines("Finished in 0.01 seconds", "2 examples, 0 failures")],
    ),
    "ctest_failure": (
        [lines("50% tests passed, 1 tests failed out of 2", "", "The following tests FAILED:",
               "\t  1 - math_add (Subprocess aborted)")],
        [lines("100% tests passed, 0 tests failed out of 2")],
    ),
    "tap_harness_failure": (
        [lines("#   Failed test 'lowercase'", "#   at pl/test.t line 6.", "Result: FAIL")],
        [lines("pl/ok.t .. ok", "All tests successful.", "Result: PASS")],
    ),
    "cpp_terminate": (
        [lines("terminate called after throwing an instance of 'std::runtime_error'", "  what():  bad config")],
        [lines("// terminate called after throwing is what happens without a catch")],
    ),
    "maven_compile_error": (
        [lines("[ERROR] COMPILATION ERROR : ",
               "[ERROR] /src/main/java/app/Broken.java:[5,17] incompatible types: String cannot be converted to int")],
        [lines("[INFO] Compiling 3 source files with javac [debug release 17] to target/classes")],
    ),
    "clippy_lint": (
        [lines("error: length comparison to zero", " --> src/lib.rs:2:5", "  |",
               "  = help: for further information visit https://rust-lang.github.io/rust-clippy/master/index.html")],
        [lines("warning: length comparison to zero", " --> src/lib.rs:2:5",
               "  = help: for further information visit https://rust-lang.github.io/rust-clippy/master/index.html")],
    ),
    "shellcheck": (
        [lines("", "In sh/deploy.sh line 3:", "cp build/app $target",
               "             ^-----^ SC2086 (info): Double quote")],
        [lines("sh/deploy.sh: all checks passed, no SC codes reported")],
    ),
    "go_compile_error": (
        [lines("# example.com/app/build", "build/main.go:7:14: undefined: totl")],
        [lines("ok  \texample.com/app/calc\t0.002s", "    calc_test.go:12: Add(2, 3) = 5")],
    ),
    "eslint_json_report": (
        [lines('[{"filePath":"/p/a.js","messages":[{"ruleId":"no-undef","severity":2,"message":"x undefined"}]}]')],
        [lines('[{"filePath":"/p/a.js","messages":[{"ruleId":"eqeqeq","severity":1,"message":"Expected ==="}]}]')],
    ),
    "sql_error": (
        [lines("Parse error near line 3: no such column: nme"),
         lines('ERROR:  relation "missing_orders" does not exist', "LINE 1: select * from missing_orders")],
        [lines("1|connection refused", "2|Segmentation fault in worker", "id|last_error",
               "0 rows with error status")],
    ),
    "php_fatal_error": (
        [lines("PHP Fatal error:  Uncaught Error: Call to undefined function format_price() in /app/x.php:2")],
        [lines("PHP Warning:  Undefined variable $name in /app/warning.php on line 4")],
    ),
    "ruby_exception": (
        [lines("rb/nomethod.rb:2:in `greet': undefined method `upcase' for nil:NilClass (NoMethodError)",
               "\tfrom rb/nomethod.rb:5:in `<main>'")],
        [lines("rb/nomethod.rb:2:in `greet': warning: (NoMethodError) is rescued below", "Syntax OK")],
    ),
    "perl_runtime_error": (
        [lines("Illegal division by zero at pl/div.pl line 5.")],
        [lines("Use of uninitialized value in concatenation (.) or string at pl/warn.pl line 7.", "errors: 0")],
    ),
}


def test_at_least_22_patterns_with_unique_names() -> None:
    assert len(PATTERNS) >= 22
    names = [pattern.name for pattern in PATTERNS]
    assert len(names) == len(set(names))


def test_every_pattern_has_cases() -> None:
    assert set(CASES) == {pattern.name for pattern in PATTERNS}
    for name, (positives, negatives) in CASES.items():
        assert positives and negatives, name


@pytest.mark.parametrize("pattern", PATTERNS, ids=lambda p: p.name)
def test_pattern_is_documented_and_well_formed(pattern: ErrorPattern) -> None:
    assert pattern.suggestion and len(pattern.suggestion) <= 120
    assert pattern.error_class
    assert all(needle == needle.lower() for needle in pattern.needles)
    assert f"`{pattern.name}`" in DOCS.read_text(encoding="utf-8")


@pytest.mark.parametrize("pattern", PATTERNS, ids=lambda p: p.name)
def test_pattern_positive(pattern: ErrorPattern) -> None:
    for text in CASES[pattern.name][0]:
        assert pattern.search(text) is not None, text
        result = scan(text)
        assert result.is_error, text
        assert result.pattern == pattern.name, (text, result.pattern)
        assert result.error_class == pattern.error_class
        assert result.suggestion == pattern.suggestion
        assert result.message and "\n" not in result.message
        # a failing exit code never loses the class the text names
        assert scan(text, 1).pattern == pattern.name
        # with exit 0 only the trusted shapes may still call it an error
        assert scan(text, 0).is_error is pattern.overrides_success, text


@pytest.mark.parametrize("pattern", PATTERNS, ids=lambda p: p.name)
def test_pattern_near_miss(pattern: ErrorPattern) -> None:
    for text in CASES[pattern.name][1]:
        assert pattern.search(text) is None, text
        assert not scan(text).is_error, (text, scan(text).pattern)
        assert not scan(text, 0).is_error, text


# --- exit status semantics ---


def test_nonzero_exit_is_an_error_even_with_quiet_output() -> None:
    result = scan("Expecting ',' delimiter: line 2 column 15 (char 28)\n", 1)
    assert result.is_error
    assert result.error_class == "exit_status"
    assert result.pattern == "exit_status"
    assert result.message == "Expecting ',' delimiter: line 2 column 15 (char 28)"
    assert result.suggestion


def test_nonzero_exit_without_output() -> None:
    result = scan("", 1)
    assert result.is_error and result.pattern == "exit_status"
    assert result.message == "exited with code 1"


@pytest.mark.parametrize(
    ("code", "error_class"),
    [(124, "timeout"), (126, "permission"), (127, "missing_command"), (137, "resource"), (139, "crash")],
)
def test_shell_exit_codes_name_the_class(code: int, error_class: str) -> None:
    result = scan("", code)
    assert result.is_error and result.error_class == error_class and result.pattern == "exit_status"


def test_exit_zero_ignores_weak_patterns() -> None:
    text = "mailer: send failed: Connection refused\n"
    assert scan(text, None).is_error  # text alone looks like an error
    assert not scan(text, 0).is_error  # but the command succeeded


@pytest.mark.parametrize(
    "text",
    [
        "2026-11-20T10:42:13Z ERROR [mailer] send failed: Connection refused\n",
        "12:2026-11-20 10:42:13,120 ERROR worker: job 8 failed: TimeoutError: read timed out\n",
        "[10:42:13] WARN health check failed: connect ECONNREFUSED 10.0.0.5:8080\n",
        "- Fixed: worker exited with code 137 (OOM killed) on large imports.\n",
        "| E003 | HTTP 503 from the billing service |\n",
        "3f2a9c1 Fix crash on ECONNRESET in the client\n",
        "upload failed: Connection reset by peer; retrying in 1s\nupload ok\n",
        "stderr | ok.test.js > logs\nError: cache unavailable\n\n Test Files  1 passed (1)\n"
        "      Tests  1 passed (1)\n",
    ],
    ids=["log-iso", "grep-n-log", "log-time", "changelog", "doc-table", "commit-subject", "retry", "passing-run"],
)
def test_without_exit_code_quoted_errors_are_content(text: str) -> None:
    """Logs, documents, commit subjects, retry notices and a passing run's output mention errors in passing."""
    assert not scan(text).is_error, scan(text).pattern
    assert scan(text, 1).is_error  # a failing exit status still decides


def test_exit_zero_with_piped_pytest_failure_is_an_error() -> None:
    text = lines("FAILED tests/test_calc.py::test_add - assert -1 == 5", "1 failed, 2 passed in 0.05s")
    result = scan(text, 0, command="pytest -q 2>&1 | tail -n 5")
    assert result.is_error and result.error_class == "test_failure"


def test_exit_zero_traceback_overrides_but_not_for_content_viewers() -> None:
    text = PY_TRACE_HEAD + lines("KeyError: 'x'")
    assert scan(text, 0).is_error
    assert scan(text, 0, command="python3 job.py || true").is_error
    assert not scan(text, 0, command="cat logs/worker.log").is_error
    assert not scan(text, 0, command="cd srv && grep -A5 Traceback logs/*.log | head -50").is_error
    assert not scan(text, 0, command="git log -p -1").is_error
    assert scan(text, 0, command="cat job.py | python3 -").is_error


def test_exit_one_of_grep_and_diff_is_an_answer() -> None:
    assert not scan("", 1, command="grep -rn TODO src/").is_error
    assert not scan("", 1, command="cat a.txt | grep -q needle").is_error
    assert not scan("1c1\n< a\n---\n> b\n", 1, command="diff a.txt b.txt").is_error
    assert scan("grep: src/: No such file or directory\n", 2, command="grep -rn TODO src/").is_error
    assert scan("", 1, command="grep -rn TODO src/ && make").is_error


def test_no_exit_code_lets_patterns_decide() -> None:
    assert scan("bash: line 1: foo: command not found\n").is_error
    assert not scan("all good\n").is_error


# --- false positives the reference warns about ---

NOT_ERRORS = [
    lines("CHANGELOG.md", "error-handling.md", "errors.py", "failed-jobs.log", "test_error_cases.py"),
    lines("./docs/error-handling.md", "./src/errors.py", "./tests/test_error_cases.py"),
    lines("total 8", "-rw-r--r-- 1 root root 51 Nov 22 02:41 error-handling.md",
          "-rw-r--r-- 1 root root 12 Nov 22 02:41 errors.py"),
    lines("tests/test_errors.py::test_failed_login PASSED", "tests/test_errors.py::test_handles_error PASSED"),
    lines("test_handles_error (tests.test_api.ApiTests.test_handles_error) ... ok", "OK"),
    lines("Checked 42 links: 0 errors, 0 warnings", "0 failed", "errors: 0", "Found 0 errors", "no errors found"),
    lines("  } catch (error) {", '    console.error("request failed", error);',
          '  fs.appendFileSync("error.log", String(err));'),
    lines('src/server.js:7:    console.error("request failed", error);', "src/server.js:6:  } catch (error) {"),
    lines("ERROR:root:cache miss for key error_page"),
    lines("test result: ok. 12 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out"),
    lines("# tests 2", "# pass 2", "# fail 0"),
]


@pytest.mark.parametrize("text", NOT_ERRORS)
def test_no_false_positives(text: str) -> None:
    assert not scan(text).is_error, scan(text)
    assert not scan(text, 0).is_error


def test_pure_directory_listing_is_skipped_even_when_a_name_matches() -> None:
    listing = lines("error-handling.md", "Killed", "errors.py")
    assert scan("Killed\n").is_error  # the same word alone is the shell reporting a kill
    assert not scan(listing).is_error
    assert scan(listing, 2).is_error  # the exit code still wins


# --- result shape ---


def test_result_to_json() -> None:
    result = scan(PY_TRACE_HEAD + lines("ZeroDivisionError: division by zero"), 1, command="python3 main.py")
    doc = result.to_json()
    assert json.loads(json.dumps(doc)) == doc
    assert doc == {
        "is_error": True,
        "error_class": "python_exception",
        "pattern": "python_traceback",
        "message": "ZeroDivisionError: division by zero",
        "suggestion": result.suggestion,
        "exit_code": 1,
        "file_refs": [{"file": "/srv/app/main.py", "line": 8}, {"file": "/srv/app/main.py", "line": 12}],
        "stack_trace": result.stack_trace,
    }
    assert result.stack_trace is not None and result.stack_trace.startswith("Traceback")


def test_no_error_result() -> None:
    result = scan("ok\n", 0)
    assert result == ScanResult(False, None, None, "", None, 0, (), None)
    assert result.to_json()["file_refs"] == []


def test_values_are_immutable_and_hashable() -> None:
    ref = FileRef("a.py", 1)
    with pytest.raises(AttributeError):
        ref.line = 2  # type: ignore[misc]
    assert {ref, FileRef("a.py", 1)} == {ref}
    assert repr(ref) == "FileRef(file='a.py', line=1, column=None)"


def test_message_is_one_bounded_line() -> None:
    result = scan("error: " + "x" * 5000 + "\n", 1)
    assert result.pattern == "error_line"
    assert len(result.message) <= MAX_MESSAGE_CHARS


# --- file references ---


def test_file_ref_to_json_omits_missing_column() -> None:
    assert FileRef("a.py", 3).to_json() == {"file": "a.py", "line": 3}
    assert FileRef("a.py", 3, 7).to_json() == {"file": "a.py", "line": 3, "column": 7}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("path.py:42:10: E501 line too long", [FileRef("path.py", 42, 10)]),
        ("error: boom\n --> src/main.rs:3:5", [FileRef("src/main.rs", 3, 5)]),
        ('  File "x.py", line 42, in main', [FileRef("x.py", 42)]),
        ("    at module.py:156", [FileRef("module.py", 156)]),
        ("    at Object.<anonymous> (/app/src/index.js:10:15)", [FileRef("/app/src/index.js", 10, 15)]),
        ("src/a.ts(12,5): error TS2322: nope", [FileRef("src/a.ts", 12, 5)]),
        ("tests/test_foo.py:25: AssertionError", [FileRef("tests/test_foo.py", 25)]),
        ("\tat Main.main(Main.java:10)", [FileRef("Main.java", 10)]),
        ("make: *** [Makefile:2: build] Error 1", [FileRef("Makefile", 2)]),
    ],
)
def test_extract_file_refs_formats(text: str, expected: list[FileRef]) -> None:
    assert extract_file_refs(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "GET http://host:8080/health and https://example.com:8443/x",
        "2026-11-20T10:42:13Z and 10:42:13.123 and 127.0.0.1:59999",
        "connecting to api.example.com:443",
        "at node:internal/modules/cjs/loader:1228:15 and [eval]:1:1",
        '  File "<string>", line 1, in <module>',
        "tests/test_x.py::test_a PASSED",
        "x.py:0: nothing",
    ],
)
def test_extract_file_refs_ignores_non_refs(text: str) -> None:
    assert extract_file_refs(text) == []


def test_extract_file_refs_dedupes_keeps_order_and_caps() -> None:
    text = "b.py:2\na.py:1\nb.py:2\n" + "".join(f"f{i}.py:{i + 1}\n" for i in range(50))
    refs = extract_file_refs(text, limit=5)
    assert refs == [FileRef("b.py", 2), FileRef("a.py", 1), FileRef("f0.py", 1), FileRef("f1.py", 2),
                    FileRef("f2.py", 3)]
    assert len(extract_file_refs(text)) == 20


# --- stack traces ---


def test_python_stack_trace_keeps_the_whole_chain() -> None:
    first = lines("Traceback (most recent call last):", '  File "a.py", line 6, in parse', "    json.loads(raw)",
                  "json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)")
    second = lines("Traceback (most recent call last):", '  File "a.py", line 11, in <module>', '    parse("{")',
                   "ValueError: invalid payload")
    text = "starting\n" + first + "\nThe above exception was the direct cause of the following exception:\n\n" + second
    trace = extract_stack_trace(text)
    assert trace is not None
    assert trace.startswith("Traceback") and trace.endswith("ValueError: invalid payload")
    assert "JSONDecodeError" in trace and "starting" not in trace


def test_js_stack_trace_starts_at_the_error_line() -> None:
    text = lines("/app/src/app.js:2", "  return user.name;", "              ^", "",
                 "TypeError: Cannot read properties of undefined (reading 'name')",
                 "    at formatUser (/app/src/app.js:2:15)", "    at Object.<anonymous> (/app/src/app.js:6:1)",
                 "", "Node.js v20.20.2")
    trace = extract_stack_trace(text)
    assert trace == lines("TypeError: Cannot read properties of undefined (reading 'name')",
                          "    at formatUser (/app/src/app.js:2:15)",
                          "    at Object.<anonymous> (/app/src/app.js:6:1)").rstrip()


def test_java_stack_trace_with_cause() -> None:
    text = lines('Exception in thread "main" java.lang.IllegalStateException: boom', "\tat App.run(App.java:9)",
                 "Caused by: java.io.IOException: disk", "\tat App.load(App.java:20)", "\t... 1 more")
    trace = extract_stack_trace(text)
    assert trace is not None and trace.startswith("Exception in thread") and trace.endswith("... 1 more")


def test_rust_panic_with_backtrace() -> None:
    text = lines("thread 'main' (7001) panicked at src/main.rs:6:37:", "called `Option::unwrap()` on a `None` value",
                 "stack backtrace:", "   0: core::panicking::panic", "   1: app::main", "", "after")
    trace = extract_stack_trace(text)
    assert trace is not None and trace.startswith("thread 'main'") and trace.endswith("1: app::main")


def test_go_panic_trace() -> None:
    text = lines("panic: boom", "", "goroutine 1 [running]:", "main.main()", "\t/app/main.go:9 +0x1d",
                 "exit status 2")
    trace = extract_stack_trace(text)
    assert trace is not None and trace.startswith("panic: boom") and "main.go:9" in trace


def test_pytest_failures_section_is_the_stack_trace() -> None:
    output = json.loads((CORPUS / "pytest_fail_verbose.json").read_text())["output"]
    trace = extract_stack_trace(output)
    assert trace is not None and trace.startswith("=" * 35 + " FAILURES " + "=" * 35)
    assert "E       KeyError: 'pear'" in trace and trace.endswith("tests/test_calc.py:15: KeyError")
    assert "short test summary info" not in trace and "test_add_zero PASSED" not in trace
    errors = json.loads((CORPUS / "pytest_collection_error.json").read_text())["output"]
    assert str(extract_stack_trace(errors)).lstrip("=").startswith(" ERRORS ")


def test_no_stack_trace() -> None:
    assert extract_stack_trace("cat: x: No such file or directory\n") is None


def test_stack_trace_is_bounded_and_keeps_both_ends() -> None:
    frames = "".join(f'  File "m{i}.py", line {i + 1}, in f{i}\n    call()\n' for i in range(2000))
    text = "Traceback (most recent call last):\n" + frames + "RecursionError: maximum recursion depth exceeded\n"
    trace = extract_stack_trace(text)
    assert trace is not None and len(trace) <= MAX_STACK_CHARS
    assert trace.startswith("Traceback (most recent call last):")
    assert trace.endswith("RecursionError: maximum recursion depth exceeded")
    assert "chars omitted" in trace


# --- normalisation ---


def test_normalise_error_groups_the_same_failure() -> None:
    a = "2026-11-20T10:42:13Z Error at 0x7f3a2b10 in /tmp/pytest-of-ada/pytest-3/x.py:42:10 (pid 4242) took 0.66s"
    b = "2026-11-21 08:01:02 Error at 0x55aa0000 in /tmp/pytest-of-bob/pytest-9/x.py:57:3  (pid 77)  took 12s"
    assert normalise_error(a) == normalise_error(b)
    assert normalise_error("KeyError: 'Database'\n\n") == "keyerror: 'database'"
    assert normalise_error('File "app.py", line 12') == normalise_error('File "app.py", line 99')
    assert normalise_error("KeyError: 'a'") != normalise_error("KeyError: 'b'")


def test_normalise_error_strips_ids_and_hashes() -> None:
    text = "job 7f9c2ba4e88f827d616045507605853ed73b8093 failed for 123e4567-e89b-12d3-a456-426614174000 id 1234567"
    assert normalise_error(text) == "job <hash> failed for <uuid> id <n>"


def test_normalise_error_strips_ip_addresses_and_ports() -> None:
    first = normalise_error("ConnectionRefusedError: connect to 10.0.0.7:5432 failed")
    second = normalise_error("ConnectionRefusedError: connect to 192.168.1.20:5433 failed")
    assert first == second == "connectionrefusederror: connect to <ip>:<n> failed"


# --- bounded cost ---

FILLER_LINE = "INFO request handled path=/api/v1/items status=200 duration=3ms\n"


def big_output(size: int, *, start: str = "", middle: str = "", end: str = "") -> str:
    filler = FILLER_LINE * (size // len(FILLER_LINE) + 1)
    half = size // 2
    return start + filler[:half] + middle + filler[half:size] + end


def test_huge_output_error_at_the_end_is_found() -> None:
    text = big_output(10_000_000, end=PY_TRACE_HEAD + lines("KeyError: 'database'"))
    result = scan(text, 1)
    assert result.pattern == "key_error" and result.message == "KeyError: 'database'"
    assert result.file_refs[0] == FileRef("/srv/app/main.py", 8)  # the innermost frame comes first
    assert scan(text).pattern == "key_error"


def test_huge_output_only_the_budget_is_scanned() -> None:
    error = "bash: line 1: frobnicate: command not found\n"
    assert not scan(big_output(10_000_000, middle=error)).is_error  # outside head and tail: never looked at
    assert scan(big_output(10_000_000, start=error)).pattern == "command_not_found"  # inside the head
    tail_budget = MAX_SCAN_CHARS - HEAD_CHARS - len(FILLER_LINE)
    inside = big_output(1_000_000, end=error + FILLER_LINE * (tail_budget // len(FILLER_LINE) - 2))
    outside = big_output(1_000_000, end=error + FILLER_LINE * (tail_budget // len(FILLER_LINE) + 2))
    assert scan(inside).is_error
    assert not scan(outside).is_error


@pytest.mark.parametrize(
    "text",
    [
        "a" * 200_000,
        ":" * 200_000,
        "a.py:" * 40_000,
        "Traceback (most recent call last):\n" + "  x\n" * 40_000,
        "Error: x\n    at " * 20_000,
        "error exception failed fatal timeout rate exit http status " * 4_000,
        "'\"a" * 60_000,
        "src/a.b.c.d" * 20_000,
    ],
    ids=["letters", "colons", "refs", "endless-traceback", "js-frames", "needles", "quotes", "dotted"],
)
def test_pathological_inputs_complete(text: str) -> None:
    for code in (None, 0, 1):
        result = scan(text, code)
        assert result.is_error is (code == 1 or result.pattern is not None)
    extract_file_refs(text[:MAX_SCAN_CHARS])
    extract_stack_trace(text[:MAX_SCAN_CHARS])
    normalise_error(text)


# --- the corpus of real tool outputs ---


def load_corpus() -> list[tuple[str, dict[str, object]]]:
    cases = []
    for path in sorted(CORPUS.glob("*.json")):
        cases.append((path.stem, json.loads(path.read_text(encoding="utf-8"))))
    return cases


def precision_recall(pairs: list[tuple[bool, bool]]) -> tuple[float, float]:
    tp = sum(1 for expected, got in pairs if expected and got)
    fp = sum(1 for expected, got in pairs if not expected and got)
    fn = sum(1 for expected, got in pairs if expected and not got)
    return tp / ((tp + fp) or 1), tp / ((tp + fn) or 1)


BASE_FIELDS = {"command", "exit_code", "output", "expected_error", "expected_class"}
TOOLCHAIN_FIELDS = BASE_FIELDS | {"expected_text_error", "primary_refs", "toolchain", "split"}


def test_corpus_is_well_formed() -> None:
    cases = load_corpus()
    assert sum(1 for _, case in cases if case["expected_error"]) >= 20
    assert sum(1 for _, case in cases if not case["expected_error"]) >= 20
    for name, case in cases:
        assert set(case) in (BASE_FIELDS, TOOLCHAIN_FIELDS), name
        assert isinstance(case["output"], str) and len(case["output"]) < 20_100, name
        assert isinstance(case["exit_code"], int), name
        if set(case) == TOOLCHAIN_FIELDS:
            assert case["split"] in ("tune", "heldout"), name
            assert case["expected_text_error"] in (True, False, None), name
            assert isinstance(case["primary_refs"], list), name
            assert "/tmp/" not in str(case["output"]), name  # paths are neutral (/home/dev/proj)
    toolchain = [case for _, case in cases if set(case) == TOOLCHAIN_FIELDS]
    assert len(toolchain) >= 150
    assert len({case["toolchain"] for case in toolchain}) >= 12
    assert 0.25 <= sum(1 for case in toolchain if not case["expected_error"]) / len(toolchain) <= 0.45
    assert 0.25 <= sum(1 for case in toolchain if case["split"] == "heldout") / len(toolchain) <= 0.4


def test_corpus_targets() -> None:
    """The figures the issue asks for, on the whole corpus; the held-out split is printed beside them."""
    cases = load_corpus()
    whole = corpus_score.score(cases)
    heldout = corpus_score.score([c for c in cases if corpus_score.split_of(c[1]) == "heldout"])
    tune = corpus_score.score([c for c in cases if corpus_score.split_of(c[1]) == "tune"])
    print("\nerror-scan corpus")
    for label, figures in (("whole", whole), ("tune", tune), ("heldout", heldout)):
        print(corpus_score.line(label, figures))
    report = corpus_score.line("whole", whole), whole["misses"]
    assert whole["precision"] >= 0.98 and whole["recall"] >= 0.98, report
    assert whole["text_precision"] >= 0.95 and whole["text_recall"] >= 0.9, report
    assert whole["class_accuracy"] >= 0.9, report
    assert whole["ref_recall"] >= 0.9, report


def test_corpus_score_matches_paths_by_suffix() -> None:
    assert corpus_score.ref_matches("lint/src/a.js:3", FileRef("/home/dev/proj/lint/src/a.js", 3, 7))
    assert corpus_score.ref_matches("jv/src/test/java/app/CalcTest.java:10", FileRef("CalcTest.java", 10))
    assert not corpus_score.ref_matches("lint/src/a.js:3", FileRef("/home/dev/proj/lint/src/ba.js", 3))
    assert not corpus_score.ref_matches("lint/src/a.js:3", FileRef("lint/src/a.js", 4))
