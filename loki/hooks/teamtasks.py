"""Claude Code's own task list meets loki's queue (docs/verify.md, "Agents that complete by themselves").

Claude Code 2.1.330 gives a session a task list (the ``TaskCreate``/``TaskUpdate`` tools; an agent team's
shared list) and runs the ``TaskCompleted`` hook when a task is being marked completed: by ``TaskUpdate``
``status: "completed"``, and for a teammate's in-progress tasks when the teammate stops. The hook can refuse
the completion: exit 2, or (what loki answers, so that it never exits 2) ``{"decision": "block", "reason":
...}`` on exit 0. Claude Code then leaves the task as it was and hands the reason to the model as the
tool's result. Both were tried with the real CLI; tests/agents/test_agent_teamtasks.py keeps loki's answer
checked.

* ``TaskCompleted``: the Claude task is mapped to a loki task (:func:`loki_tasks`); when that task has
  declared checks (``--verify``), they run here, in the payload's ``cwd``, exactly as ``loki work`` runs them
  (loki/work/checks.py: under the guard, each with the timeout, output redacted), and the first that fails
  refuses the completion, naming the check and its output's head. No check, no loki task: nothing is said.
* ``Stop``: :func:`stop_reminder`, a line for the user (``systemMessage``) naming the failing checks of the
  tasks this agent holds. Never ``additionalContext``: on Stop, Claude Code 2.1.330 treats that as a reason
  to continue (seen: the session went on for every turn the scripted model had), so it would block.

Not a hot path (neither event comes with a tool call): the store is opened as the writing hooks open it.
"""

from __future__ import annotations

import os
import re

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any

    from loki.storage.state import StateStore as Store

MARKER = re.compile(r"\bloki:([A-Za-z0-9][A-Za-z0-9._-]{0,127})")
"""``loki:ID`` in a Claude task's subject or description names the loki task it is (the id's own pattern,
schemas/common.json)."""
WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
"""The words of a text that could be task ids (a sentence's full stop is dropped from the end)."""
HELD_STATES = ("in-progress",)
NAMED_STATES = ("pending", "in-progress", "blocked")
"""A task named by its marker may be in any of these (a completed or dead-lettered one has nothing to gate)."""
REASON_CHARS = 1500


def loki_tasks(store: Store, payload: dict[str, Any]) -> list[dict[str, Any]]:
    """The loki tasks a Claude task's completion stands for, named in the Claude task's subject or description:

    1. ``loki:ID`` names a task that is not done, whoever holds it (how a lead ties an agent team's task to the
       queue: it works for every teammate, whatever its environment);
    2. else a task this agent holds (``LOKI_TASK_ID``, which ``loki work`` sets, else ``LOKI_AGENT``'s live
       claims) whose id is a word of the text (``Finish task t1``).

    Nothing named: not a loki task. An agent's own to-do items (``Read the failing test``, ``Fix add()``) are
    completed freely: gating each on the whole task's checks would block every step until the last and run
    the checks for each."""
    text = " ".join(str(payload.get(field) or "") for field in ("task_subject", "task_description"))
    named = list(dict.fromkeys(MARKER.findall(text)))
    if named:
        view = store.tasks().view(NAMED_STATES)
        return [task for state in NAMED_STATES for task in view[state]
                if isinstance(task, dict) and task.get("id") in named]
    words = {word.rstrip(".") for word in WORD.findall(text)}
    return [task for task in held_tasks(store) if task.get("id") in words]


def held_tasks(store: Store) -> list[dict[str, Any]]:
    """The tasks in progress this session's agent holds, their claims live: ``LOKI_TASK_ID``'s, else
    ``LOKI_AGENT``'s."""
    task_id = os.environ.get("LOKI_TASK_ID") or None
    agent = os.environ.get("LOKI_AGENT") or None
    if task_id is None and agent is None:
        return []
    from loki.clock import format_ts

    now = format_ts(store.clock.now())
    running = [task for task in store.tasks().view(HELD_STATES)["in-progress"] if isinstance(task, dict)
               and str(task.get("lease_until") or "") > now]  # an expired claim is no longer held
    if task_id is not None:
        return [task for task in running if task.get("id") == task_id]
    return [task for task in running if task.get("claimed_by") == agent]


def task_completed(payload: dict[str, Any], root: str, store: Store) -> dict[str, Any] | None:
    """The ``TaskCompleted`` answer: ``decision: "block"`` when a declared check of the loki task fails."""
    from loki.hooks.payload import work_dir
    from loki.tasks import verify

    config = store.config
    for task in loki_tasks(store, payload):
        wanted = verify.checks_for(task, config)
        if not wanted:
            continue
        failed = _first_failure(wanted, work_dir(payload), verify.timeout_seconds(config))
        if failed is not None:
            return {"decision": "block", "reason": _reason(task, payload, failed)}
    return None


def _first_failure(wanted: list[str], cwd: str, timeout: float) -> str | None:
    """The failure message of the first check that fails (loki/work/checks.py's wording), or None."""
    from loki.work.checks import Checks, failure
    from loki.work.launch import GuardedLauncher

    launcher = GuardedLauncher()
    try:
        results = Checks(launcher, timeout=timeout, cwd=cwd).run(wanted)
    finally:
        launcher.close()
    for index, result in enumerate(results, 1):
        if not result.passed:
            return failure(result, index, len(wanted)).message
    return None


def _reason(task: dict[str, Any], payload: dict[str, Any], failed: str) -> str:
    from loki.text.textsafe import for_terminal as esc

    mine = esc(str(payload.get("task_subject") or payload.get("task_id") or "this task"))
    text = (f"loki: not completed: {mine} is loki task {esc(str(task.get('id')))} ({esc(str(task.get('title')))}), "
            f"whose declared checks must pass first, and one failed. {esc(failed)}")
    if len(text) > REASON_CHARS:
        text = text[:REASON_CHARS - 20] + "\n[... cut short]"
    return text + "\nFix the cause, then mark the task completed again (the checks run again then)."


def stop_reminder(store: Store) -> str | None:
    """A line for the user when the agent stops holding tasks whose last attempt failed a declared check:
    the task, the check, the failure's head. Advisory only."""
    from loki.tasks.verify import failing_check
    from loki.text.textsafe import for_terminal as esc
    from loki.wording import plural

    failing = [(task, found) for task in held_tasks(store) if (found := failing_check(task)) is not None]
    if not failing:
        return None
    named = "; ".join(f"{esc(str(task.get('id')))} ({esc(str(task.get('title')))}): {esc(found['headline'])}"
                      for task, found in failing[:3])
    more = f" and {len(failing) - 3} more" if len(failing) > 3 else ""
    return (f"loki: this agent holds {plural(len(failing), 'task')} whose declared checks failed at the last "
            f"attempt: {named}{more}. The task completes only when its checks pass (`loki queue show ID` has "
            "the output).")
