"""One small exception hierarchy. Each class carries its exit code (docs/design.md §5).

The library raises these and never prints; the CLI turns them into a message on
stderr (or a JSON error document) and the exit code.
"""

from __future__ import annotations

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any


class ExitCode:
    OK = 0
    ERROR = 1
    USAGE = 2
    NOTHING_TO_DO = 3
    CONFLICT = 4
    LOCK_TIMEOUT = 5
    CIRCUIT_OPEN = 75


class LokiError(Exception):
    """Root of every error loki raises on purpose."""

    exit_code = ExitCode.ERROR
    kind = "error"

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def to_json(self) -> dict[str, Any]:
        return {"error": self.kind, "message": self.message, "exit_code": self.exit_code, **self.details}


class UsageError(LokiError):
    """The command line itself is wrong (exit 2)."""

    exit_code = ExitCode.USAGE
    kind = "usage"


class InvalidInput(LokiError):
    """An argument, id or document given to loki is not acceptable."""

    kind = "invalid_input"


class InvalidArgument(UsageError, InvalidInput):
    """An argument or option value that breaks its own rules (a choice not offered, a number out of
    range, an empty required text, a malformed id or name): exit 2, like any usage error. What can
    only be judged against the state (no such task, a dependency cycle) or a file's content stays
    :class:`InvalidInput` (exit 1). Still an :class:`InvalidInput` for ``except`` clauses."""


class NotFound(LokiError):
    kind = "not_found"


class NotInitialized(LokiError):
    kind = "not_initialized"


class StateFileError(LokiError):
    """A state file cannot be used: it fails to parse or to validate, or is unsafe.

    Carries the file, the JSON pointer inside it and the reason, so the message
    always says exactly where the problem is.
    """

    kind = "invalid_state_file"

    def __init__(self, path: str, reason: str, pointer: str = "", *, hint: str | None = None) -> None:
        where = f"{path}{' at ' + pointer if pointer else ''}"
        # ``hint``: what helps when the default advice (fix it by hand, or doctor --repair) cannot.
        extra = {"hint": hint} if hint else {}
        super().__init__(f"{where}: {reason}", file=path, pointer=pointer, reason=reason, **extra)
        self.path = path
        self.pointer = pointer
        self.reason = reason


class FileTooLarge(StateFileError):
    """A state file is over the size loki reads (it is refused before parsing).

    Not "broken": it may hold live records, so ``loki doctor --repair`` reports it and never
    sets it aside (docs/storage.md).
    """

    kind = "state_file_too_large"


class SchemaViolation(LokiError):
    """A document or record loki was about to write (or was given) breaks its schema."""

    kind = "schema_violation"

    def __init__(self, where: str, problems: list[tuple[str, str]]) -> None:
        first_pointer, first_reason = problems[0]
        # Name every problem (up to five): fixing one at a time, a run each, wastes an agent's turns.
        shown = "; ".join(f"{p or '/'}: {r}" for p, r in problems[:5])
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        super().__init__(
            f"{where} at {shown}{more}",
            file=where,
            pointer=first_pointer,
            reason=first_reason,
            problems=[{"pointer": p, "reason": r} for p, r in problems],
        )
        self.problems = problems


class InvalidFields(UsageError, SchemaViolation):
    """Fields given by the caller (``signal emit TYPE key=value``) break the document's schema: the
    command line alone shows the mistake, so it is a usage error (exit 2), naming every problem."""


class NothingToDo(LokiError):
    """Nothing is ready (exit 3): not a failure, a fact the caller acts on."""

    exit_code = ExitCode.NOTHING_TO_DO
    kind = "nothing_to_do"


class Conflict(LokiError):
    """Not the holder, lease lost, already claimed (exit 4). Nothing was changed."""

    exit_code = ExitCode.CONFLICT
    kind = "conflict"


class LockTimeout(LokiError):
    exit_code = ExitCode.LOCK_TIMEOUT
    kind = "lock_timeout"


class MigrationUnderWay(LockTimeout):
    """The tree is being moved by ``loki migrate`` (or a move was interrupted): every other command is
    held out until it ends, exit 5 like a lock that cannot be had (docs/postgres.md)."""

    kind = "migration_under_way"


class CircuitOpen(LokiError):
    """A circuit breaker refuses the call; ``retry_after`` says how long to wait."""

    exit_code = ExitCode.CIRCUIT_OPEN
    kind = "circuit_open"

    def __init__(self, message: str, *, name: str, retry_after: float, **details: Any) -> None:
        super().__init__(message, name=name, retry_after=retry_after, **details)
        self.name = name
        self.retry_after = retry_after


def describe_os_error(exc: OSError) -> str:
    """The reason an OS call failed, in words a user acts on (the same for every part of loki)."""
    import errno

    reason = exc.strerror or str(exc)
    if exc.errno == errno.ENOSPC:
        return "no space left on device"
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"permission denied ({reason})"
    if exc.errno == errno.EFBIG:
        return "file too large for this system's limits"
    return reason


def os_error_hint(exc: OSError) -> str | None:
    """What helps when the system refused a write: never ``loki doctor --repair``, which writes too (and
    nothing is broken: an atomic write that failed changed nothing)."""
    import errno

    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return ("the file system holding .loki/ is full (or your quota is used up): free space there (`df -h .loki`) "
                "and run the command again; nothing was changed")
    if exc.errno == errno.EFBIG:
        return ("a file would pass this process's file size limit (`ulimit -f`): raise the limit and run the "
                "command again; nothing was changed")
    if exc.errno == errno.EROFS:
        return "the file system holding .loki/ is mounted read-only: remount it read-write; nothing was changed"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return ("make .loki/ writable for this user: check the owner and mode (`ls -la .loki`), an immutable flag "
                "(`lsattr -d .loki .loki/*`) or a read-only mount; nothing was changed")
    return None
