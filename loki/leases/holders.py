"""Who holds which paths right now: the live path leases and the claims of tasks that declare paths.

A task's ``paths`` are leased by its claim (docs/leases.md, "Tasks declare paths"): while the task is in
progress and its claim's lease runs, its paths are held, exclusively, by the agent that claimed it. Nothing
else keeps that lease alive: the heartbeat that renews the claim renews it, and complete, fail, release,
cancel or the claim's expiry end it, because the task then no longer holds a live claim. There is no second
liveness mechanism.

:class:`PathHolders` is what a claim, ``queue ready --explain``, ``lease acquire`` and the hook ask: "which
holder of another agent does this set of patterns collide with?"
"""

from __future__ import annotations

from loki.leases.leases import describe_holder, task_holders
from loki.leases.patterns import normalise, overlaps

__all__ = ["PathHolders", "task_holders"]

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

    from loki.leases.patterns import Pattern


def _literally_apart(a: str, b: str) -> bool:
    """True when two normalised patterns differ in a leading segment that neither spells with a wildcard:
    then no path can start the way both do, so they cannot overlap (False: the full test decides)."""
    for x, y in zip(a.split("/"), b.split("/"), strict=False):
        if any(c in x for c in "*?[\\") or any(c in y for c in "*?[\\"):
            return False
        if x != y:
            return True
    return False


class PathHolders:
    """Every live holder of paths at one instant: path leases and task claims."""

    def __init__(self, leases: Iterable[dict[str, Any]], tasks: Iterable[dict[str, Any]]) -> None:
        self.holders = [*leases, *tasks]
        self._compiled: dict[str, list[Pattern]] = {}

    def _patterns(self, holder: dict[str, Any]) -> list[Pattern]:
        key = holder["lease_id"]
        if key not in self._compiled:
            self._compiled[key] = [normalise(text) for text in holder["patterns"]]
        return self._compiled[key]

    def blocker(self, patterns: Iterable[str], agent: str | None, *, exclusive: bool = True,
                skip_task: str | None = None) -> dict[str, Any] | None:
        """The first holder of another agent that ``patterns`` collide with, with ``overlap`` (the two
        patterns), or None. An agent of None is "someone else" to every holder."""
        mine = [normalise(text) for text in patterns]
        for holder in self.holders:
            if agent is not None and holder["agent"] == agent:
                continue
            if skip_task is not None and holder.get("task") == skip_task and holder.get("claim"):
                continue
            if not (exclusive or holder["exclusive"]):
                continue
            if all(_literally_apart(a.text, text) for a in mine for text in holder["patterns"]):
                continue  # the cheap test first: no pattern of the holder is compiled
            for a in mine:
                hit = next((b for b in self._patterns(holder) if overlaps(a, b)), None)
                if hit is not None:
                    return {**holder, "overlap": [a.text, hit.text]}
        return None

    def reason(self, task: dict[str, Any], agent: str | None) -> dict[str, Any] | None:
        """Why a pending task with paths cannot be claimed by ``agent`` now (None: its paths are free): a
        readiness reason naming the lease, its holder, its task and its expiry."""
        if not task.get("paths"):
            return None
        holder = self.blocker(task["paths"], agent, skip_task=task["id"])
        if holder is None:
            return None
        return {"reason": "paths", "text": "its paths are held: " + describe_holder(holder),
                "lease": holder["lease_id"], "holder": holder["agent"], "task": holder.get("task"),
                "until": holder["expires_at"], "overlap": holder["overlap"]}

