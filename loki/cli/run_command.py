"""``loki run [OPTIONS] -- CMD [ARGS]...``: a flaky command behind a breaker, with retries.

(Named ``run_command`` rather than ``run``: "run" already names :func:`loki.cli.app.run`, the
function the console script calls.)

Everything after ``--`` -- or after the first word that is not one of loki's options -- is
the command, its own options included (``CONTEXT`` below). stdout belongs to the command;
loki's progress lines and the ``--json`` summary go to stderr.
"""

from __future__ import annotations

import json
import sys

import typer

from loki.cli.common import store_from

CONTEXT = {"allow_interspersed_args": False}
"""Stop option parsing at the command's first word, so ``loki run curl -sf URL`` works too."""


def run(
    ctx: typer.Context,
    command: list[str] = typer.Argument(None, metavar="-- CMD [ARGS]...",
                                        help="The command to run, after `--` (its own options included)."),
    breaker: str = typer.Option(None, "--breaker", help="Check this breaker before each attempt and record "
                                "each result in it (e.g. api/claude)."),
    retries: int = typer.Option(5, "--retries", help="Waits allowed after a failure or a refusal by the breaker."),
    initial_delay: float = typer.Option(5.0, "--initial-delay", help="Seconds to wait after the first failure."),
    max_delay: float = typer.Option(300.0, "--max-delay", help="The longest backoff wait, in seconds."),
    multiplier: float = typer.Option(2.0, "--multiplier", help="Each backoff wait is this many times the last."),
    jitter: float = typer.Option(0.1, "--jitter", help="Fraction of each backoff wait taken off at random (0-1)."),
    json_output: bool = typer.Option(False, "--json", help="At the end, print a JSON summary on stderr (stdout "
                                     "is the command's); no progress lines."),
) -> None:
    """Run CMD; retry with exponential backoff and jitter; wait out rate limits (HTTP 429, Retry-After)
    and an open breaker. Exits with CMD's last exit code (75: breaker still open; 127: no such command)."""
    from loki.breakers.runner import RetryPolicy, Runner

    policy = RetryPolicy(retries=retries, initial_delay=initial_delay, max_delay=max_delay,
                         multiplier=multiplier, jitter=jitter)
    breakers = None
    if breaker is not None:
        from loki.breakers.breakers import Breakers

        breakers = Breakers(store_from(ctx))
    runner = Runner(command or [], policy=policy, breakers=breakers, breaker=breaker,
                    notify=None if json_output else _progress)
    result = runner.run()
    if json_output:
        from loki.text.textsafe import json_for_terminal

        sys.stderr.write(json_for_terminal(json.dumps(result.to_json(), ensure_ascii=False)) + "\n")
    raise typer.Exit(result.exit_code)


def _progress(message: str) -> None:
    from loki.text.textsafe import for_terminal

    sys.stderr.write(f"loki run: {for_terminal(message)}\n")
    sys.stderr.flush()
