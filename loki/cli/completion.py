"""``loki completion bash|zsh|fish``: the shell scripts that make Tab complete loki's command line.

Each script asks loki for the candidates (``loki __complete SHELL ...``), which the typer-free lane
:mod:`loki.cli.completer` answers from :mod:`loki.cli.completiontable` -- every command, option and
positional argument, generated from this app by :func:`render_table` -- and from the tree (task ids,
agents, breakers, escalations, signal types). A Tab must feel instant, and typer alone costs ~60 ms, so
the shell never waits for the app: the table is committed, and tests/cli/test_completion.py fails when it no
longer matches the app (``make completion-table`` rewrites it).

The kinds of value an option or argument takes (what the completer offers for it) are decided here, by
parameter name and command: :func:`value_kind`.
"""

from __future__ import annotations

import typer

SHELLS = ("bash", "zsh", "fish")

# bash: COMP_WORDS splits `--format=json` and `Bash:1a2b` at '=' and ':'; the line up to the cursor and
# COMP_WORDBREAKS are handed over instead, and loki answers with what readline's current word needs.
BASH = r'''# loki's completion for bash: add `eval "$(loki completion bash)"` to ~/.bashrc
_loki_completion() {
    local IFS=$'\n'
    COMPREPLY=($("${COMP_WORDS[0]}" __complete bash --line "${COMP_LINE:0:COMP_POINT}" \
                 --breaks "${COMP_WORDBREAKS}" 2>/dev/null))
    # `signal emit TYPE key=`: the value follows the '=' at once
    if [[ ${#COMPREPLY[@]} -gt 0 && "${COMPREPLY[0]}" == *= ]]; then compopt -o nospace 2>/dev/null; fi
}
complete -o default -o nosort -F _loki_completion loki
'''

ZSH = r'''#compdef loki
# loki's completion for zsh: add `eval "$(loki completion zsh)"` to ~/.zshrc (after compinit)
_loki() {
    local -a candidates
    candidates=("${(@f)$("${words[1]}" __complete zsh -- "${(@)words[2,CURRENT]}" 2>/dev/null)}")
    if [[ "${candidates[1]}" == "__files__" ]]; then
        _files
        return
    fi
    local -a plain assign
    local c
    for c in "${candidates[@]}"; do
        [[ -z "$c" ]] && continue
        if [[ "${c%%:*}" == *= ]]; then assign+=("$c"); else plain+=("$c"); fi
    done
    (( ${#plain} )) && _describe -V loki plain
    (( ${#assign} )) && _describe -V loki assign -S ''  # `key=`: the value follows at once
}
if (( $+functions[compdef] )); then compdef _loki loki; fi
'''

FISH = r'''# loki's completion for fish: `loki completion fish > ~/.config/fish/completions/loki.fish`
function __loki_complete
    set -l words (commandline -opc) (commandline -ct)
    set -l out (command $words[1] __complete fish -- $words[2..-1] 2>/dev/null)
    if test "$out[1]" = __files__
        __fish_complete_path (commandline -ct)
    else
        printf '%s\n' $out
    end
end
complete -c loki -f -a '(__loki_complete)'
'''

SCRIPTS = {"bash": BASH, "zsh": ZSH, "fish": FISH}


def completion(
    shell: str = typer.Argument(..., metavar="bash|zsh|fish", help="The shell to print the script for."),
) -> None:
    """Print the Tab-completion script for a shell (commands, options, task ids, agents, breakers, signal types).

    bash: `eval "$(loki completion bash)"` in ~/.bashrc; zsh: `eval "$(loki completion zsh)"` in ~/.zshrc after
    compinit; fish: `loki completion fish > ~/.config/fish/completions/loki.fish`.
    """
    from loki.errors import UsageError

    if shell.lower() not in SCRIPTS:
        raise UsageError(f"unknown shell {shell!r}; loki completes for {', '.join(SHELLS)}", field="shell")
    typer.echo(SCRIPTS[shell.lower()], nl=False)


# -- the table the completer reads -----------------------------------------------------------------------

_TASK_STATES = {
    "queue heartbeat": "in-progress", "queue complete": "in-progress", "queue fail": "in-progress",
    "queue release": "in-progress", "queue retry": "failed,dead-letter,cancelled",
    "queue cancel": "pending,in-progress,blocked,failed,landing",
    "escalate": "pending,in-progress,blocked,failed,dead-letter",
    "deadletter show": "dead-letter", "deadletter retry": "dead-letter", "deadletter propose": "dead-letter",
    "deadletter abandon": "dead-letter", "deadletter split": "dead-letter",
    "queue edit": "pending,in-progress,blocked,failed,dead-letter",
    "queue close": "pending,in-progress,blocked,failed,dead-letter,landing", "queue defer": "pending,in-progress",
    "queue claim": "pending",
}
_CHOICES = {
    "priority": "high,medium,low",
    "decision": "approve,cancel,clarify",
    "error_type": "test_failure,timeout,dependency,validation,other",
    "fmt": "table,id,json,jsonl",
    "severity": "low,medium,high,critical",
    "observer": "auto,native,polling",
    "shell": ",".join(SHELLS),
}
_FILES = frozenset({"from_file", "settings", "path", "root"})


def value_kind(path: str, name: str) -> str | None:
    """What the completer offers for parameter ``name`` of command ``path`` (``"queue claim"``): a kind the
    tree answers (``task`` with the states that command accepts, ``agent``, ``breaker``, ...), ``choice:``
    a fixed list, ``files``, or None (free text: nothing to offer)."""
    group = path.split(" ")[0]
    if name in ("depends_on", "add_dependency", "remove_dependency"):
        return "task:all"  # a dependency may be any task, whatever the command does to its own
    if name == "task_id":
        if path == "approve":
            return "waiting"  # blocked or dead-letter tasks, and open escalations
        return "task:" + _TASK_STATES.get(path, "all")
    if name == "state":
        from loki.storage.layout import QUEUE_STATES

        return "choice:" + ",".join((*QUEUE_STATES, "dead-letter", "abandoned", "all"))
    if name == "event":
        from loki.hooks.boundary import EVENTS

        return "choice:" + ",".join(EVENTS)
    if name in _CHOICES:
        return "choice:" + _CHOICES[name]
    if name in _FILES:
        return "files"
    if path == "escalations close" and name == "escalation_id":
        return "escalation:open"  # a resolved one cannot be closed again
    by_name = {"agent": "agent", "escalation_id": "escalation", "type_": "task_type", "label": "label",
               "signal_type": "signal_type", "type_prefix": "signal_type", "fields": "signal_field",
               "add_label": "label", "remove_label": "label",
               "branch": "branch"}
    if name in by_name:
        return by_name[name]
    if name == "breaker" or (group == "breaker" and name == "name"):
        return "breaker"
    if group == "lease" and name == "lease_id":
        return "lease"
    if path == "signal show" and name == "name":
        return "signal"
    if group == "errors" and name == "key":
        return "strike"
    return None


def _short(text: str | None, limit: int = 70) -> str:
    text = " ".join((text or "").split())
    first = text.split(". ")[0].rstrip(".")
    return first if len(first) <= limit else first[: limit - 3].rstrip() + "..."


def build_table(app: typer.Typer) -> dict[str, dict[str, object]]:
    """Every command of ``app`` (loki's, :func:`loki.cli.app.build_app`): its subcommands with their help,
    its options (with the kind of value each takes, None for a flag) and its positional arguments (a
    trailing ``*``: any number of them)."""
    import typer.main

    table: dict[str, dict[str, object]] = {}

    def walk(command: object, path: str) -> None:
        params = getattr(command, "params", [])
        options: dict[str, str | None] = {"-h": None, "--help": None}
        docs: dict[str, str] = {"-h": "Show the help", "--help": "Show the help"}
        args: list[str] = []
        for param in params:
            kind = value_kind(path, param.name)
            if param.param_type_name == "argument":
                args.append((kind or "text") + ("*" if param.nargs == -1 else ""))
                continue
            for opt in [*param.opts, *param.secondary_opts]:
                options[opt] = None if param.is_flag else (kind or "text")
                docs[opt] = _short(param.help)
        subcommands = getattr(command, "commands", {})
        table[path] = {"options": options, "option_help": docs, "args": args,
                       "subcommands": {name: _short(sub.get_short_help_str(200))
                                       for name, sub in sorted(subcommands.items())}}
        for name, sub in subcommands.items():
            walk(sub, f"{path} {name}".strip())

    walk(typer.main.get_command(app), "")
    return table


def render_table(app: typer.Typer) -> str:
    """The source of :mod:`loki.cli.completiontable` for ``app`` (``make completion-table`` writes it)."""
    import pprint

    return ("# ruff: noqa: E501\n"
            '"""Generated by ``make completion-table`` from the typer app (loki/cli/completion.py): every command,\n'
            'option and argument, for the typer-free completer (tests/cli/test_completion.py checks it)."""\n\n'
            "TABLE = " + pprint.pformat(build_table(app), width=118, sort_dicts=True) + "\n")
