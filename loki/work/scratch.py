"""The files ``loki work`` hands the agent's command: the task it claimed, and where to put its result.

Each task gets a private temporary directory (mode 0700, outside ``.loki/``, removed once the task is
recorded) holding ``task.json``, the task as claimed (``LOKI_TASK_FILE``), and the path of
``result.json`` (``LOKI_RESULT_FILE``), which the command may write. Not ``.loki/`` itself: the command
writes there, and nothing but loki may write inside the tree.

The result file is read like any input loki did not write: a regular file (a FIFO would hang the
loop) of its own (not a symbolic link, not a hard link: either would make a file outside the directory,
one the command may only read, become the team's result), at most :data:`MAX_RESULT_BYTES`, strict
JSON (no duplicate keys, NaN, BOM or trailing data, loki/storage/jsonio.py), and a JSON object, so it
can grow fields. Anything else is a :class:`BadResultFile` naming the file, the JSON pointer when there
is one, and what is wrong; the loop records it as the attempt's failure (``validation``).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile

from loki.errors import InvalidInput, describe_os_error
from loki.regularfile import NotRegularFile, read_regular
from loki.storage import jsonio

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any

MAX_RESULT_BYTES = 1024 * 1024
"""A result is a summary (a commit, a URL, counts) stored in the task, not a log: 1 MiB is plenty."""

TASK_FILE = "task.json"
RESULT_FILE = "result.json"


class BadResultFile(InvalidInput):
    """The command's result file is not a JSON object loki can store."""

    kind = "bad_result_file"


class Scratch:
    """One task's temporary directory: :attr:`task_file`, :attr:`result_file`."""

    def __init__(self, task: dict[str, Any]) -> None:
        try:
            self.directory = tempfile.mkdtemp(prefix=f"loki-work-{task['id'][:40]}-")
        except OSError as exc:
            raise InvalidInput(f"cannot create a temporary directory for task {task['id']}: "
                               f"{describe_os_error(exc)} (TMPDIR={tempfile.gettempdir()})") from None
        self.task_file = os.path.join(self.directory, TASK_FILE)
        self.result_file = os.path.join(self.directory, RESULT_FILE)
        try:
            with open(self.task_file, "w", encoding="utf-8") as out:
                json.dump(task, out, ensure_ascii=False, indent=2)
                out.write("\n")
        except OSError as exc:
            self.remove()
            raise InvalidInput(f"cannot write {self.task_file}: {describe_os_error(exc)}") from None

    def read_result(self) -> dict[str, Any] | None:
        """The command's result, or None when it wrote none; :class:`BadResultFile` when it is unusable."""
        path = self.result_file
        try:
            data = read_regular(path, MAX_RESULT_BYTES + 1, own=True)
        except FileNotFoundError:
            return None
        except NotRegularFile as exc:
            raise BadResultFile(f"result file {exc}; write a regular file",
                                file=path) from None
        except OSError as exc:
            raise BadResultFile(f"result file {path}: cannot read: {exc.strerror}", file=path) from None
        if len(data) > MAX_RESULT_BYTES:
            raise BadResultFile(f"result file {path}: over the {MAX_RESULT_BYTES}-byte limit for a result (keep "
                                "logs elsewhere and put their path in the result)", file=path)
        try:
            value = jsonio.loads_strict(data, max_depth=jsonio.INPUT_DEPTH)
        except jsonio.JsonError as exc:
            where = f" at {exc.pointer}" if exc.pointer else ""
            raise BadResultFile(f"result file {path}{where}: {exc.reason}", file=path, pointer=exc.pointer,
                                reason=exc.reason) from None
        if not isinstance(value, dict):
            raise BadResultFile(f"result file {path} at /: expected a JSON object, got {_json_type(value)}",
                                file=path, pointer="", reason="not an object")
        return value

    def remove(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


def _json_type(value: object) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "a number",
             float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)
