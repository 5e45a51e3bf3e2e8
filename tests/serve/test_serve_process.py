"""`loki serve` as a real process: one per tree, a second one exits naming the first, SIGTERM stops it
cleanly, a SIGKILL leaves nothing that misleads, the SessionStart hook starts it, doctor reports it down."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from loki.resident import files
from tests.helpers import loki_proc, process_gone, snapshot_bytes, tree_problems
from tests.hooks.test_hooks import hook

pytestmark = pytest.mark.slow


@pytest.fixture
def tree(project: Path) -> Iterator[str]:
    root = str(project / ".loki")
    yield root
    run = files.read_run(root)
    if run is not None and isinstance(run.get("pid"), int):
        with contextlib.suppress(ProcessLookupError):
            os.kill(run["pid"], signal.SIGKILL)


def detach(root: str) -> dict[str, object]:
    done = loki_proc(["serve", "--detach", "--json"], root=root)
    assert done.code == 0, done.stderr
    run: dict[str, object] = done.json()
    return run


def test_one_server_per_tree_sigterm_stops_it_cleanly(tree: str) -> None:
    run = detach(tree)
    pid = run["pid"]
    assert isinstance(pid, int) and run["host"] == "127.0.0.1" and run["port"] == files.configured_port(tree)
    assert os.stat(files.path(tree, files.TOKEN_FILE)).st_mode & 0o777 == 0o600
    status = loki_proc(["serve", "--status"], root=tree)
    assert status.code == 0 and f"pid {pid}" in status.stdout

    # A second one, in the foreground or detached: exit 4, naming the first.
    second = loki_proc(["serve"], root=tree, timeout=30)
    assert second.code == 4 and f"already running for this tree (pid {pid} at http://127.0.0.1:" in second.stderr
    assert loki_proc(["serve", "--detach"], root=tree).code == 4

    stopped = loki_proc(["serve", "--stop"], root=tree)
    assert stopped.code == 0 and process_gone(pid)
    assert files.read_run(tree) is None
    assert loki_proc(["serve", "--status"], root=tree).code == 3
    assert tree_problems(tree) == []


def test_sigterm_exits_zero_with_the_run_record_removed(tree: str) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "loki", "--root", tree, "serve"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert f"loki serve: pid {proc.pid} at http://127.0.0.1:" in proc.stdout.readline()
    assert files.probe(tree) is not None
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert files.read_run(tree) is None


def test_after_kill_9_nothing_misleads_and_it_starts_again(tree: str) -> None:
    first = detach(tree)
    assert isinstance(first["pid"], int)
    os.kill(first["pid"], signal.SIGKILL)
    assert process_gone(first["pid"])
    assert files.read_run(tree) is not None  # left behind ...
    assert files.probe(tree) is None  # ... and not trusted
    assert loki_proc(["serve", "--status"], root=tree).code == 3
    second = detach(tree)
    assert second["pid"] != first["pid"] and second["port"] == first["port"]  # the tree keeps its port


def test_a_port_another_program_holds_is_one_clear_error(tree: str) -> None:
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        done = loki_proc(["serve", "--port", str(port)], root=tree, timeout=30)
    assert done.code == 1 and f"port {port} on 127.0.0.1 is in use by another program" in done.stderr
    assert "Traceback" not in done.stderr


def test_session_start_starts_the_server_and_says_so(tree: str, project: Path) -> None:
    assert loki_proc(["hooks", "install", "--via", "http"], root=tree).code == 0
    token = files.token(tree)
    assert token is not None
    started = hook("session-start", {"session_id": "s1", "cwd": str(project)}, cwd=project,
                   env={files.TOKEN_ENV: token})
    assert started.code == 0
    context = json.loads(started.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "loki serve was not running: started it" in context and "WARNING" not in context
    assert files.probe(tree) is not None
    again = hook("session-start", {"session_id": "s2", "cwd": str(project)}, cwd=project,
                 env={files.TOKEN_ENV: token})
    assert "loki serve" not in again.stdout  # it answers: nothing to say
    assert loki_proc(["doctor"], root=tree).code == 0


def test_session_start_warns_when_it_cannot_start_the_server(tree: str, project: Path) -> None:
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        assert loki_proc(["serve", "--port", str(other.getsockname()[1]), "--status"], root=tree).code == 3
        files.choose_port(tree, other.getsockname()[1])
        assert loki_proc(["hooks", "install", "--via", "http"], root=tree).code == 0
        answer = hook("session-start", {"session_id": "s1", "cwd": str(project)}, cwd=project,
                      env={files.TOKEN_ENV: files.token(tree) or ""})
        doctor = loki_proc(["doctor"], root=tree)
    assert answer.code == 0
    said = json.loads(answer.stdout)
    assert "WARNING: loki serve is not running and could not be started" in said["systemMessage"]
    assert "is in use by another program" in said["hookSpecificOutput"]["additionalContext"]
    assert doctor.code == 1 and "loki serve is not answering" in doctor.stderr


def test_stop_tells_the_person_the_server_is_down(tree: str, project: Path) -> None:
    assert loki_proc(["hooks", "install", "--via", "http"], root=tree).code == 0
    answer = hook("stop", {"session_id": "s1", "cwd": str(project)}, cwd=project)
    assert answer.code == 0 and "loki serve is not answering" in json.loads(answer.stdout)["systemMessage"]
    assert loki_proc(["hooks", "install"], root=tree).code == 0  # back to command hooks: no server wanted
    assert hook("stop", {"session_id": "s1", "cwd": str(project)}, cwd=project).stdout == ""


def test_server_imports_stay_off_the_cold_paths(tree: str, project: Path) -> None:
    code = ("import sys\nfrom loki.entry import main\nsys.argv = ['loki'] + sys.argv[1:]\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'starlette', 'uvicorn', 'anyio'}),"
            " file=sys.stderr)")
    for args in (["--root", tree, "serve", "--status"], ["--root", tree, "hooks", "install", "--via", "http"],
                 ["--root", tree, "doctor"], ["--root", tree, "status"]):
        done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60)
        assert done.stderr.strip().splitlines()[-1] == "[]", (args, done.stderr)
    before = snapshot_bytes(tree)
    done = subprocess.run([sys.executable, "-c", code, "hook", "pre-tool-use"], capture_output=True, text=True,
                          timeout=60, cwd=project, input=json.dumps({"tool_name": "Bash", "tool_input": {}}))
    assert done.stderr.strip().splitlines()[-1] == "[]"
    assert snapshot_bytes(tree) == before


def test_without_the_serve_extra_it_says_what_to_install(tree: str) -> None:
    code = ("import sys\nsys.modules['uvicorn'] = None\nfrom loki.entry import main\n"
            f"main(['--root', {tree!r}, 'serve'])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "loki serve needs the serve extra (uvicorn is not installed): pip install 'loki-state[serve]'" in done.stderr
    assert "Traceback" not in done.stderr


def test_sessions_starting_at_once_share_one_server(tree: str) -> None:
    """Eight SessionStart hooks finding no server each start one: one wins the lock, the others wait for it."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4) as pool:
        runs = list(pool.map(lambda _: files.start_detached(tree), range(4)))
    assert len({run["pid"] for run in runs}) == 1
    assert files.probe(tree) is not None


def test_open_logs_the_browser_in(tree: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import webbrowser

    from tests.helpers import cli

    opened: list[str] = []
    monkeypatch.setattr(webbrowser, "open", opened.append)
    done = cli(["serve", "--detach", "--open"], root=tree)
    assert done.code == 0, done.stderr
    run = files.read_run(tree)
    assert run is not None
    assert opened == [f"http://127.0.0.1:{run['port']}/login?token={files.token(tree)}"]
    assert f"board: {opened[0]}" in done.stdout


def test_the_suites_cleanup_stops_the_servers_a_test_started_and_no_other(tmp_path: Path, template_tree: Path) -> None:
    """`stop_servers` (tests/conftest.py): a server started for a tree under the test's directory is stopped; one
    for a directory whose name merely begins the same way is left alone."""
    import shutil

    from tests.helpers import servers_under, stop_servers_under

    mine, neighbour = tmp_path / "a" / ".loki", tmp_path / "a2" / ".loki"
    for tree in (mine, neighbour):
        shutil.copytree(template_tree, tree)
    started = [files.start_detached(str(tree))["pid"] for tree in (mine, neighbour)]
    try:
        assert servers_under(tmp_path / "a") == [started[0]]
        assert stop_servers_under(tmp_path / "a") == [started[0]]
        assert process_gone(started[0])
        assert servers_under(tmp_path / "a2") == [started[1]]
    finally:
        stop_servers_under(tmp_path)
    assert process_gone(started[1])
