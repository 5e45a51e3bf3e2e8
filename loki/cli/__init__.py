"""The command line: parsing arguments and printing results, nothing else.

Deliberately empty: the fast lanes (:mod:`loki.cli.fast`) and the hook boundary
(:mod:`loki.hooks.boundary`) import from this package on every tool call of every agent, so
importing it must not import typer (~60 ms) or rich (~50 ms).

* :mod:`loki.cli.app` -- the typer application and :func:`loki.cli.app.run`, which the
  console script calls for every command the fast lanes decline;
* :mod:`loki.cli.fast` -- the typer-free lanes (``breaker check``, ``signal emit``,
  ``queue claim``) that :mod:`loki.entry` tries first;
* :mod:`loki.cli.output` -- what both print: errors, the ``--root`` splitter, the shared
  answers of the fast-lane commands;
* one module per command group (``queue``, ``breaker``, ``errormemory`` ...).
"""
