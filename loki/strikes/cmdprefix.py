"""The command prefix: what "the same kind of command" means to error memory (docs/memory.md).

Error memory groups failures and links a failure streak to the success that ended it by the
*prefix* of a call, not its whole input: ``cargo build`` failing and ``cargo build --offline``
succeeding are the same kind of command; ``pytest tests/a.py`` and ``pytest tests/b.py`` are not.

For a **Bash** command the prefix is ``<program> <argument>``:

1. quoted strings are blanked (their content is data, not structure) and redirections dropped;
2. the line is cut into simple commands at ``&&``, ``||``, ``;``, ``|``, ``&`` and newlines; the
   first one that is not shell set-up (``cd``, ``export``, ``source``, ``set`` ...) is used (all
   set-up: the first one);
3. in it, environment assignments (``FOO=1``), wrappers (``sudo``, ``time``, ``timeout 60``,
   ``env``, ``nice -n 5`` ...) and runners (``uv run``, ``poetry run``, ``npx``, ``bundle exec`` ...)
   are skipped; the next word's basename is the *program* (``/usr/bin/python3.11`` -> ``python3.11``;
   every ``python*`` is ``python``);
4. the *argument* is the program's first word that is not an option (``-x``, ``--flag``) nor an
   option's value for the options known to take one (``git -C DIR``, ``make -f FILE``,
   ``pytest -p PLUGIN``, ``tsc -p DIR``: :data:`VALUE_OPTIONS`), cut at 60 characters;
5. special cases: ``python -m MODULE`` is the program ``MODULE`` (``python -m pytest`` is
   ``pytest``); ``python -c ...`` is ``python -c``; ``npm run SCRIPT`` (yarn, pnpm, bun, deno)
   keeps the script (``npm run build``); a quoted program (``"$HOME/bin/x"``) has no prefix.

So ``cd web && FORCE=1 npx jest src/a.test.ts --ci`` is ``jest src/a.test.ts``; ``git -C repo push
origin`` is ``git push``; ``make`` is ``make``.

For **other tools** the prefix is the path or URL the call works on (``file_path``,
``notebook_path``, ``path``, ``url``), or empty when it has none; an empty prefix matches only the
identical call. Prefixes are redacted (a URL argument can carry a password) so they can be stored; a
command is redacted before its prefix is taken, since an option's secret value can become the argument.

This runs on the PreToolUse hot path: it imports only ``re`` (loaded by ``json`` already);
:mod:`loki.text.redact` is imported when a prefix is actually computed.
"""

from __future__ import annotations

import re

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any

MAX_ARGUMENT_CHARS = 60
MAX_COMMAND_CHARS = 4096
"""Only the start of a command line is looked at: the prefix is always near the front."""

SETUP = frozenset({"cd", "pushd", "popd", "export", "set", "unset", "source", ".", "true", ":", "ulimit",
                   "umask", "alias", "shopt"})
WRAPPERS = frozenset({"sudo", "doas", "time", "nohup", "nice", "ionice", "command", "exec", "env", "timeout",
                      "stdbuf", "xargs", "npx", "pnpx", "bunx", "caffeinate"})
RUNNERS = frozenset({("uv", "run"), ("poetry", "run"), ("pipenv", "run"), ("pdm", "run"), ("hatch", "run"),
                     ("bundle", "exec"), ("pnpm", "exec"), ("pnpm", "dlx"), ("yarn", "dlx"), ("conda", "run")})
WRAPPER_VALUE_OPTIONS = frozenset({"-u", "-g", "-n", "-s", "-k", "-C", "--signal", "--kill-after"})
VALUE_OPTIONS = {
    "git": frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace"}),
    "make": frozenset({"-C", "-f", "--directory", "--file", "-j", "-l"}),
    "cargo": frozenset({"--manifest-path", "-Z", "--config"}),
    "docker": frozenset({"-H", "--host", "--context", "-c", "--config", "-l", "--log-level"}),
    "npm": frozenset({"--prefix", "-w", "--workspace"}),
    "pytest": frozenset({"-p", "-k", "-m", "-c", "-o", "-n", "--rootdir", "--confcutdir", "--basetemp", "--maxfail",
                         "--deselect", "--ignore", "--junitxml", "--cov", "--tb", "-W"}),
    "tsc": frozenset({"-p", "--project", "--outDir", "-t", "--target", "-m", "--module"}),
}
SCRIPT_RUNNERS = frozenset({"npm", "yarn", "pnpm", "bun", "deno"})
SUBJECT_FIELDS = ("file_path", "notebook_path", "path", "url")

_QUOTED = re.compile(r"'[^']*'|\"(?:[^\"\\]|\\.)*\"")
_REDIRECT = re.compile(r"\d*(?:>>?|<<?|&>)&?[ \t]*[^\s;&|]*")
_CHAIN = re.compile(r"&&|\|\||[;|&\n]")
_ASSIGNMENT = re.compile(r"[A-Za-z_]\w*=")
_PYTHON = re.compile(r"python[\d.]*")
_DURATION = re.compile(r"\d[\d.]*[smhd]?")


def call_prefix(tool: str, tool_input: Any) -> str:
    """The redacted prefix of one call (``""`` when it has none)."""
    if not isinstance(tool_input, dict):
        return ""
    from loki.text.redact import redact

    if tool == "Bash":
        command = tool_input.get("command")
        # The whole command is redacted first: the prefix's argument can be an option's secret value
        # (`curl -u ada:PW URL` -> `curl ada:PW`) that no rule recognises once its option is dropped.
        raw = command_prefix(redact(command[:MAX_COMMAND_CHARS])) if isinstance(command, str) else ""
    else:
        raw = ""
        for field in SUBJECT_FIELDS:
            value = tool_input.get(field)
            if isinstance(value, str) and value.strip():
                raw = " ".join(value.split())[:200]
                break
    if not raw:
        return ""
    return redact(raw)


def command_prefix(command: str) -> str:
    """``<program> <argument>`` of a shell command line (not redacted); ``""`` for an empty one."""
    text = _REDIRECT.sub(" ", _QUOTED.sub("''", command[:MAX_COMMAND_CHARS]))
    simple = [words for words in (part.split() for part in _CHAIN.split(text)) if words]
    chosen = next((words for words in simple if _basename(_skip_wrappers(words)[:1]) not in SETUP), None)
    if chosen is None:
        if not simple:
            return ""
        chosen = simple[0]
    words = _skip_wrappers(chosen)
    if not words:
        return ""
    program = _basename(words[:1])
    if program in ("", "''"):  # a quoted program path: nothing stable to name it by
        return ""
    rest = words[1:]
    if _PYTHON.fullmatch(program):
        program = "python"
        if rest[:1] == ["-m"] and len(rest) > 1:
            program, rest = rest[1], rest[2:]
        elif "-c" in rest[:1]:
            return "python -c"
    argument = _argument(program, rest)
    if argument == "run" and program in SCRIPT_RUNNERS:  # `npm run build` and `npm run lint` differ
        script = _argument(program, rest[rest.index("run") + 1 :])
        argument = f"run {script}" if script else argument
    return f"{program} {argument}" if argument else program


def _basename(words: list[str]) -> str:
    return words[0].rsplit("/", 1)[-1] if words else ""


def _skip_wrappers(words: list[str]) -> list[str]:
    """Drop leading environment assignments, wrappers (with their options) and runners."""
    index = 0
    while index < len(words):
        word = words[index]
        name = word.rsplit("/", 1)[-1]
        if _ASSIGNMENT.match(word):
            index += 1
        elif name in WRAPPERS:
            index += 1
            while index < len(words) and (words[index].startswith("-") or _ASSIGNMENT.match(words[index])):
                index += 2 if words[index] in WRAPPER_VALUE_OPTIONS else 1
            if name == "timeout" and index < len(words) and _DURATION.fullmatch(words[index]):
                index += 1
        elif index + 1 < len(words) and (name, words[index + 1]) in RUNNERS:
            index += 2
        else:
            break
    return words[index:]


def _argument(program: str, rest: list[str]) -> str:
    takes_value = VALUE_OPTIONS.get(program, frozenset())
    index = 0
    while index < len(rest):
        word = rest[index]
        if word in takes_value:
            index += 2
            continue
        if word.startswith("-") or word == "''" or _ASSIGNMENT.match(word):
            index += 1
            continue
        return word[:MAX_ARGUMENT_CHARS]
    return ""
