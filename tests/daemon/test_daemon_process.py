"""The daemon as users run it: `supergrep daemon start|status|stop`, stale files, kill -9,
socket permissions, searches through it (same bytes and exit codes as --direct), fallback."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import threading
import time

import pytest

from conftest import cli_env, run_cli, wait_for
from supergrep.daemon import client, lifecycle, paths


def test_lifecycle_start_status_stop(_isolated_home, tiny_model):
    env = cli_env(_isolated_home)
    r = run_cli(["daemon", "status"], env)
    assert r.returncode == 1 and "not running" in r.stdout
    r = run_cli(["daemon", "start"], env)
    assert r.returncode == 0 and "started (pid" in r.stdout, r.stdout + r.stderr
    st = json.loads(run_cli(["daemon", "status", "--json"], env).stdout)
    assert st["running"] and st["answering"] and st["pid"] > 0 and st["rss_bytes"] > 0
    r = run_cli(["daemon", "start"], env)
    assert r.returncode == 0 and "already running" in r.stdout
    # owner-only: the directory is 0700, the socket 0600
    assert stat.S_IMODE(os.stat(paths.daemon_dir()).st_mode) == 0o700
    mode = os.stat(paths.socket_path()).st_mode
    assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600
    r = run_cli(["daemon", "stop"], env)
    assert r.returncode == 0 and "stopped" in r.stdout
    assert not os.path.exists(paths.socket_path()) and not os.path.exists(paths.pid_path())
    r = run_cli(["daemon", "stop"], env)
    assert r.returncode == 0 and "not running" in r.stdout
    log = open(paths.log_path()).read()
    assert "daemon serving on" in log and "daemon stopped" in log


def test_stale_pid_and_socket_files_are_cleaned(_isolated_home):
    env = cli_env(_isolated_home)
    os.makedirs(paths.daemon_dir(), mode=0o700, exist_ok=True)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(paths.socket_path())  # a socket file nobody listens on, as a crash leaves it
    s.close()
    with open(paths.pid_path(), "w") as fh:
        json.dump({"pid": 999999}, fh)
    with pytest.raises(client.DaemonUnavailable):
        client.call({"op": "ping"})
    r = run_cli(["daemon", "status"], env)
    assert r.returncode == 1 and "removed stale" in r.stdout
    assert not os.path.exists(paths.socket_path()) and not os.path.exists(paths.pid_path())
    # a stale socket does not stop a search: it falls back to the direct path
    assert lifecycle.probe().running is False


def test_kill_9_then_restart(_isolated_home, indexed):
    env = cli_env(_isolated_home)
    assert run_cli(["daemon", "start"], env).returncode == 0
    pid = client.ping()["pid"]
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not lifecycle.lock_held(), what="the lock to be released")
    assert os.path.exists(paths.socket_path())  # left behind
    r = run_cli(["search", "retry_with_backoff", str(indexed), "--mode", "lexical", "--json"], env)
    assert r.returncode == 0 and json.loads(r.stdout)["count"] > 0  # direct, via the fallback
    r = run_cli(["daemon", "start"], env)
    assert r.returncode == 0 and "started" in r.stdout, r.stdout + r.stderr
    assert client.ping()["pid"] != pid
    r = run_cli(["search", "retry_with_backoff", str(indexed), "--mode", "lexical", "--json"], env)
    assert r.returncode == 0 and json.loads(r.stdout)["count"] > 0
    assert client.call({"op": "status"})["counters"]["searches"] == 1  # this one went through the daemon
    assert run_cli(["daemon", "stop"], env).returncode == 0


SEARCHES = [
    ["retry with backoff", "{root}", "-n", "3"],
    ["sessions", "{root}", "--json", "-C", "1", "--mode", "lexical"],
    ["zzzqqqxxx", "{root}", "--mode", "lexical"],  # no results: exit 1
    ["zzzqqqxxx", "{root}", "--mode", "lexical", "--json"],
    ["x", "/no/such/dir", "--mode", "lexical"],  # error: exit 2
    ["x", "{root}", "-t", "klingon"],  # click's error, handed back by the daemon
    ["password", "{root}/app", "--mode", "lexical", "-n", "2"],  # a sub-directory
    ["search", "expire", "{root}", "-t", "markdown", "--mode", "lexical", "--json"],
    ["sessions", "{root}", "-T", "app/", "--mode", "lexical"],
    ["", "{root}", "--mode", "lexical"],  # empty query: exit 2
]


def test_daemon_output_is_the_direct_output(daemon, indexed):
    env = daemon["env"]
    for args in SEARCHES:
        args = [a.format(root=indexed) for a in args]
        via = run_cli(args, env)
        direct = run_cli([*args, "--direct"], env)
        assert (via.returncode, via.stdout, via.stderr) == (direct.returncode, direct.stdout, direct.stderr), args
    counters = client.call({"op": "status"})["counters"]
    assert counters["searches"] >= 6  # the successful ones went through the daemon
    before = counters["searches"]
    r = run_cli(["retry", str(indexed), "--mode", "lexical", "--direct"], env)
    assert r.returncode == 0 and client.call({"op": "status"})["counters"]["searches"] == before
    r = run_cli(["retry", str(indexed), "--mode", "lexical"], {**env, "SUPERGREP_NO_DAEMON": "1"})
    assert r.returncode == 0 and client.call({"op": "status"})["counters"]["searches"] == before


def test_a_search_through_the_daemon_loads_no_numpy(daemon, indexed):
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "supergrep", "retry", str(indexed), "--mode",
                        "lexical"], env=daemon["env"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "retry_with_backoff" in r.stdout
    imported = {line.split("|")[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    assert "supergrep.daemon.client" in imported
    assert not imported & {"numpy", "click", "torch", "supergrep.cli"}


def test_register_add_list_remove(daemon, indexed):
    env = daemon["env"]
    r = run_cli(["daemon", "add", str(indexed)], env)
    assert r.returncode == 0 and "registered" in r.stdout
    wait_for(lambda: client.call({"op": "list"})["projects"][0]["state"] == "ready", what="ready")
    out = run_cli(["daemon", "list", "--json"], env).stdout
    assert [json.loads(line)["root"] for line in out.splitlines()] == [str(indexed)]
    st = run_cli(["daemon", "status"], env)
    assert st.returncode == 0 and f"project:  {indexed}: ready, watching, 3 files" in st.stdout
    r = run_cli(["daemon", "remove", str(indexed)], env)
    assert r.returncode == 0 and "removed" in r.stdout
    assert client.call({"op": "list"})["projects"] == []


def test_add_without_a_daemon_writes_the_registry(_isolated_home, indexed):
    env = cli_env(_isolated_home)
    r = run_cli(["daemon", "add", "--quiet", str(indexed)], env)
    assert r.returncode == 0 and r.stdout == ""
    r = run_cli(["daemon", "list"], env)
    assert r.stdout.startswith(f"{indexed}\t(daemon stopped)")


def test_concurrent_clients_and_a_save_becomes_searchable(daemon, indexed):
    """The short version of benchmarks/daemon_load.py: clients in threads, files written
    meanwhile; no errors, every write found."""
    root = indexed
    client.call({"op": "add", "path": str(root)})
    wait_for(lambda: client.call({"op": "list"})["projects"][0]["state"] == "ready", what="ready")
    errors, stop = [], threading.Event()

    def worker():
        while not stop.is_set():
            try:
                a = client.call({"op": "search", "query": "retry sessions", "path": str(root), "cwd": "/",
                                 "mode": "lexical", "render": {"format": "json", "context": 2}}, timeout=60)
                if a["exit_code"] != 0:
                    errors.append(a)
            except Exception as exc:  # collected and reported below
                errors.append(repr(exc))

    threads = [threading.Thread(target=worker) for _ in range(10)]
    for t in threads:
        t.start()
    latencies = []
    for name in ("narwhalish", "ocelotlike", "pangolinish"):
        t0 = time.monotonic()
        (root / "app" / f"{name}.py").write_text(f"def {name}():\n    pass\n")
        wait_for(lambda name=name: client.call({"op": "search", "query": name, "path": str(root), "cwd": "/",
                                                "mode": "lexical"})["count"], what=name)
        latencies.append(time.monotonic() - t0)
    stop.set()
    for t in threads:
        t.join()
    assert errors == []
    assert client.call({"op": "status"})["counters"]["errors"] == 0
    assert max(latencies) < 10  # 2 s on a quiet machine (docs/daemon.md); generous under load


def _native_client():
    """The native client's path; missing only where `pip install` had no C compiler (and then
    not where `make test` requires the compiled parts)."""
    exe = paths.native_client()
    if exe is None:
        if os.environ.get("SUPERGREP_REQUIRE_NATIVE") == "1":
            raise AssertionError("SUPERGREP_REQUIRE_NATIVE=1 but the native client (daemon/sgr) was not built")
        pytest.skip("the native client is not built here")
    return exe


def _script(name):
    import sys
    from pathlib import Path

    path = Path(sys.executable).parent / name  # the console script beside the interpreter
    if not path.exists():
        pytest.skip(f"no {name} console script beside {sys.executable}")
    return str(path)


def test_the_native_client_prints_what_the_cli_prints(daemon, indexed):
    """`sgr` (daemon/sgr.c) as `supergrep init` sets it up: the same bytes on stdout and stderr
    and the same exit status as the Python CLI's direct path, for searches the daemon answers
    (counted) and for everything it hands back (other commands, errors click words)."""
    import subprocess

    exe, script = _native_client(), _script("supergrep")
    env = {**daemon["env"], "SUPERGREP_FALLBACK": script}
    before = client.call({"op": "status"})["counters"]["searches"]
    answered = 0
    for args in SEARCHES:
        args = [a.format(root=indexed) for a in args]
        native = subprocess.run([exe, *args], env=env, capture_output=True, text=True, timeout=180)
        direct = subprocess.run([script, *args, "--direct"], env=env, capture_output=True, text=True, timeout=180)
        assert (native.returncode, native.stdout, native.stderr) == (direct.returncode, direct.stdout,
                                                                     direct.stderr), args
        answered += native.returncode in (0, 1)
    assert client.call({"op": "status"})["counters"]["searches"] - before >= answered - 1
    r = subprocess.run([exe, "status", str(indexed)], env=env, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0 and "chunks" in r.stdout  # another command: the Python CLI ran it


def test_the_native_client_falls_back_without_a_daemon(_isolated_home, indexed):
    import subprocess

    exe, script = _native_client(), _script("supergrep")
    env = {**cli_env(_isolated_home), "SUPERGREP_FALLBACK": script}
    args = ["retry_with_backoff", str(indexed), "--mode", "lexical", "--json"]
    r = subprocess.run([exe, *args], env=env, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0 and json.loads(r.stdout)["count"] > 0  # no daemon: the direct path
    r = subprocess.run([exe, *args], env={**env, "SUPERGREP_FALLBACK": "/no/such/supergrep"}, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "cannot run /no/such/supergrep" in r.stderr


def test_the_argv_op_parses_with_the_clients_environment(daemon, indexed):
    """The daemon's side of the native client: the launcher's own parser with the client's
    working directory, environment and terminal; raw bytes after each header line."""
    def ask(argv, cwd, env, tty=False):
        """The first answer that is not a notice: (header, the raw bytes after it)."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(60)
            s.connect(paths.socket_path())
            s.sendall(json.dumps({"v": 1, "op": "argv", "argv": argv, "cwd": cwd, "tty": tty,
                                  "env": env}).encode() + b"\n")
            f = s.makefile("rb")
            while True:
                msg = json.loads(f.readline())
                if "notice_bytes" in msg:
                    f.read(msg["notice_bytes"])
                    continue
                return msg, f.read(msg["bytes"]) if "bytes" in msg else b""

    msg, out = ask(["sessions", ".", "--mode", "lexical", "--json"], str(indexed), {"NO_COLOR": "1"})
    assert msg["ok"] and msg["exit_code"] == 0 and json.loads(out)["count"] > 0
    # an index dir that is a file: the launcher leaves it to click; read from the client's
    # environment, not the daemon's
    msg, _ = ask(["sessions", "--mode", "lexical", "--json"], str(indexed), {"SUPERGREP_INDEX_DIR": __file__})
    assert msg["ok"] is False and msg["fallback"] is True
    msg, _ = ask(["status"], str(indexed), {})
    assert msg["ok"] is False and msg["fallback"] is True
    msg, _ = ask("not a list", str(indexed), {})
    assert msg["ok"] is False and msg["fallback"] is True
