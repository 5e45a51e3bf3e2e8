"""``loki serve``: the resident server of a tree (hooks over HTTP; docs/serve.md).

Starlette and uvicorn (the ``loki-state[serve]`` extra) are imported only when the server itself runs;
``--status``, ``--stop``, ``--env`` and ``--detach`` use :mod:`loki.resident.files` alone.
"""

from __future__ import annotations

import os
import sys

import typer

from loki.cli.common import JSON_HELP, echo, print_json, root_option


def _root(ctx: typer.Context) -> str:
    from loki.storage.paths import find_root

    return os.path.realpath(find_root(root_option(ctx)))


def serve(
    ctx: typer.Context,
    port: int | None = typer.Option(None, "--port", min=1, max=65535,
                                    help="The port (default: the tree's, chosen once and kept in .loki/serve/)."),
    host: str = typer.Option("127.0.0.1", "--host", help="The address to listen on (default: loopback only; "
                             "anything else only behind a TLS proxy, see docs/serve.md)."),
    detach: bool = typer.Option(False, "--detach", help="Start it in the background and return once it answers."),
    status: bool = typer.Option(False, "--status", help="Say whether it runs (exit 0) or not (exit 3)."),
    stop: bool = typer.Option(False, "--stop", help="Stop the running server (SIGTERM: requests in flight finish)."),
    env: bool = typer.Option(False, "--env", help="Print `export LOKI_SERVE_TOKEN=...` for the shell that starts the "
                             "agents (Claude Code's HTTP hooks send it)."),
    open_board: bool = typer.Option(False, "--open", help="Open the board in a web browser (logged in)."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Run the tree's resident server: Claude Code's hooks over HTTP (`loki hooks install --via http`) and the
    live board at / (the printed board URL logs the browser in).

    One per tree and machine: a second one exits 4 naming the first. It listens on 127.0.0.1 at the tree's
    port; every request needs the tree's token (.loki/serve/token). SIGTERM stops it cleanly.
    """
    from loki.errors import NothingToDo, UsageError
    from loki.resident import files

    root = _root(ctx)
    if sum((detach, status, stop, env)) > 1 or (open_board and (status or stop or env)):
        raise UsageError("--detach, --status, --stop and --env go alone (--open only with serving)", option="--detach")
    if env:
        echo(f"export {files.TOKEN_ENV}={files.token(root)}")
        return
    if status or stop:
        run = files.probe(root)
        if run is not None and stop:
            from loki.serve.server import stop as stop_server

            run = stop_server(root)
        if run is None:
            raise NothingToDo("loki serve is not running for this tree")
        if json_output:
            print_json({"running": True, "stopped": stop, **run, "url": files.url_of(run)})
        else:
            echo(f"{'stopped' if stop else 'running'}: pid {run['pid']} at {files.url_of(run)}")
        return
    if detach:
        running = files.probe(root)
        if running is not None:
            from loki.errors import Conflict

            raise Conflict(f"loki serve is already running for this tree (pid {running['pid']} at "
                           f"{files.url_of(running)})", pid=running["pid"], port=running["port"])
        run = files.start_detached(root, port=port, host=None if host == files.DEFAULT_HOST else host)
        if json_output:
            print_json({"running": True, **run, "url": files.url_of(run)})
        else:
            echo(f"started: pid {run['pid']} at {files.url_of(run)} (log: {files.path(root, files.LOG_FILE)})")
            echo(f"board: {files.url_of(run)}login?token={files.token(root)}")
        if open_board:
            import webbrowser

            webbrowser.open(f"{files.url_of(run)}login?token={files.token(root)}")
        return
    from loki.serve.server import serve as run_server

    def ready(run: dict[str, object], login: str) -> None:
        if json_output:
            print_json({"running": True, **run, "url": files.url_of(run)})
        else:
            echo(f"loki serve: pid {run['pid']} at {files.url_of(run)} for {root}")
            echo(f"board: {login}")
        sys.stdout.flush()
        if open_board:
            import webbrowser

            webbrowser.open(login)

    run_server(root, host=host, port=port, ready=ready)


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
