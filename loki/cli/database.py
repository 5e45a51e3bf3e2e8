"""``loki db upgrade``: the database schema of a tree on PostgreSQL (docs/postgres.md)."""

from __future__ import annotations

import typer

from loki.cli.common import JSON_HELP, print_json, root_option, say

app = typer.Typer(help="The PostgreSQL database a team's trees share: its schema.", no_args_is_help=True)


@app.command("upgrade")
def upgrade(
    ctx: typer.Context,
    database: str | None = typer.Option(None, "--database",
                                        help="The database (postgresql://...); default: the one this tree is on "
                                             "(LOKI_DATABASE_URL, else .loki/config/loki.json)."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Apply the schema migrations this loki has and the database lacks (safe to repeat, one machine at a time)."""
    from loki.storage.postgres.admin import upgrade_database, url_of_tree

    url = database or url_of_tree(root_option(ctx))
    report = upgrade_database(url)
    if json_output:
        print_json(report)
        return
    where = f"{report['database']} (schema {report['schema']})"
    if report["migrations"]:
        say(f"upgraded {where} from schema version {report['from_version']} to {report['schema_version']}: "
            + ", ".join(report["migrations"]))
    else:
        say(f"{where} is at schema version {report['schema_version']}, this loki's: nothing to do")
