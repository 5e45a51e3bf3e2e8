"""``loki init``, ``status``, ``validate``, ``doctor``: the tree as a whole."""

from __future__ import annotations

import os

import typer

from loki.cli.common import JSON_HELP, echo, print_json, report_notes, root_option, say, store_from, table
from loki.wording import plural

TYPE_CHECKING = False
if TYPE_CHECKING:
    from loki.storage.problems import DoctorReport


def register(app: typer.Typer) -> None:
    app.command("init")(init)
    app.command("status")(status)
    app.command("validate")(validate)
    app.command("doctor")(doctor)


def init(
    ctx: typer.Context,
    path: str | None = typer.Option(None, "--path",
                                    help="Project directory to create .loki/ in (default: the top of the git "
                                         "repository, else the current directory)."),
    gitignore: bool = typer.Option(False, "--gitignore", help="Also add .loki/ to the .gitignore beside it (the live "
                                                              "state must not be committed)."),
    database: str | None = typer.Option(None, "--database", envvar="LOKI_DATABASE_URL", show_envvar=False,
                                        help="Keep the state in this PostgreSQL database (postgresql://...), shared "
                                             "by every machine whose tree names it; LOKI_DATABASE_URL works too. "
                                             "The password is never saved: libpq's PGPASSWORD/~/.pgpass supply it."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Create the .loki/ tree (or join a team's database). Idempotent: existing files are never overwritten."""
    from loki.errors import UsageError
    from loki.storage.paths import STATE_DIR_NAME, init_directory
    from loki.storage.tree import gitignore_state, ignore_in_git, init_tree

    explicit = root_option(ctx)
    source = ctx.find_root().get_parameter_source("root")  # LOKI_ROOT is ambient, --root is explicit
    on_command_line = source is not None and source.name == "COMMANDLINE"
    if explicit is not None and path is not None and on_command_line:
        raise UsageError("give either --root (the .loki/ directory itself) or --path (the project directory "
                         "that holds it), not both")
    if explicit is not None and path is None:  # --root, or LOKI_ROOT when --path does not say otherwise
        root, location = os.path.abspath(explicit), "root" if on_command_line else "env"
    else:
        project, location = init_directory(path, os.getcwd())
        root = os.path.join(project, STATE_DIR_NAME)
    if database is not None:
        _init_database(root, location, database, json_output)
        return
    created = init_tree(root)
    added = ignore_in_git(root) if gitignore else False
    ignore = {**gitignore_state(root), "added": added}
    if json_output:
        print_json({"root": root, "created": created, "location": location, "gitignore": ignore,
                    "backend": "files"})
        return
    where = _where(root, location)
    if created:
        made = plural(len(created), "new file or directory", "new files and directories")
        say(f"initialised {root} {where} ({made})")
    else:
        say(f"{root} is already initialised; nothing changed")
    if added:
        say(f"added .loki/ to {ignore['file']}")
    elif ignore["repository"] and not ignore["ignored"]:
        say(f"note: .loki/ is not in {ignore['file']}: it is this machine's live state, never to be committed; "
            "`loki init --gitignore` adds it")
    if created:
        for line in NEXT_STEPS:
            say(line)


NEXT_STEPS = (
    "next:",
    "  loki hooks install                 Claude Code: strikes, error memory, a briefing at session start",
    '  loki queue add "TITLE" -p high     add work; agents take it with `loki queue claim --agent NAME -q`',
    "  loki watch                         in a terminal of its own: applies signals, requeues expired leases",
    '  eval "$(loki completion bash)"     Tab completion (zsh, fish: `loki completion -h`)',
)


def _where(root: str, location: str) -> str:
    where = {"root": "as --root says", "env": "as LOKI_ROOT says", "path": "as --path says",
             "cwd": "in the current directory (not in a git repository)",
             "git_top": "at the top of the git repository, where Claude Code looks"}[location]
    if location == "git_top" and os.path.dirname(root) != os.path.abspath(os.getcwd()):
        where += " (`loki init --path .` puts it in the current directory instead)"
    return where


def _init_database(root: str, location: str, url: str, json_output: bool) -> None:
    from loki.storage.postgres.admin import init_database_tree

    report = init_database_tree(root, url)
    if json_output:
        print_json({**report, "location": location, "backend": "postgresql"})
        return
    schema = f"{report['database']} (schema {report['schema']})"
    if report["created"]:
        say(f"created loki's tables in {schema}: schema version {report['schema_version']}")
    else:
        say(f"joined the team's state in {schema}: schema version {report['schema_version']}")
    say(f"this tree is {root} ({_where(root, location)}); its state is in that database"
        + ("" if report["config_written"] else " (its config already said so)"))
    if report["password_dropped"]:
        say("the password in the URL was not saved: give it with PGPASSWORD, ~/.pgpass or LOKI_DATABASE_URL")


def status(ctx: typer.Context, json_output: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Counts per queue, breakers by state, signals waiting, dead-letter size and last review."""
    from loki.admin.status import status as tree_status
    from loki.tasks.landing import landing_text

    store = store_from(ctx)
    report = tree_status(store)
    report_notes(store, report)
    if json_output:
        print_json(report)
        return
    say(f"loki state in {report['root']}")
    table("queue", ["state", "tasks"], [[k, v] for k, v in report["queue"].items()])
    breakers = report["breakers"]
    say(f"breakers: {breakers['CLOSED']} closed, {breakers['OPEN']} open, {breakers['HALF_OPEN']} half-open")
    escalations = report["escalations"]
    say(f"signals waiting: {report['signals_waiting']}   escalations: {escalations['open']} open "
        f"({escalations['total']} in all)")
    reviewed = report["dead_letter"]["last_reviewed"] or "never"
    say(f"dead-letter: {plural(report['dead_letter']['size'], 'entry', 'entries')}, last reviewed {reviewed}")
    failing = report["checks_failing"]
    if failing:
        shown = ", ".join(f"{row['task_id']} {row['check']!r} ({row['state']})" for row in failing[:5])
        more = f" and {len(failing) - 5} more" if len(failing) > 5 else ""
        say(f"checks failing: {plural(len(failing), 'task')}: {shown}{more}")
    landing = report["landing"]
    if landing:
        say(f"landing: {plural(len(landing), 'task')} verified, waiting for their commit to reach their branch: "
            + landing_text(landing))

    leased = report["path_leases"]
    say(f"path leases: {leased['live']} live, {leased['task_claims']} tasks holding paths"
        + (f", {leased['conflicts']} overlapping (loki lease list --conflicts)" if leased["conflicts"] else "")
        + (f"; in the last 24 h: {plural(leased['denied'], 'edit')} denied, {leased['broken']} broken, "
           f"{leased['expired']} expired" if leased["denied"] or leased["broken"] or leased["expired"] else ""))
    watcher = report["watcher"]
    if watcher["consuming"]:
        holder = watcher["holder"] or {}
        say(f"watcher: consuming (pid {holder.get('pid')} on {holder.get('host')} since {holder.get('since')}), "
            f"last tick {watcher['last_tick'] or 'not yet'}")
    else:
        say("watcher: none consuming (signals wait; run `loki watch` or `loki watch --once`)")
    spend = report["spend"]
    if spend["total"]["attempts"]:
        from loki.cli.usage import dollars

        say(f"spend: {dollars(spend['today'])} today (UTC), {dollars(spend['total'])} in all "
            f"(`loki usage --by agent`)")


def validate(ctx: typer.Context, json_output: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Check every file in the tree against its schema and the cross-file invariants. Exit 1 on any problem."""
    from loki.admin.status import validate as validate_tree

    store = store_from(ctx)
    problems = validate_tree(store)
    if json_output:
        print_json({"root": store.where, "backend": store.backend, "valid": not problems,
                    "problems": [{"file": p.file, "pointer": p.pointer, "message": p.message} for p in problems]})
    elif problems:
        for problem in problems:
            echo(f"{problem}", err=True)
        echo(f"{plural(len(problems), 'problem')} in {store.where} ({store.backend})", err=True)
    else:
        say(f"{store.where} ({store.backend}): valid")
    if problems:
        raise typer.Exit(1)


def doctor(
    ctx: typer.Context,
    repair: bool = typer.Option(False, "--repair", help="Sweep stale temp files and move corrupt files aside."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Finish interrupted changes and report what is wrong; --repair fixes what can be fixed without losing data."""
    from loki.admin.status import doctor as run_doctor

    store = store_from(ctx)
    report = run_doctor(store, repair=repair)
    _server_problem(ctx, report)
    if json_output:
        print_json({**report.to_json(), "root": store.where, "backend": store.backend})
    else:
        for rel in report.journals_finished:
            say(f"finished interrupted change: {rel}")
        for rel in report.temp_files:
            state = "removed" if rel in report.temp_removed else "left (younger than 5 min, or no --repair)"
            say(f"temp file {rel}: {state}")
        for rel in report.detached:
            say(f"gave {rel} its own copy: it had other hard links (they keep the old content, untouched)")
        for moved in report.moved_aside:
            if "records" in moved:
                say(f"set aside {plural(int(moved['records']), 'invalid record')} of {moved['file']} in "
                    f"{moved['moved_to']}; the valid ones stay")
            elif "lines" in moved:
                say(f"set aside line(s) {', '.join(map(str, moved['lines']))} of {moved['file']} in "
                    f"{moved['moved_to']}")
            else:
                say(f"moved corrupt {moved['file']} aside to {moved['moved_to']}")
        for problem in report.problems:
            echo(f"{problem}", err=True)
        remaining = len(report.problems)
        verb = "remains" if remaining == 1 else "remain"
        say(f"{store.where} ({store.backend}): " + ("healthy" if report.healthy
                                                   else f"{plural(remaining, 'problem')} {verb}"))
    if not report.healthy:
        raise typer.Exit(1)


def _server_problem(ctx: typer.Context, report: DoctorReport) -> None:
    """``loki serve`` down while the tree's hooks go to it is a problem of the tree too (docs/serve.md)."""
    from loki.resident.files import RUN_FILE, server_problem
    from loki.storage.paths import find_root
    from loki.storage.problems import Problem

    problem = server_problem(find_root(root_option(ctx)))
    if problem is not None:
        report.problems.append(Problem(RUN_FILE, "", problem, whole_file=False))
