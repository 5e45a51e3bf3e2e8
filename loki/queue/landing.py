"""Resolving ``landing``: a verified task is completed when its commit is reachable from its branch
(docs/verify.md, "Landing").

A task that must land (``--land BRANCH``, or its type's default: loki/tasks/landing.py) waits in
``queue/landing.json`` after its checks passed, with the commit they ran on. :meth:`Landing.resolve`
asks git, in the repository that holds ``.loki/``, for each such task:

* its commit is an ancestor of (or is) ``refs/heads/BRANCH``, ``refs/remotes/BRANCH`` or
  ``refs/remotes/<any remote>/BRANCH`` (``git merge-base --is-ancestor``): **completed**. A pull
  request merged with a merge commit (or fast-forwarded, or rebased keeping the commit) counts; a
  squash merge makes a new commit and does not (it lands when the deadline's human says so);
* the branch it was made on (``landing.work_branch``) has no ref any more, local or fetched, and
  the commit is not on BRANCH: the work was deleted unmerged, the task goes back to **pending** with
  a note naming the commit (still in git's object store until it is collected);
* past ``landing.deadline`` (``verify.land_deadline_hours``, 24 h): an escalation file and a
  HUMAN_REVIEW_NEEDED signal (not blocking), once; the task keeps waiting and still lands by itself.

loki never fetches: a branch pushed to a remote lands here once something runs ``git fetch``.
git runs outside the queue's lock (it may be slow); each change is then made under the lock, on the
task as it is then (a task completed, cancelled or re-verified meanwhile is left alone).
"""

from __future__ import annotations

import os
import subprocess

from loki.clock import format_ts, parse_ts
from loki.config import setting
from loki.tasks import history
from loki.tasks.record import add_note

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any

    from loki.storage.state import StateStore as Store

LANDING, COMPLETED, PENDING = "landing", "completed", "pending"
SOURCE = "loki watch"
GIT_TIMEOUT_SECONDS = 30.0
TRIGGER = "landing_overdue"


class Git:
    """The few questions landing asks a repository, each a ``git`` process in ``repo``."""

    def __init__(self, repo: str | None) -> None:
        self.repo = repo
        self._refs: list[str] | None = None

    def _run(self, *args: str) -> subprocess.CompletedProcess[bytes] | None:
        try:
            return subprocess.run(["git", *args], cwd=self.repo, capture_output=True, timeout=GIT_TIMEOUT_SECONDS,
                                  check=False, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError):
            return None

    def refs(self) -> list[str]:
        """Every local and remote-tracking branch ref (read once per resolution)."""
        if self._refs is None:
            self.fingerprint()
        assert self._refs is not None
        return self._refs

    def fingerprint(self) -> str:
        """Every branch ref and the commit it names, as one text: unchanged, nothing git would answer about
        landing changed (one ``git for-each-ref``; the watcher's tick compares it)."""
        done = self._run("for-each-ref", "--format=%(refname) %(objectname)", "refs/heads", "refs/remotes")
        text = done.stdout.decode("utf-8", "replace") if done is not None and done.returncode == 0 else ""
        self._refs = [line.split(" ", 1)[0] for line in text.splitlines() if line]
        return text

    def branch_refs(self, branch: str) -> list[str]:
        """The refs that are ``branch``: local, ``origin/main`` given as such, or fetched from any remote."""
        exact = (f"refs/heads/{branch}", f"refs/remotes/{branch}")
        return [ref for ref in self.refs()
                if ref in exact or (ref.startswith("refs/remotes/") and ref.split("/", 3)[3:] == [branch])]

    def contains(self, ref: str, commit: str) -> bool:
        done = self._run("merge-base", "--is-ancestor", commit, ref)
        return done is not None and done.returncode == 0

    def has_commit(self, commit: str) -> bool:
        done = self._run("cat-file", "-e", f"{commit}^{{commit}}")
        return done is not None and done.returncode == 0


def commit_exists(cwd: str | None, commit: str) -> bool:
    """Whether ``commit`` is a commit in the repository at ``cwd`` (what ``loki work`` checks before
    it gives a landing task up)."""
    return Git(cwd).has_commit(commit)


def uncommitted(cwd: str | None = None) -> list[str]:
    """Tracked files changed and not committed in ``cwd`` (``git status --porcelain``, untracked files not
    counted: a build's output is not the work). Work there is not in the commit a task would wait for."""
    done = Git(cwd)._run("status", "--porcelain", "--untracked-files=no")
    if done is None or done.returncode != 0:
        return []
    return [line[3:] for line in done.stdout.decode("utf-8", "replace").splitlines() if line.strip()]


def complete_here(queue: Any, task_id: str, agent: str, *, evidence: tuple[Any, str | None] | None = None,
                  **outcome: Any) -> dict[str, Any]:
    """Complete ``task_id`` as an agent in this working directory does (``loki queue complete``).

    With ``evidence`` (its checks and the commit they ran on) that commit is what a task that must land waits
    for. Without, this directory's ``HEAD`` and its branch are read, two git runs, only when the task turns
    out to need them: a completion of a task that does not land runs no git (the CLI's cold path)."""
    from loki.tasks.verify import Unverified, git_head

    checks, head = evidence if evidence is not None else (None, None)
    try:
        return dict(queue.complete(task_id, agent, evidence=checks, head=head, **outcome))
    except Unverified as refused:
        if evidence is not None or "branch" not in refused.details:
            raise
        head = git_head()  # the task must land and nothing named its commit: this directory's work does
        if not head:
            raise
        return dict(queue.complete(task_id, agent, head=head, work_branch=current_branch(), **outcome))


def current_branch(cwd: str | None = None) -> str | None:
    """The branch ``HEAD`` is on in ``cwd`` (None: detached, or not a git work tree)."""
    done = Git(cwd)._run("symbolic-ref", "--quiet", "--short", "HEAD")
    if done is None or done.returncode != 0:
        return None
    name = done.stdout.decode("utf-8", "replace").strip()
    return name or None


def judge(git: Git, landing: dict[str, Any]) -> tuple[str, str]:
    """``("landed", ref)``, ``("lost", why)`` or ``("waiting", why)`` for one task's ``landing``."""
    branch, commit = str(landing.get("branch")), str(landing.get("commit"))
    targets = git.branch_refs(branch)
    for ref in targets:
        if git.contains(ref, commit):
            return "landed", ref
    work = landing.get("work_branch")
    if isinstance(work, str) and work and work != branch and not git.branch_refs(work) and git.has_commit(commit):
        return "lost", f"its branch {work} was deleted without {commit[:12]} reaching {branch}"
    if not targets:
        return "waiting", f"no branch {branch} here (local or fetched)"
    return "waiting", f"{commit[:12]} is not on {branch} yet"


class Landing:
    """The resolution of the ``landing`` state: by the watcher's tick and ``loki queue land-check``."""

    def __init__(self, store: Store, repo: str | None = None) -> None:
        self.store = store
        if repo is None and store.local_root:  # the repository that holds .loki/ (Queue.repo_root's rule)
            repo = os.path.dirname(os.path.abspath(store.local_root))
        self.repo = repo

    def waiting(self) -> list[dict[str, Any]]:
        return list(self.store.tasks().tasks_in(LANDING))

    def key(self) -> tuple[Any, ...] | None:
        """What a resolution's answer depends on, apart from the clock: the landing tasks (and their
        commits) and every branch ref; None when no task is landing. The watcher's tick resolves again
        only when it changed or a deadline passed (:meth:`due`): one git process a quiet tick, not one
        per task."""
        tasks = self.waiting()
        if not tasks:
            return None
        landing = sorted((str(t.get("id")), str((t.get("landing") or {}).get("commit"))) for t in tasks)
        return (tuple(landing), Git(self.repo).fingerprint())

    def due(self, now: Any) -> bool:
        """A landing task is past its deadline and not escalated yet."""
        return any(_overdue(task, now) and not (task.get("landing") or {}).get("escalation")
                   for task in self.waiting())

    def resolve(self, *, include_waiting: bool = False) -> list[dict[str, Any]]:
        """Complete the landed, requeue the lost, escalate the overdue; returns one event per change:
        ``{"action": "landed"|"unlanded"|"landing_overdue", "task_id", "detail"}`` (with
        ``include_waiting``, one ``waiting`` event per task left as it was, saying why)."""
        tasks = self.waiting()
        if not tasks:
            return []
        git = Git(self.repo)
        verdicts = {task["id"]: (str((task.get("landing") or {}).get("commit")),
                                 judge(git, task.get("landing") or {})) for task in tasks}
        now_dt = self.store.clock.now()
        overdue = [task["id"] for task in tasks if verdicts[task["id"]][1][0] == "waiting" and _overdue(task, now_dt)]
        waiting = [{"action": "waiting", "task_id": task_id, "detail": f"{task_id}: waiting: {why}"}
                    for task_id, (_, (verdict, why)) in verdicts.items()
                    if include_waiting and verdict == "waiting" and task_id not in overdue]
        if not any(verdict[0] != "waiting" for _, verdict in verdicts.values()) and not overdue:
            return waiting  # the common tick: nothing moved, no lock taken
        events: list[dict[str, Any]] = []
        moved: list[dict[str, Any]] = []  # landed or unlanded: their paths are free now
        signals: list[tuple[str, str, str]] = []
        answered: list[tuple[str, str]] = []  # (escalation file, resolution): the overdue question is moot
        with self.store.tasks().transaction() as unit:
            now_dt = self.store.clock.now()  # again, inside the lock
            now = format_ts(now_dt)
            for task_id, (commit, (verdict, why)) in verdicts.items():
                found = unit.find(task_id, (LANDING,))
                if found is None or (found[1].get("landing") or {}).get("commit") != commit:
                    continue  # completed, cancelled or re-verified meanwhile: not what git was asked about
                task = found[1]
                landing = task["landing"]
                if verdict == "landed":
                    landing["landed_at"] = now
                    landing["ref"] = why
                    task["completed_at"] = now
                    task["updated_at"] = now
                    detail = f"{commit[:12]} is on {why}"
                    history.record(task, "landed", now, by=SOURCE, to=COMPLETED, detail=detail)
                    unit.move(task, LANDING, COMPLETED)
                    moved.append(task)
                    events.append({"action": "landed", "task_id": task_id, "detail": f"{task_id}: landed: {detail}"})
                    if landing.get("escalation"):
                        answered.append((landing["escalation"], f"landed: {detail} ({SOURCE}, {now})"))
                elif verdict == "lost":
                    task.pop("landing")
                    task.pop("completed_by", None)
                    task["available_at"] = now
                    task["updated_at"] = now
                    text = (f"not landed: {why}; its work was commit {commit} (on branch "
                            f"{landing.get('work_branch')}); back to pending")
                    add_note(task, text, now, SOURCE)
                    history.record(task, "unlanded", now, by=SOURCE, to=PENDING, detail=text)
                    unit.move(task, LANDING, PENDING)
                    moved.append(task)
                    events.append({"action": "unlanded", "task_id": task_id, "detail": f"{task_id}: {text}"})
                    if landing.get("escalation"):
                        answered.append((landing["escalation"], f"unlanded: {why}; back to pending ({SOURCE}, {now})"))
                elif task_id in overdue and _overdue(task, now_dt) and not landing.get("escalation"):
                    file_name = self._escalate(task, why, now)
                    landing["escalation"] = file_name
                    landing["escalated_at"] = now
                    task["updated_at"] = now
                    history.record(task, "escalated", now, by=SOURCE,
                                   detail=f"not landed on {landing['branch']} by {landing['deadline']}: "
                                          f"escalations/{file_name}")
                    unit.update(LANDING, task)
                    signals.append((task_id, why, file_name))
                    events.append({"action": TRIGGER, "task_id": task_id,
                                   "detail": f"{task_id}: not landed on {landing['branch']} by {landing['deadline']}"
                                             f" ({why}): escalations/{file_name}"})
            # what Queue.rotate_hot does (the queue module imports this one, not the other way round)
            unit.rotate(COMPLETED, int(setting(self.store.config, "queue", "completed_hot_limit")))
        from loki.leases.leases import claim_moved

        for task in moved:  # a landing task held its paths (docs/leases.md): this machine's copy follows, as
            claim_moved(self.store, task)  # Queue._paths_moved does when a claim ends
        for task_id, why, file_name in signals:
            self._signal(task_id, why, file_name)
        if answered:
            from loki.queue.escalations import mark_resolved

            for file_name, text in answered:  # after the unit, as `queue close` resolves a task's escalations
                mark_resolved(self.store, file_name, text)
        return events + waiting

    def _escalate(self, task: dict[str, Any], why: str, now: str) -> str:
        from loki.queue.escalations import attempts_table, write_file

        landing = task["landing"]
        options = [f"Merge {landing['commit'][:12]} into {landing['branch']} (or fetch the branch that has it): "
                   "the task completes at the next tick.",
                   "Cancel the task (`loki queue cancel`): the work is dropped.",
                   "Leave it: it keeps waiting and lands whenever the commit reaches the branch."]
        values = {"task_title": task["title"], "task_id": task["id"],
                  "failure_count": str(len(task.get("attempts") or [])),
                  "trigger": TRIGGER, "error_summary": f"Verified, but not landed on {landing['branch']} by "
                                                       f"{landing['deadline']}: {why}.",
                  "attempts_log": attempts_table(task.get("attempts") or []),
                  "agent_analysis": f"The work is commit {landing['commit']} (made on branch "
                                    f"{landing.get('work_branch') or '(detached HEAD)'}).",
                  "recommended_options": "\n".join(f"{n}. {text}" for n, text in enumerate(options, start=1)),
                  "timestamp": now, "agent": "loki"}
        rel = write_file(self.store, task_id=task["id"], values=values, now=now)
        return rel.rsplit("/", 1)[-1]

    def _signal(self, task_id: str, why: str, file_name: str) -> None:
        from loki.signals import types as signaltypes
        from loki.signals.emit import emit

        # Not blocking: the task keeps waiting in landing (and lands by itself if the commit arrives).
        emit(self.store, signaltypes.HUMAN_REVIEW_NEEDED,
             {"reason": f"{TRIGGER}: {why}", "context": f"escalations/{file_name}", "blocking": False,
              "escalation": file_name}, task_id=task_id, severity="medium", agent="loki")


def _overdue(task: dict[str, Any], now: Any) -> bool:
    deadline = (task.get("landing") or {}).get("deadline")
    try:
        return isinstance(deadline, str) and parse_ts(deadline) <= now
    except ValueError:
        return False
