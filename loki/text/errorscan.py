"""Decide whether a tool's output is an error, classify it and pull out where it happened.

Pure and stdlib-only: the PostToolUse hooks import this on every tool call, so it imports ``re`` (which
``json`` has loaded already) and nothing else. The value classes are plain slotted classes rather than
dataclasses because ``dataclasses`` alone costs ~10 ms of import on top of ``re``.

Decision rules (documented in docs/error-patterns.md):

* A non-zero exit code is an error, whatever the text says. The text only names the class.
* Exit code 0 is a success unless a pattern marked ``overrides_success`` matches: output shapes that only a
  failing tool prints and that a pipe (``pytest | tail``) commonly hides the status of.
* Without an exit code (non-Bash tools) the patterns decide, and a pure directory listing never counts.
* Patterns are structural (anchored at a line start or after ``: ``), never the bare word "error", so file
  names, passing test names and ``0 errors`` summaries do not match.

Cost is bounded: at most ``MAX_SCAN_CHARS`` of the output are looked at (mostly its tail, where errors
are), every regex is compiled at most once (on first use, which keeps the hook's import cheap), and a
pattern's regex only runs when one of its literal needles occurs in the text, so a clean output costs a
few substring searches.
"""

from __future__ import annotations

import re

from loki.text.lazyre import LazyRegex

TYPE_CHECKING = False  # typing costs ~8 ms of import; only the type checker needs it
if TYPE_CHECKING:
    from typing import Any

MAX_SCAN_CHARS = 64 * 1024
"""Most characters of one output that are ever looked at."""

HEAD_CHARS = 4 * 1024
"""Part of the budget spent on the start: some tools print the fatal line first and then pages of noise."""

MAX_MESSAGE_CHARS = 300
MAX_STACK_CHARS = 4000
_STACK_HEAD_CHARS = 1000
_REF_CONTEXT_BEFORE = 2048
_REF_CONTEXT_AFTER = 8192
_NORMALISE_INPUT_CHARS = 4000


class _Frozen:
    """Immutable value object; equality, hashing and repr come from ``_fields``."""

    __slots__: tuple[str, ...] = ()
    _fields: tuple[str, ...] = ()

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self._fields)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, _Frozen)
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash((type(self).__name__, *self._values()))

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._fields)
        return f"{type(self).__name__}({fields})"




class ErrorPattern(_Frozen):
    """One documented error shape.

    ``needles`` are lower-case substrings of which at least one must occur in the (lower-cased) output
    before the regex is tried; they are what keeps a scan of clean output cheap. ``overrides_success``
    marks the few shapes trusted to turn an exit code 0 into an error. ``regex`` may be given as a
    compiled pattern or as its source, which is then compiled (once) on first use.
    """

    __slots__ = ("_regex", "error_class", "name", "needles", "overrides_success", "suggestion")
    _fields = ("name", "error_class", "regex", "suggestion", "needles", "overrides_success")
    name: str
    error_class: str
    suggestion: str
    needles: tuple[str, ...]
    overrides_success: bool
    _regex: re.Pattern[str] | LazyRegex

    def __init__(
        self,
        name: str,
        error_class: str,
        regex: re.Pattern[str] | str,
        suggestion: str,
        needles: tuple[str, ...] = (),
        overrides_success: bool = False,
    ) -> None:
        set_ = object.__setattr__
        set_(self, "name", name)
        set_(self, "error_class", error_class)
        set_(self, "_regex", LazyRegex(regex, re.MULTILINE) if isinstance(regex, str) else regex)
        set_(self, "suggestion", suggestion)
        set_(self, "needles", tuple(needle.lower() for needle in needles))
        set_(self, "overrides_success", overrides_success)

    @property
    def regex(self) -> re.Pattern[str]:
        compiled = self._regex
        return compiled.get() if isinstance(compiled, LazyRegex) else compiled

    def search(self, text: str, lowered: str | None = None) -> re.Match[str] | None:
        """The first match in ``text``; ``lowered`` (``text.lower()``) lets the needles skip the regex."""
        if self.needles:
            haystack = text.lower() if lowered is None else lowered
            if not any(needle in haystack for needle in self.needles):
                return None
        return self.regex.search(text)


class FileRef(_Frozen):
    __slots__ = ("column", "file", "line")
    _fields = ("file", "line", "column")
    file: str
    line: int
    column: int | None

    def __init__(self, file: str, line: int, column: int | None = None) -> None:
        object.__setattr__(self, "file", file)
        object.__setattr__(self, "line", line)
        object.__setattr__(self, "column", column)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"file": self.file, "line": self.line}
        if self.column is not None:
            out["column"] = self.column
        return out


class ScanResult(_Frozen):
    __slots__ = (
        "error_class",
        "exit_code",
        "file_refs",
        "is_error",
        "message",
        "pattern",
        "stack_trace",
        "suggestion",
    )
    _fields = (
        "is_error", "error_class", "pattern", "message", "suggestion", "exit_code", "file_refs", "stack_trace",
    )
    is_error: bool
    error_class: str | None
    pattern: str | None
    message: str
    suggestion: str | None
    exit_code: int | None
    file_refs: tuple[FileRef, ...]
    stack_trace: str | None

    def __init__(
        self,
        is_error: bool,
        error_class: str | None,
        pattern: str | None,
        message: str,
        suggestion: str | None,
        exit_code: int | None,
        file_refs: tuple[FileRef, ...] = (),
        stack_trace: str | None = None,
    ) -> None:
        set_ = object.__setattr__
        set_(self, "is_error", is_error)
        set_(self, "error_class", error_class)
        set_(self, "pattern", pattern)
        set_(self, "message", message)
        set_(self, "suggestion", suggestion)
        set_(self, "exit_code", exit_code)
        set_(self, "file_refs", tuple(file_refs))
        set_(self, "stack_trace", stack_trace)

    def to_json(self) -> dict[str, Any]:
        return {
            "is_error": self.is_error,
            "error_class": self.error_class,
            "pattern": self.pattern,
            "message": self.message,
            "suggestion": self.suggestion,
            "exit_code": self.exit_code,
            "file_refs": [ref.to_json() for ref in self.file_refs],
            "stack_trace": self.stack_trace,
        }


def _p(
    name: str,
    error_class: str,
    regex: str,
    suggestion: str,
    needles: tuple[str, ...],
    *,
    overrides_success: bool = False,
) -> ErrorPattern:
    return ErrorPattern(name, error_class, regex, suggestion, needles, overrides_success)


# Order matters: the first pattern that matches names the error, so the most specific shapes come first.
# Test runners lead (a failing test run is a test failure even when its log shows a KeyError), then crashes,
# compiler diagnostics, the environment (missing commands and files, permissions, network, resources),
# build tools, language exceptions, and last the generic "error:"/"exit code N" lines.
PATTERNS: tuple[ErrorPattern, ...] = (
    # --- test runners ---
    _p(
        "test_timeout", "timeout",
        r"Exceeded timeout of \d+ ?ms for a (?:test|hook)|^[ \t]*(?:Error: )?Test timed out in \d+ ?ms"
        r"|^panic: test timed out after |Error: Timeout of \d+ ?ms exceeded",
        "A test hit its time limit: find what it waits for (unresolved promise, missing done(), hung call).",
        ("exceeded timeout of", "timed out in", "test timed out after", "timeout of"), overrides_success=True,
    ),
    _p(
        "surefire_failure", "test_failure",
        r"Tests run: \d+, Failures: (?:[1-9]\d*, Errors: \d+|\d+, Errors: [1-9])|<<< (?:FAILURE|ERROR)!"
        r"|There are test failures",
        "Run the failing test alone (mvn test -Dtest=Class#method) and fix what its first own frame shows.",
        ("tests run:", "<<< failure!", "<<< error!", "there are test failures"), overrides_success=True,
    ),
    _p(
        "rspec_failure", "test_failure",
        r"^\d+ examples?, [1-9]\d* failures?|^rspec \./\S+:\d+ #",
        "Rerun the failing example (rspec path:line) and fix what its Failure/Error block shows.",
        ("failure", "rspec ./"), overrides_success=True,
    ),
    _p(
        "ctest_failure", "test_failure",
        r"^The following tests FAILED:|tests passed, [1-9]\d* tests? failed out of",
        "Rerun the failing test with ctest -R name --output-on-failure and fix what it prints.",
        ("the following tests failed", "tests failed out of"), overrides_success=True,
    ),
    _p(
        "tap_harness_failure", "test_failure",
        r"^Result: FAIL$|^Failed [1-9]\d*/\d+ subtests|^#[ \t]+Failed test ",
        "Rerun the failing test file verbosely (prove -v file.t) and fix the test it reports.",
        ("result: fail", "subtests", "failed test"), overrides_success=True,
    ),
    _p(
        "pytest_failed_test", "test_failure",
        r"^(?:FAILED|ERROR) [^\s:]+\.py\b",
        "Run the failing test alone (pytest path::test -x) and fix the code or the test it names.",
        ("failed ", "error "), overrides_success=True,
    ),
    _p(
        "pytest_summary", "test_failure",
        r"^=*[ \t]*(?:\d+ [a-z]+(?: [a-z]+)?, )*[1-9]\d* (?:failed|errors?)\b[^\n]* in \d+(?:\.\d+)?s\b"
        r"|^[^\s:]+\.py::\S+ (?:FAILED|ERROR)\b"
        r"|^!+ Interrupted: [1-9]\d* errors? during collection",
        "Read the first failure in the pytest output and rerun just that test with -x.",
        ("failed", "error"), overrides_success=True,
    ),
    _p(
        "unittest_failure", "test_failure",
        r"^FAILED \((?:failures|errors)=[1-9]|^(?:FAIL|ERROR): \w+ \(",
        "Rerun the failing unittest case by name and fix the assertion it reports.",
        ("failed (", "fail: ", "error: "), overrides_success=True,
    ),
    _p(
        "jest_failure", "test_failure",
        r"^Tests:[ \t]+(?:\d+ [a-z]+, )*[1-9]\d* failed"
        r"|^[ \t]*FAIL[ \t]+\S+\.(?:test|spec)\.[cm]?[jt]sx?\b"
        r"|^[ \t]*● (?!Console\b)[^\n]* › ",
        "Run the failing test file alone (npx jest path -t 'name') and fix what the first ● block shows.",
        ("tests:", "fail", "●"), overrides_success=True,
    ),
    _p(
        "tap_failure", "test_failure",
        r"^not ok \d+\b|^# fail [1-9]|^[ \t]*[1-9]\d* failing$",
        "Rerun the failing test (node --test --test-name-pattern / mocha --grep) and fix its assertion.",
        ("not ok", "# fail", "failing"),
    ),
    _p(
        "cargo_test_failure", "test_failure",
        r"^test result: FAILED\b|^test \S+ \.\.\. FAILED$",
        "Run the failing test with cargo test <name> -- --nocapture and fix the assertion it reports.",
        ("failed",), overrides_success=True,
    ),
    _p(
        "go_test_failure", "test_failure",
        r"^--- FAIL: \S|^FAIL\t\S",
        "Run the failing test with go test -run '^TestName$' -v and fix what it reports.",
        ("--- fail:", "fail\t"),
    ),
    # --- crashes ---
    _p(
        "rust_panic", "panic",
        r"^thread '[^'\n]*'(?: \(\d+\))? panicked at ",
        "Find the unwrap/expect/index at the panic location and handle the None/Err/out-of-range case.",
        ("panicked at",), overrides_success=True,
    ),
    _p(
        "go_panic", "panic",
        r"^panic: [^\n]*\n(?:[^\n]*\n){0,3}?goroutine \d+ \[",
        "Read the first goroutine's top frame and guard the nil pointer, index or type assertion there.",
        ("panic: ",), overrides_success=True,
    ),
    _p(
        "cpp_terminate", "crash",
        r"^terminate called after throwing an instance of |^==\d+==ERROR: \w+Sanitizer: ",
        "The program died on an uncaught C++ exception or a sanitizer report; fix the operation its first frame names.",
        ("terminate called after", "sanitizer: "), overrides_success=True,
    ),
    _p(
        "fatal_python_error", "crash",
        r"^Fatal Python error: ",
        "The interpreter crashed (often in a C extension); run with -X faulthandler and check native deps.",
        ("fatal python error",), overrides_success=True,
    ),
    _p(
        "segmentation_fault", "crash",
        r"^Segmentation fault(?: \(core dumped\))?[ \t]*$|(?::|\d)[ \t]+Segmentation fault\b|\[signal SIGSEGV\b",
        "Rebuild with debug info and run under gdb/valgrind (or -fsanitize=address) to find the bad access.",
        ("segmentation fault", "sigsegv"), overrides_success=True,
    ),
    _p(
        "core_dumped", "crash",
        r"\(core dumped\)",
        "The process crashed on a signal; run it under a debugger or with sanitizers to find where.",
        ("core dumped",), overrides_success=True,
    ),
    _p(
        "fatal_signal", "crash",
        r"^(?:Aborted|Bus error|Illegal instruction|Floating point exception|Abort trap: 6)"
        r"(?: \(core dumped\))?[ \t]*$"
        r"|\d[ \t]+(?:Aborted|Bus error|Illegal instruction|Floating point exception)\b"
        r"|^[^\n]*: Assertion `[^\n]*' failed\.$",
        "The process aborted (failed assert or fatal signal); check the assertion or the last operation.",
        ("aborted", "bus error", "illegal instruction", "floating point exception", "abort trap", "assertion `"),
        overrides_success=True,
    ),
    # --- compiler diagnostics ---
    _p(
        "rustc_error", "compile_error",
        r"^error\[E\d{4}\]: ",
        "Fix the first rustc error at the --> location; rustc --explain EXXXX describes it.",
        ("error[e",), overrides_success=True,
    ),
    _p(
        "typescript_error", "compile_error",
        r"error TS\d{3,5}: ",
        "Fix the type error at the reported file(line,col); rerun tsc --noEmit to confirm.",
        ("error ts",), overrides_success=True,
    ),
    _p(
        "maven_compile_error", "compile_error",
        r"^\[ERROR\] \S+\.(?:java|kt|scala|groovy):\[\d+,\d+\] |^\[ERROR\] COMPILATION ERROR",
        "Open the first file:[line,col] Maven's compiler reports and fix that error before the rest.",
        ("[error]",), overrides_success=True,
    ),
    _p(
        "clippy_lint", "lint",
        r"^error: [^\n]*\n(?:[^\n]*\n){0,15}?[ \t]*= help: for further information visit "
        r"https://rust-lang\.github\.io/rust-clippy/",
        "Fix the clippy lint at the --> location (its help line shows how), or allow it explicitly if intended.",
        ("rust-clippy",),
    ),
    _p(
        "shellcheck", "lint",
        r"^In \S+ line \d+:\n|^[^\s:]+:\d+:\d+: (?:note|info|style|warning|error): [^\n]*\[SC\d{4}\]$",
        "Fix the shellcheck finding at each line (the SC code's wiki page explains it), usually by quoting.",
        (" line ", "[sc"),
    ),
    _p(
        "go_compile_error", "compile_error",
        r"^(?:\./)?[^\s:]+\.go:\d+:\d+: (?!cannot find module|no required module)",
        "Fix the first Go compile error at the reported file:line:col; go vet explains more.",
        (".go:",),
    ),
    _p(
        "compiler_diagnostic", "compile_error",
        r"^[^\s:][^:\n]*:\d+:(?:\d+:)? (?:fatal )?error: ",
        "Open the first file:line the compiler/type checker reports and fix that error before the rest.",
        (": error: ", ": fatal error: "), overrides_success=True,
    ),
    _p(
        "linker_error", "compile_error",
        r"undefined reference to [`']|\bld returned \d+ exit status|^Undefined symbols for architecture"
        r"|unresolved external symbol|cannot find -l\w",
        "Link the library or object that defines the missing symbol, or fix its declaration/spelling.",
        ("undefined reference", "ld returned", "undefined symbols", "unresolved external", "cannot find -l"),
    ),
    _p(
        "lint_violation", "lint",
        r"^[A-Z]{1,4}\d{3,4}(?: \[\*\])? [^\n]*\n[ \t]*--> \S+:\d+:\d+"
        r"|^[^\s:]+\.py:\d+:\d+: [A-Z]{1,4}\d{3,4}\b"
        r"|^[ \t]+\d+:\d+[ \t]+error[ \t]+\S|^\u2716 [1-9]\d* problems? \([1-9]|^ESLint found too many warnings",
        "Fix the reported lint rule at each location, or run the linter's --fix when it offers one.",
        ("-->", ".py:", "error ", "problem", "eslint found"),
    ),
    _p(
        "eslint_json_report", "lint",
        r"\"ruleId\":(?:\"[^\"\n]*\"|null),\"severity\":2,\"message\":",
        "Fix the reported lint rule at each location, or run the linter's --fix when it offers one.",
        ("\"severity\":2",), overrides_success=True,
    ),
    _p(
        "error_count_summary", "compile_error",
        r"^Found [1-9]\d* errors?\b|^[1-9]\d* errors?(?: generated)?\.?$|^error: aborting due to ",
        "The tool reported errors above this summary; fix the first one listed.",
        ("found ", " error", "aborting due to"),
    ),
    # --- environment ---
    _p(
        "command_not_found", "missing_command",
        r"(?:^|: )command not found\b|^[\w./-]+: \d+: [^\n:]+: not found$|spawn \S+ ENOENT\b"
        r"|is not recognized as an internal or external command|^make(?:\[\d+\])?: \*\*\* [^\n]*Error 127$",
        "Check the command name; install it or use the project's wrapper (npx, python -m, .venv/bin).",
        ("not found", "enoent", "not recognized", "error 127"),
    ),
    _p(
        "auth_failure", "auth",
        r"Permission denied \(publickey|\b401 Unauthorized\b|\b403 Forbidden\b|HTTP(?:/[\d.]+)? 40[13]\b"
        r"|[Ss]tatus(?: code)?:? 40[13]\b|[Aa]uthentication failed|Bad credentials\b"
        r"|[Ii]nvalid (?:API key|api[_ ]key|x-api-key|token)\b|could not read Username for",
        "Check the credentials/token for this service (set, unexpired, right scope); do not retry blindly.",
        ("publickey", "401", "403", "authentication failed", "bad credentials", "invalid", "username for"),
    ),
    _p(
        "permission_denied", "permission",
        r"(?i:(?:^|: |\] |\) )permission denied\b)|Operation not permitted\b",
        "Check ownership and mode of the path (ls -l); make scripts executable or write somewhere you own.",
        ("permission denied", "operation not permitted"),
    ),
    _p(
        "eacces", "permission",
        r"Error: EACCES\b|code:? ['\"]?EACCES\b|EACCES: ",
        "The process lacks access to the path or port; fix its permissions or use a user-writable location.",
        ("eacces",),
    ),
    _p(
        "enoent", "missing_file",
        r"Error: ENOENT\b|code:? ['\"]?ENOENT\b|ENOENT: ",
        "A path the program opened does not exist; check the path relative to the working directory.",
        ("enoent",),
    ),
    _p(
        "no_such_file", "missing_file",
        r"(?i:(?:^|: |\] )no such file or directory\b)|^FileNotFoundError\b",
        "Verify the path exists (ls it, check the working directory) or create it first.",
        ("no such file or directory", "filenotfounderror"),
    ),
    _p(
        "out_of_memory", "resource",
        r"MemoryError(?::|$)|[Oo]ut of memory\b|OUT OF MEMORY|OOM[- ]?[Kk]ill|OOMKilled\b"
        r"|Cannot allocate memory\b|std::bad_alloc|ENOMEM\b|memory allocation of \d+ bytes failed",
        "Reduce the data processed at once (stream, batch, smaller input) or raise the memory limit.",
        ("memoryerror", "out of memory", "oom", "cannot allocate memory", "bad_alloc", "enomem",
         "memory allocation of"),
    ),
    _p(
        "resource_limit", "resource",
        r"No space left on device|ENOSPC\b|Disk quota exceeded|Too many open files|EMFILE\b",
        "Free disk space or file handles (clean build artefacts, close files) before retrying.",
        ("no space left", "enospc", "disk quota", "too many open files", "emfile"),
    ),
    _p(
        "killed", "resource",
        r"(?:^|\d[ \t]+)Killed(?:[ \t]+\S|[ \t]*$)",
        "The process was killed (usually the OOM killer or a timeout); use less memory or a longer limit.",
        ("killed",),
    ),
    _p(
        "rate_limit", "rate_limit",
        r"[Rr]ate[ _-]?[Ll]imit(?:ed|s? exceeded| reached| hit)\b|[Tt]oo [Mm]any [Rr]equests|TOO_MANY_REQUESTS"
        r"|(?:HTTP(?:/[\d.]+)?|[Ss]tatus(?: code)?:?|[Ee]rror(?: code)?:?|code:?) 429\b|429 Too Many"
        r"|RateLimitError|rate_limit_error|insufficient_quota|exceeded your current quota",
        "Wait and retry with backoff (respect Retry-After); do not hammer the API with the same call.",
        ("rate limit", "rate-limit", "rate_limit", "ratelimit", "too many requests", "too_many_requests", "429",
         "insufficient_quota", "current quota"),
    ),
    _p(
        "connection_refused", "network",
        r"Connection refused|connect ECONNREFUSED\b|code:? ['\"]?ECONNREFUSED\b|ECONNREFUSED: "
        r"|ConnectionRefusedError\b|Failed to connect to \S+ port \d+|Couldn't connect to server"
        r"|Could not connect to (?:server|database|host)",
        "Nothing is listening there: start the service, or fix the host/port you are connecting to.",
        ("connection refused", "econnrefused", "connectionrefusederror", "failed to connect",
         "couldn't connect", "could not connect"),
    ),
    _p(
        "host_unreachable", "network",
        r"Could not resolve host|Temporary failure in name resolution|Name or service not known"
        r"|nodename nor servname provided|getaddrinfo (?:ENOTFOUND|EAI_AGAIN)|ENOTFOUND\b"
        r"|Network is unreachable|No route to host|E(?:NET|HOST)UNREACH\b",
        "Check the host name and network access (DNS, VPN, offline sandbox); the host cannot be reached.",
        ("resolve host", "name resolution", "service not known", "servname", "enotfound", "eai_again",
         "unreachable", "no route to host"),
    ),
    _p(
        "connection_reset", "network",
        r"Connection reset by peer|ECONNRESET\b|socket hang up\b|RemoteDisconnected\b"
        r"|Connection aborted",
        "The remote side dropped the connection; retry once with backoff and check the server's logs.",
        ("connection reset", "econnreset", "socket hang up", "remotedisconnected", "connection aborted"),
    ),
    _p(
        "address_in_use", "network",
        r"[Aa]ddress already in use|EADDRINUSE\b|port is already allocated",
        "Another process holds the port: stop it (lsof -i :PORT) or start this one on a different port.",
        ("address already in use", "eaddrinuse", "already allocated"),
    ),
    _p(
        "tls_error", "network",
        r"CERTIFICATE_VERIFY_FAILED|certificate verify failed|SSL certificate problem"
        r"|unable to get local issuer certificate|self[- ]signed certificate|SSLError\b"
        r"|ERR_TLS_CERT\w*|UNABLE_TO_VERIFY_LEAF_SIGNATURE",
        "Fix the certificate chain (CA bundle, proxy settings) rather than disabling verification.",
        ("certificate", "sslerror", "err_tls", "unable_to_verify"),
    ),
    _p(
        "timeout", "timeout",
        r"(?:[Oo]peration|[Cc]onnection|[Rr]equest|[Rr]ead|[Cc]onnect|[Cc]ommand) timed out\b|ETIMEDOUT\b"
        r"|(?:TimeoutError|TimeoutExpired|ReadTimeout|ConnectTimeout)(?::|$)"
        r"|[Dd]eadline exceeded\b|Timeout of \d+ms exceeded|timed out after \d+",
        "Find out why it is slow (hung service, lock, huge input) before raising the timeout.",
        ("timed out", "etimedout", "timeouterror", "timeoutexpired", "readtimeout", "connecttimeout", "timeout of",
         "deadline exceeded"),
    ),
    # --- databases and HTTP ---
    _p(
        "sql_error", "sql_error",
        r"^(?:Parse|Runtime) error near line \d+: |^Error: (?:in prepare|stepping), |^Parse error: "
        r"|^(?:psql:\S+:\d+: )?(?:ERROR|FATAL):  \S|\bsqlite3\.\w+Error: |\bno such (?:table|column): "
        r"|\b(?:UNIQUE|NOT NULL|FOREIGN KEY|CHECK) constraint failed\b|\bpsycopg2?\.errors\.\w+"
        r"|SQLSTATE\[|syntax error at or near \"",
        "Check the SQL against the schema (table and column names, constraints) at the statement and line it names.",
        ("error near line", "in prepare", "stepping", "parse error: ", "error:  ", "sqlite3.", "no such table",
         "no such column", "constraint failed", "psycopg", "sqlstate", "at or near"),
    ),
    _p(
        "http_error", "http",
        r"(?:HTTP(?:/[\d.]+)? |[Ss]tatus(?: code)?:? |returned error: |Request failed with status code "
        r"|HTTP Error )(?:4\d\d|5\d\d)\b|\b[45]\d\d (?:Client|Server) Error\b",
        "Check the URL, method and payload for 4xx, or the service's health for 5xx, before retrying.",
        ("http/", "http ", "status", "returned error", "client error", "server error"),
    ),
    # --- modules ---
    _p(
        "import_error", "missing_module",
        r"^(?:ModuleNotFoundError|ImportError)\b|No module named ['\"]?[\w.]|cannot load such file -- "
        r"|^Can't locate \S+\.pm in @INC|cannot find module providing package|no required module provides package"
        r"|cannot find package \"",
        "Install the package into the interpreter you run (the project venv) or fix the import path.",
        ("modulenotfounderror", "importerror", "no module named", "cannot load such file", "can't locate",
         "providing package", "provides package", "cannot find package"),
    ),
    _p(
        "cannot_find_module", "missing_module",
        r"Cannot find module ['\"]|Cannot find package ['\"]|Module not found: Error: Can't resolve"
        r"|ERR_MODULE_NOT_FOUND\b",
        "Install the dependency (npm install) or fix the relative import path and its extension.",
        ("cannot find module", "cannot find package", "can't resolve", "err_module_not_found"),
    ),
    # --- syntax ---
    _p(
        "syntax_error", "syntax",
        r"^(?:SyntaxError|IndentationError|TabError): |^(?:PHP )?Parse error: |^syntax error at \S+ line \d+"
        r"|^\S+\.rb:\d+: syntax error",
        "Fix the syntax at the reported line (look at the line before it too: unclosed brackets, colons).",
        ("syntaxerror", "indentationerror", "taberror", "parse error: ", "syntax error"),
    ),
    _p(
        "shell_syntax_error", "syntax",
        r"syntax error near unexpected token|syntax error: unexpected end of file"
        r"|unexpected EOF while looking for matching|: Syntax error: ",
        "Fix the shell script's quoting or block structure (if/fi, do/done) at the reported line.",
        ("syntax error", "unexpected eof"),
    ),
    # --- build and package tools ---
    _p(
        "make_error", "build_failure",
        r"^(?:g?make|mingw32-make)(?:\[\d+\])?: \*\*\* |^ninja: build stopped",
        "Scroll up to the first failing recipe command above make's *** line and fix that.",
        ("***", "build stopped"), overrides_success=True,
    ),
    _p(
        "failed_to_compile", "build_failure",
        r"[Ff]ailed to compile\b|Compilation failed\b|error: could not compile `|BUILD FAILED\b|Build failed\b"
        r"|BUILD FAILURE\b|Could not resolve dependencies for project|^CMake Error\b"
        r"|[Cc]ompiled with [1-9]\d* errors?\b",
        "Fix the first compile error in the build log; later errors are often consequences of it.",
        ("failed to compile", "compilation failed", "could not compile", "build failed", "compiled with",
         "build failure", "could not resolve dependencies", "cmake error"),
    ),
    _p(
        "npm_error", "package_manager",
        r"^npm (?:ERR!|error) |ERR_PNPM_\w+",
        "Read the npm error code (E404, ERESOLVE, missing script) and fix package.json or the command.",
        ("npm err!", "npm error", "err_pnpm"), overrides_success=True,
    ),
    _p(
        "pip_error", "package_manager",
        r"^ERROR: (?:Could not find a version|No matching distribution|Could not install packages"
        r"|Failed building wheel|Failed to build|Cannot install|ResolutionImpossible|pip's dependency)"
        r"|^error: externally-managed-environment",
        "Check the package name and version constraints, and install into the project's virtualenv.",
        ("error: ", "externally-managed"),
    ),
    # --- language exceptions ---
    _p(
        "java_exception", "java_exception",
        r"^Exception in thread \"[^\"\n]*\" |^(?:Caused by: )?(?:[a-z_]\w*\.)+[A-Z]\w*(?:Exception|Error)\b"
        r"[^\n]*\n\tat ",
        "Go to the first 'at' frame in your own code and handle the exception's cause there.",
        ("exception in thread", "\tat "),
    ),
    _p(
        "js_uncaught_exception", "js_exception",
        r"^(?:Uncaught )?(?:[A-Z]\w*)?Error(?: \[\w+\])?: [^\n]*\n[ \t]+at (?:async )?[^\n]*(?:\(|:\d+:\d+)",
        "Open the first stack frame in your code (not node:internal) and fix the value that was wrong.",
        ("    at ",),
    ),
    _p(
        "type_error", "python_exception",
        r"^TypeError(?:: |$)",
        "Check the types and arity of the call on the last traceback line (None where a value was expected?).",
        ("typeerror",),
    ),
    _p(
        "value_error", "python_exception",
        r"^ValueError(?:: |$)",
        "Validate the input before converting it; the value in the message is the one that was rejected.",
        ("valueerror",),
    ),
    _p(
        "key_error", "python_exception",
        r"^KeyError(?:: |$)",
        "The key is missing from the dict: check its spelling and source, or use .get() with a default.",
        ("keyerror",),
    ),
    _p(
        "index_error", "python_exception",
        r"^IndexError(?:: |$)",
        "Check the sequence length before indexing; the collection is shorter than the code assumes.",
        ("indexerror",),
    ),
    _p(
        "attribute_error", "python_exception",
        r"^AttributeError(?:: |$)",
        "The object is not what the code assumes (often None or a different type); check where it came from.",
        ("attributeerror",),
    ),
    _p(
        "name_error", "python_exception",
        r"^(?:NameError|UnboundLocalError)(?:: |$)",
        "Define or import the name before use, and check its spelling and scope.",
        ("nameerror", "unboundlocalerror"),
    ),
    _p(
        "assertion_error", "python_exception",
        r"^AssertionError(?:: |$)",
        "An assertion failed: compare the expected and actual values in the message and fix the code or test.",
        ("assertionerror",),
    ),
    _p(
        "python_traceback", "python_exception",
        r"^Traceback \(most recent call last\):\n(?:[ \t][^\n]*\n)*(?P<msg>[A-Za-z_][\w.]*(?::|$))",
        "Read the last traceback frame in your own code and the exception line below it; fix the cause there.",
        ("traceback (most recent call last)",), overrides_success=True,
    ),
    _p(
        "php_fatal_error", "exception",
        r"^(?:PHP )?Fatal error: ",
        "Read the uncaught error and the 'in file:line' it names; handle that case or fix the call there.",
        ("fatal error: ",),
    ),
    _p(
        "ruby_exception", "exception",
        r"^\S+:\d+:in [`'][^\n]*\((?:[A-Z]\w*::)*[A-Z]\w*\)$",
        "Open the first file:line of the backtrace and handle the nil/wrong value the exception names.",
        (":in ",),
    ),
    _p(
        "perl_runtime_error", "exception",
        r"^(?:Illegal division by zero|Can't (?:locate object method|call method|use an undefined value|use string)"
        r"|Undefined subroutine|Not an? \w+ reference|Died)\b[^\n]* at \S+ line \d+\.$",
        "Fix the operation at the file and line Perl names (check the value is defined and of the right kind).",
        (" line ",),
    ),
    _p(
        "exception_line", "exception",
        r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)(?::[ \t]|[ \t]*$)",
        "Find where this exception is raised and handle or prevent its cause.",
        ("error", "exception"),
    ),
    # --- generic ---
    _p(
        "git_error", "git",
        r"^fatal: |^error: pathspec |^error: (?:failed to push|Your local changes|The following untracked"
        r"|src refspec|cannot lock ref|could not apply)|^CONFLICT \(|^Automatic merge failed"
        r"|^ ! \[(?:remote )?rejected\]|^error: patch failed: ",
        "Check the repository state (git status, branch, remote) and resolve what git reports before retrying.",
        ("fatal: ", "error: ", "conflict (", "automatic merge failed", "rejected]"),
    ),
    _p(
        "exit_code", "exit_status",
        r"(?:[Ee]xit(?:ed)? with(?: exit)?(?: code| status)?|[Ee]xit (?:code|status)|[Nn]on-zero exit (?:code|status)"
        r"|returned (?:exit )?(?:code|status))[ :=]*[1-9]\d*\b",
        "A sub-command failed; find its own error message above this line.",
        ("exit code", "exit status", "exited with", "exit with", "returned code", "returned status", "returned exit",
         "non-zero exit"),
    ),
    _p(
        "error_line", "error",
        r"^(?:error|ERROR|Error|FATAL|Fatal error)(?:\[\w+\])?:[ \t]+\S|^\[ERROR\] "
        r"|^[\w./-]+: (?:fatal )?error: |^[^\n:]+: line \d+: [^\n]*: unbound variable$",
        "Read the error message and fix what it names before retrying the same command.",
        ("error", "fatal", "unbound variable"),
    ),
)

_BY_NAME = {pattern.name: pattern for pattern in PATTERNS}

# Lines that quote an error rather than report one (used when there is no exit status): log records
# (a timestamp or a level first, optionally after grep -n's "N:"), Markdown (list items, headings,
# tables, quotes), one-line commit subjects, and retry notices.
_CONTENT_LINE = LazyRegex(
    r"^[ \t]*(?:\d+[:-])?\[?\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}|^[ \t]*(?:\d+[:-])?\[?\d{2}:\d{2}:\d{2}\b"
    r"|^[ \t]*(?:\d+[:-])?\[?(?:DEBUG|INFO|WARN|WARNING|NOTICE|TRACE)\b"
    r"|^[ \t]*(?:[-*+>|#]|\d+\.)[ \t]|^[0-9a-f]{7,40} "
    r"|(?i:\bretrying\b|\bwill retry\b|\bretry in \d|\battempt \d+ (?:of|/) ?\d)"
)
# A test run whose summary says everything passed: what its tests printed is captured output.
_PASSING_RUN = LazyRegex(
    r"^=+ (?:\d+ (?:passed|skipped|xfailed|xpassed|deselected|warnings?)(?:, )?)+ in [\d.]+s\b"
    r"|^[ \t]*Tests:?[ \t]+\d+ passed\b(?![^\n]*failed)|^[ \t]*\d+ passing\b(?!\n[ \t]*\d+ failing)"
    r"|^test result: ok\.|^# fail 0$|^\d+ examples?, 0 failures|^100% tests passed|^All tests successful\."
    r"|^ok[ \t]+\S+[ \t]+[\d.]+s$|^PASS$",
    re.MULTILINE,
)

# Shell conventions for exit codes that carry meaning even when the output says nothing.
_EXIT_CODE_CLASSES: dict[int, tuple[str, str]] = {
    124: ("timeout", "The command hit its time limit (timeout); find out why it is slow or hung."),
    126: ("permission", "The file is not executable; chmod +x it or run it through its interpreter."),
    127: ("missing_command", "The command was not found; check its name, install it or fix PATH."),
    134: ("crash", "The process aborted (SIGABRT); check failed assertions in its output."),
    137: ("resource", "The process was killed (SIGKILL, often out of memory); reduce memory use."),
    139: ("crash", "The process crashed with a segmentation fault; debug it with gdb or sanitizers."),
}
_GENERIC_SUGGESTION = "The command failed; read its last error lines and change the approach before retrying."

# Commands whose output is content (files, matches, listings), not the result of running something:
# an error-looking line in their output is text they printed, not a failure.
_VIEWERS = frozenset({
    "cat", "bat", "batcat", "less", "more", "head", "tail", "grep", "egrep", "fgrep", "rg", "ag", "ack",
    "find", "fd", "ls", "tree", "exa", "eza", "wc", "sort", "uniq", "cut", "tr", "nl", "column", "jq", "yq",
    "echo", "printf", "stat", "file", "du", "df", "sed", "awk", "xxd", "hexdump", "strings", "readlink",
    "realpath", "basename", "dirname", "pwd", "which", "type", "env", "printenv", "diff", "cmp",
})
_TRIVIAL = frozenset({"cd", "pushd", "popd", "export", "set", "true", ":", "unset", "source", "."})
_GIT_VIEWERS = frozenset({"log", "show", "diff", "blame", "grep", "status", "ls-files", "branch", "remote"})
# Exit status 1 from these means "no match" or "files differ", not failure.
_EXIT_ONE_IS_ANSWER = frozenset({"grep", "egrep", "fgrep", "rg", "ag", "ack", "diff", "cmp"})

_QUOTED = LazyRegex(r"'[^']*'|\"(?:[^\"\\]|\\.)*\"")
_REDIRECT = LazyRegex(r"\d*(?:>>?|<|&>)&?[ \t]*[^\s;&|]*")
_CHAIN_SPLIT = LazyRegex(r"&&|\|\||[;\n&]")
_ENV_ASSIGNMENT = LazyRegex(r"[A-Za-z_]\w*=")
_WRAPPERS = frozenset({"sudo", "time", "nohup", "nice", "command", "exec", "xargs", "timeout"})

# One entry per line, as ls and find print when their output is not a terminal (an agent's case).
_LISTING_LINE = LazyRegex(
    r"total \d+"
    r"|[-dlcbps][-rwxsStT]{9}[.+@]?[ \t][^\n]*"
    r"|['\"]?[\w./~@%+,=-]+['\"]?:?"
)
_MAX_LISTING_LINES = 2000

_REF = LazyRegex(
    r"(?:File|in) \"(?P<pyfile>[^\"\n]+)\", line (?P<pyline>\d+)"
    # Perl "at x.pl line 5.", PHP "in /x.php on line 4", shellcheck "In x.sh line 3:"
    r"|(?:\bat|\b[Ii]n) (?P<afile>[\w./~@+-]+\.[A-Za-z]\w*) (?:on )?line (?P<aline>\d+)\b"
    # bash "x.sh: line 5: ...", psql "psql:x.sql:3: ERROR"
    r"|^(?P<bfile>[\w./~@+-]+): line (?P<bline>\d+): |^psql:(?P<qfile>[^\s:]+):(?P<qline>\d+): "
    # surefire's summary "[ERROR]   CalcTest.addsTwoNumbers:10 expected ..." names the class, not the file
    r"|^\[ERROR\][ \t]+(?P<jclass>[A-Z]\w*)\.\w+:(?P<jline>\d+) "
    r"|(?:file://|(?<![\w./\\~@+:-]))(?P<file>[\w./\\~@+-]+)"
    r"(?::(?P<line>\d+)(?::(?P<col>\d+))?(?![\w.])|:\[(?P<mline>\d+),(?P<mcol>\d+)\]"
    r"|\((?P<tline>\d+)(?:,(?P<tcol>\d+))?\)(?::| [-:])[ \t])",
    re.MULTILINE,
)
# ESLint's default ("stylish") output: the path alone on a line, then "  line:col  error  message" rows.
_STYLISH = LazyRegex(r"^(?P<path>/?[\w./~@+-]+\.[A-Za-z]\w*)\n(?P<rows>(?:[ \t]+\d+:\d+[ \t]+\w+[^\n]*(?:\n|$))+)",
                     re.MULTILINE)
_STYLISH_ROW = LazyRegex(r"^[ \t]+(?P<line>\d+):(?P<col>\d+)[ \t]+(?P<severity>\w+)", re.MULTILINE)
# A frame or path inside a library, the runtime or the test framework (or a test's declared location, as
# node --test prints it): a location, but not where to fix.
_LIBRARY = LazyRegex(
    r"^[ \t]*location: '|site-packages/|dist-packages/|/lib/python\d|<frozen |node_modules/|node:|/rustc/"
    r"|/\.cargo/registry/|/usr/lib/go|/usr/local/go/|/go/pkg/mod/|<internal:|/vendor_ruby/|/gems/|/usr/share/"
    r"|\bat (?:java|javax|jdk|sun|org\.junit|org\.opentest4j|org\.apache\.maven|kotlin)\."
)
# "line 4 column 5", "near line 3", "on line 8": a line number in a message that names no file.
_MESSAGE_LINE = LazyRegex(r"\b[Ll]ine (?P<line>\d+)\b")
_FILE_EXT = LazyRegex(r"\.[A-Za-z][A-Za-z0-9_]{0,9}$")
_EXTENSIONLESS = frozenset({"Makefile", "makefile", "GNUmakefile", "Dockerfile", "Rakefile", "Gemfile", "Jenkinsfile"})
_HOST_SUFFIXES = frozenset({"com", "org", "net", "io", "dev", "edu", "gov", "local", "internal", "invalid", "ai"})

_PY_TRACE = LazyRegex(
    r"^Traceback \(most recent call last\):\n(?:[ \t][^\n]*\n)*[A-Za-z_][\w.]*(?::[^\n]*)?$", re.MULTILINE
)
_PY_SYNTAX_TRACE = LazyRegex(
    r"^  File \"[^\"\n]+\", line \d+\n(?:[ \t][^\n]*\n)*(?:SyntaxError|IndentationError|TabError)\b[^\n]*$",
    re.MULTILINE,
)
_AT_TRACE = LazyRegex(
    r"^(?:Exception in thread \"[^\"\n]*\" )?(?:Uncaught )?[\w.$]*(?:Error|Exception)\b[^\n]*\n"
    r"(?:(?![ \t]+at )[^\n]*\n){0,4}?"
    r"(?:(?:[ \t]+at |[ \t]+\.\.\. \d+ more|Caused by: )[^\n]*(?:\n|$))+",
    re.MULTILINE,
)
_RUST_TRACE = LazyRegex(r"^thread '[^'\n]*'(?: \(\d+\))? panicked at [^\n]*(?:\n[^\n]+){0,200}", re.MULTILINE)
_GO_TRACE = LazyRegex(
    r"^panic: [^\n]*(?:\n[^\n]*){0,3}?\ngoroutine \d+ \[[^\n]*\]:(?:\n[^\n]+){0,400}", re.MULTILINE
)
# pytest's report of each failing test (source, the failing line, "E" lines, file:line: Error), from
# the FAILURES/ERRORS banner to the next banner (the short summary, warnings, the totals line).
_PYTEST_TRACE = LazyRegex(r"^=+ (?:FAILURES|ERRORS) =+$(?:\n(?!=+ )[^\n]*){1,600}", re.MULTILINE)
_TRACES = (
    (_PY_TRACE, "Traceback (most recent call last):"),
    (_PYTEST_TRACE, " FAILURES ="),
    (_PYTEST_TRACE, " ERRORS ="),
    (_PY_SYNTAX_TRACE, "  File \""),
    (_AT_TRACE, "at "),
    (_RUST_TRACE, "panicked at "),
    (_GO_TRACE, "goroutine "),
)
_CHAIN_GAP = 300


def scan(output: str, exit_code: int | None = None, *, command: str | None = None) -> ScanResult:
    """Classify one tool output.

    ``exit_code`` is the primary signal when known (Bash); ``command`` (the shell command line, when known)
    lets content-printing commands (``cat``, ``grep``, ``git log``…) succeed whatever they print, and
    treats exit 1 of ``grep``/``diff`` as an answer rather than a failure.
    """
    if command is not None and exit_code == 1 and _exit_one_is_answer(command):
        return _no_error(exit_code)
    if exit_code == 0 and command is not None and is_viewer(command):
        return _no_error(exit_code)
    window = _window(output)
    lowered = window.lower()
    if exit_code == 0 and _first_match(window, lowered, overrides_only=True) is None:
        return _no_error(exit_code)
    found = _first_match(window, lowered, text_only=exit_code is None)
    if found is None:
        if exit_code is None or exit_code == 0:
            return _no_error(exit_code)
        return _exit_status_result(window, exit_code, command)
    if exit_code in (None, 0) and _is_listing(window):
        return _no_error(exit_code)
    pattern, match = found
    stack = extract_stack_trace(window)
    start = max(0, match.start() - _REF_CONTEXT_BEFORE)
    region = window[start : match.end() + _REF_CONTEXT_AFTER]
    message = _message_for(window, match)
    refs = _primary_first(stack, region, message, command)
    error_class, suggestion = pattern.error_class, pattern.suggestion
    if command is not None and error_class in _LINTER_REFINES and _runs_linter(command):
        lint = _BY_NAME["lint_violation"]
        error_class, suggestion = lint.error_class, lint.suggestion
    return ScanResult(
        is_error=True,
        error_class=error_class,
        pattern=pattern.name,
        message=message,
        suggestion=suggestion,
        exit_code=exit_code,
        file_refs=tuple(refs),
        stack_trace=stack,
    )


def _no_error(exit_code: int | None) -> ScanResult:
    return ScanResult(False, None, None, "", None, exit_code)


def _exit_status_result(window: str, exit_code: int, command: str | None = None) -> ScanResult:
    error_class, suggestion = _EXIT_CODE_CLASSES.get(exit_code, ("exit_status", _GENERIC_SUGGESTION))
    message = f"exited with code {exit_code}"
    for line in reversed(window[-4096:].splitlines()):
        if line.strip():
            message = _clip(line.strip())
            break
    stack = extract_stack_trace(window)
    refs = _primary_first(stack, window[-_REF_CONTEXT_AFTER:], message, command)
    if command is not None and error_class == "exit_status" and _runs_linter(command):
        lint = _BY_NAME["lint_violation"]
        error_class, suggestion = lint.error_class, lint.suggestion
    return ScanResult(True, error_class, "exit_status", message, suggestion, exit_code, tuple(refs), stack)


def _window(output: str) -> str:
    """The part of ``output`` that is scanned: all of it, or its head and (mostly) its tail."""
    if len(output) <= MAX_SCAN_CHARS:
        return output
    head = output[:HEAD_CHARS]
    cut = head.rfind("\n")
    if cut > 0:
        head = head[:cut]
    tail = output[len(output) - (MAX_SCAN_CHARS - len(head) - 1) :]
    cut = tail.find("\n")
    if 0 <= cut < len(tail) - 1:
        tail = tail[cut + 1 :]
    return head + "\n" + tail


def _first_match(
    window: str, lowered: str, *, overrides_only: bool = False, text_only: bool = False
) -> tuple[ErrorPattern, re.Match[str]] | None:
    passed: bool | None = None
    for pattern in PATTERNS:
        if overrides_only and not pattern.overrides_success:
            continue
        match = pattern.search(window, lowered)
        if match is None:
            continue
        if text_only and not pattern.overrides_success:
            # Without an exit status, a weak shape only counts when the text is the tool's own report:
            # not a log record, a document, a commit subject or a retry notice that merely mention an
            # error, and not console output captured by a test run that passed.
            if passed is None:
                passed = _PASSING_RUN.get().search(window) is not None
            if passed:
                continue
            match = _first_own_match(pattern, window, match)
            if match is None:
                continue
        return pattern, match
    return None


def _first_own_match(pattern: ErrorPattern, window: str, first: re.Match[str]) -> re.Match[str] | None:
    """The first match of ``pattern`` on a line that is not quoted content (see ``_CONTENT_LINE``)."""
    match: re.Match[str] | None = first
    tries = 0
    while match is not None and tries < 50:
        line_start = window.rfind("\n", 0, match.start()) + 1
        line_end = window.find("\n", match.start())
        line = window[line_start : line_end if line_end >= 0 else len(window)]
        if _CONTENT_LINE.get().search(line) is None:
            return match
        tries += 1
        match = pattern.regex.search(window, line_end + 1) if line_end >= 0 else None
    return None


def _message_for(window: str, match: re.Match[str]) -> str:
    anchor = match.start("msg") if "msg" in match.re.groupindex and match.group("msg") else match.start()
    line_start = window.rfind("\n", 0, anchor) + 1
    line_end = window.find("\n", anchor)
    if line_end < 0:
        line_end = len(window)
    return _clip(window[line_start:line_end].strip())


def _clip(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _is_listing(window: str) -> bool:
    """True when every non-empty line looks like a path or an ``ls -l`` row (``ls``/``find`` output)."""
    saw_path = False
    for count, line in enumerate(window.splitlines()):
        if count >= _MAX_LISTING_LINES:
            break
        line = line.strip()
        if not line:
            continue
        if _LISTING_LINE.get().fullmatch(line) is None:
            return False
        saw_path = saw_path or "." in line or "/" in line
    return saw_path


def _command_words(command: str) -> list[list[str]]:
    """The words of each simple command in ``command``, with quotes blanked and wrappers dropped."""
    text = _REDIRECT.get().sub(" ", _QUOTED.get().sub("''", command))
    commands: list[list[str]] = []
    for segment in _CHAIN_SPLIT.get().split(text):
        for element in segment.split("|"):
            words = element.split()
            while words and (_ENV_ASSIGNMENT.get().match(words[0]) or words[0] in _WRAPPERS):
                words = words[1:]
            if words:
                words[0] = words[0].rsplit("/", 1)[-1]
                commands.append(words)
    return commands


def is_viewer(command: str) -> bool:
    """Whether every command of a shell line prints content (``cat``, ``grep``, ``git log`` ...): what it
    prints is text it shows, not how it went, so an error-looking line there is no failure."""
    commands = _command_words(command)
    if not commands:
        return False
    for words in commands:
        name = words[0]
        if name in _TRIVIAL or name in _VIEWERS:
            continue
        if name == "git" and _git_subcommand(words) in _GIT_VIEWERS:
            continue
        return False
    return True


def _git_subcommand(words: list[str]) -> str | None:
    rest = iter(words[1:])
    for word in rest:
        if word in ("-C", "-c", "--git-dir", "--work-tree"):
            next(rest, None)
        elif not word.startswith("-"):
            return word
    return None


def _exit_one_is_answer(command: str) -> bool:
    commands = [words for words in _command_words(command) if words[0] not in _TRIVIAL]
    if not commands or not all(words[0] in _VIEWERS for words in commands[:-1]):
        return False
    words = commands[-1]
    if words[0] == "git":
        return _git_subcommand(words) == "grep" or (_git_subcommand(words) == "diff" and "--exit-code" in words)
    return words[0] in _EXIT_ONE_IS_ANSWER


def extract_file_refs(text: str, limit: int = 20) -> list[FileRef]:
    """``file:line[:col]`` references in the order they appear, without duplicates, at most ``limit``."""
    return [ref for ref, _ in _located_refs(text, limit)]


def _located_refs(text: str, limit: int = 20) -> list[tuple[FileRef, bool]]:
    """Each reference with whether it is a library/runtime frame, in order of appearance."""
    found: list[tuple[int, FileRef, bool]] = []
    if "\n" in text and ":" in text:
        for block in _STYLISH.get().finditer(text):
            path = block.group("path")
            for row in _STYLISH_ROW.get().finditer(block.group("rows")):
                if row.group("severity") in ("error", "warning"):
                    stylish = FileRef(path, int(row.group("line")), int(row.group("col")))
                    found.append((block.start() + row.start(), stylish, False))
    for match in _REF.get().finditer(text):
        ref = _ref_of(match)
        if ref is None:
            continue
        line_start = text.rfind("\n", 0, match.start()) + 1
        line_end = text.find("\n", match.end())
        context = text[line_start : line_end if line_end >= 0 else len(text)]
        found.append((match.start(), ref, _LIBRARY.get().search(context) is not None))
        if len(found) >= limit * 4:
            break
    found.sort(key=lambda item: item[0])
    refs: list[tuple[FileRef, bool]] = []
    seen: set[tuple[str, int, int | None]] = set()
    for _, ref, library in found:
        key = (ref.file, ref.line, ref.column)
        if key in seen:
            continue
        seen.add(key)
        refs.append((ref, library))
        if len(refs) >= limit:
            break
    return refs


def _ref_of(match: re.Match[str]) -> FileRef | None:
    column: int | None = None
    if match.group("jclass") is not None:
        return FileRef(match.group("jclass") + ".java", int(match.group("jline")))
    for file_group, line_group in (("pyfile", "pyline"), ("afile", "aline"), ("bfile", "bline"), ("qfile", "qline")):
        file = match.group(file_group)
        if file is not None:
            line = int(match.group(line_group))
            if file.startswith("<") or (file_group != "pyfile" and not _looks_like_source_file(file)):
                return None
            return FileRef(file, line) if line > 0 else None
    file = match.group("file")
    if match.group("line") is not None:
        line = int(match.group("line"))
        column = int(match.group("col")) if match.group("col") else None
    elif match.group("mline") is not None:
        line, column = int(match.group("mline")), int(match.group("mcol"))
    else:
        line = int(match.group("tline"))
        column = int(match.group("tcol")) if match.group("tcol") else None
    if line <= 0 or not _looks_like_source_file(file):
        return None
    return FileRef(file, line, column)


def _looks_like_source_file(path: str) -> bool:
    name = path.replace("\\", "/").rsplit("/", 1)[-1]
    if name in _EXTENSIONLESS:
        return True
    ext = _FILE_EXT.get().search(name)
    if ext is None or not any(ch.isalnum() for ch in name[: ext.start()]):
        return False
    # "api.example.com:443" is a host and port, not a file and line
    return "/" in path or ext.group()[1:].lower() not in _HOST_SUFFIXES


def _primary_first(stack: str | None, region: str, message: str, command: str | None) -> list[FileRef]:
    """The references of a failure, the primary one first.

    The primary location is where a fix starts: the innermost frame of the user's own code (a Python
    traceback lists it last; other runtimes first), not the library or runtime frame under it; and when
    the message gives a line but no file ("line 4 column 5", "near line 3"), the file the command named
    that no other reference covers (the data file a parser read). Library frames keep their place after
    the user's.
    """
    stack_refs = _located_refs(stack) if stack else []
    if stack and stack.startswith("Traceback"):
        stack_refs.reverse()
    located = stack_refs + _located_refs(region)
    refs = [ref for ref, library in located if not library] + [ref for ref, library in located if library]
    if command is not None:
        named = _MESSAGE_LINE.get().search(message)
        if named is not None:
            line = int(named.group("line"))
            for file in _command_files(command):
                if line > 0 and not any(_same_file(file, ref.file) for ref in refs):
                    refs.insert(0, FileRef(file, line))
                    break
    return _merge_refs(refs, [])


def _command_files(command: str) -> list[str]:
    """Paths with a file extension among the command's arguments (input redirections included)."""
    text = _QUOTED.get().sub("''", command)
    files = []
    for word in text.replace("<", " ").split():
        if "/" in word or "." in word:
            word = word.strip("'\"")
            if _looks_like_source_file(word) and not word.startswith("-") and "=" not in word:
                files.append(word)
    return files


def _same_file(a: str, b: str) -> bool:
    a, b = a.removeprefix("./"), b.removeprefix("./")
    return a == b or a.endswith("/" + b) or b.endswith("/" + a)


_LINTER_REFINES = frozenset({"compile_error", "error", "exit_status", "build_failure"})
_LINTERS = frozenset({"shellcheck", "eslint", "ruff", "flake8", "pylint", "rubocop", "golangci-lint", "stylelint",
                      "hadolint", "yamllint", "markdownlint", "standard", "biome", "oxlint"})


def _runs_linter(command: str) -> bool:
    """Is the command a linter run (``eslint``, ``go vet``, ``cargo clippy``, ``npx eslint``…)?"""
    for words in _command_words(command):
        name = words[0]
        rest = words[1:]
        if name in ("npx", "pnpm", "yarn", "bunx") and rest:
            name, rest = rest[0], rest[1:]
        if name in _LINTERS or (name == "go" and rest[:1] == ["vet"]) or (name == "cargo" and rest[:1] == ["clippy"]):
            return True
    return False


def _merge_refs(first: list[FileRef], second: list[FileRef], limit: int = 20) -> list[FileRef]:
    merged: list[FileRef] = []
    for ref in (*first, *second):
        if ref not in merged:
            merged.append(ref)
            if len(merged) >= limit:
                break
    return merged


def extract_stack_trace(text: str) -> str | None:
    """The stack trace nearest the end of ``text`` (Python, pytest, JS/Node, Java, Rust, Go), bounded in size."""
    best: tuple[int, int] | None = None
    for regex, needle in _TRACES:
        if needle not in text:
            continue
        last = _last_match(regex.get(), text)
        if last is None:
            continue
        span = (last.start(), last.end())
        if regex is _PY_TRACE:
            span = _extend_python_chain(text, span)
        if best is None or span[1] > best[1] or (span[1] == best[1] and span[0] < best[0]):
            best = span
    if best is None:
        return None
    trace = text[best[0] : best[1]].rstrip()
    if len(trace) <= MAX_STACK_CHARS:
        return trace
    marker = f"\n[... {len(trace) - MAX_STACK_CHARS} chars omitted ...]\n"
    tail_len = MAX_STACK_CHARS - _STACK_HEAD_CHARS - len(marker)
    return trace[:_STACK_HEAD_CHARS] + marker + trace[len(trace) - tail_len :]


def _last_match(regex: re.Pattern[str], text: str, pos: int = 0, endpos: int | None = None) -> re.Match[str] | None:
    found = None
    for found in regex.finditer(text, pos, len(text) if endpos is None else endpos):  # noqa: B007
        pass
    return found


def _extend_python_chain(text: str, span: tuple[int, int]) -> tuple[int, int]:
    """Walk back over chained tracebacks ("During handling of the above exception…") so the chain stays whole."""
    start, end = span
    while True:
        previous = _last_match(_PY_TRACE.get(), text, max(0, start - MAX_STACK_CHARS), start)
        if previous is None or start - previous.end() > _CHAIN_GAP or "exception" not in text[previous.end() : start]:
            return start, end
        start = previous.start()


_NORMALISERS: tuple[tuple[LazyRegex, str], ...] = (
    (LazyRegex(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2})?(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?"), "<ts>"),
    (LazyRegex(r"\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\b"), "<time>"),
    (LazyRegex(r"\b0x[0-9a-fA-F]+\b"), "<hex>"),
    (LazyRegex(r"\b(?:\d{1,3}\.){3}\d{1,3}\b"), "<ip>"),
    (LazyRegex(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"), "<uuid>"),
    (LazyRegex(r"(?:/tmp|/var/tmp|/private/var/folders|/var/folders|[A-Za-z]:\\[^\s]*\\Temp)[/\\][^\s'\":,)]*"),
     "<tmp>"),
    (LazyRegex(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,}\b"), "<hash>"),
    (LazyRegex(r"\b(?P<word>pid|process|thread)[ =:#]*\d+\b", re.IGNORECASE), r"\g<word> <n>"),
    (LazyRegex(r"(?<=[\w\]'\">]):\d+(?::\d+)?\b"), ":<n>"),
    (LazyRegex(r"\b(?P<word>line|col|column|char|offset|position|pos)[ =:]*\d+\b", re.IGNORECASE), r"\g<word> <n>"),
    (LazyRegex(r"\((?:\d+|\d+,\s*\d+)\)"), "(<n>)"),
    (LazyRegex(r"\b\d+(?:\.\d+)?\s?(?:ms|s|sec|seconds)\b"), "<dur>"),
    (LazyRegex(r"\d{4,}"), "<n>"),
)
_SPACES = LazyRegex(r"\s+")


def normalise_error(message: str) -> str:
    """A stable form of an error message for hashing and grouping.

    Timestamps, addresses, IPv4 addresses, hashes, temp paths, pids, line/column numbers, durations and long
    numbers are replaced by placeholders, whitespace collapsed and the result lower-cased, so the same
    failure on another run, machine or line groups together.
    """
    text = message[:_NORMALISE_INPUT_CHARS]
    for regex, replacement in _NORMALISERS:
        text = regex.get().sub(replacement, text)
    return _SPACES.get().sub(" ", text).strip().lower()


def pattern_named(name: str) -> ErrorPattern:
    """The pattern called ``name`` (KeyError when there is none)."""
    return _BY_NAME[name]
