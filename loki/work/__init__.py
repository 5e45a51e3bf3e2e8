"""``loki work``: the agent loop (claim, run the agent's command, heartbeat, complete or fail).

loop.py the loop; placeholders.py the command's ``{title}``-style placeholders; heartbeat.py the lease
renewer; launch.py and guard.py how the command is started and taken down with its loop; scratch.py
the task and result files; failure.py what a failed run records; outlook.py what ``--until-empty``
waits for. Empty on purpose (docs/STYLE.md).
"""
