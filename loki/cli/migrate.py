"""``loki migrate --to``: move a whole team's state between the files and PostgreSQL, verified."""

from __future__ import annotations

import typer

from loki.cli.common import JSON_HELP, print_json, root_option, say


def migrate(
    ctx: typer.Context,
    to: str = typer.Option(..., "--to", metavar="postgresql://...|files",
                           help="Where the state goes: a PostgreSQL URL (an empty database or schema), or `files` "
                                "(this tree's .loki/ directory)."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Move every task, entry, document, log and item to the target, compare both sides record by record
    (counts and SHA-256), then switch this tree to it. Refuses a target that already holds state. Every other
    command on this tree is held out (exit 5) until it ends; run again after an interruption, it finishes
    the job, and `--to` where the state still is rolls the interrupted copy back."""
    from loki.admin.migrate import migrate_tree

    report = migrate_tree(root_option(ctx), to)
    if json_output:
        print_json(report)
        return
    if report.get("rolled_back"):
        say(f"the interrupted migration to {report['target']} is rolled back: this tree keeps its state where it was")
        if report["database_may_hold_copy"]:
            say(f"{report['database_may_hold_copy']} may hold the copy it committed: a later `loki migrate` there "
                "needs it emptied first")
        return
    if report.get("finished_interrupted"):
        say("finished the interrupted migration (its copy had been verified)")
    moved = {name: info["records"] for name, info in report["sections"].items() if info["records"]}
    say(f"moved {', '.join(f'{count} {name}' for name, count in moved.items()) or 'an empty tree'} "
        f"from {report['source']} to {report['target']}; verified (counts and SHA-256 of every record)")
    if report["set_aside"]:
        say(f"the files' old state is kept in {report['set_aside']} (nothing was deleted)")
    say(f"this tree now keeps its state in {'its files' if report['backend'] == 'files' else report['target']}")
