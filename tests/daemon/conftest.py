"""Fixtures for the daemon tests: a fast-reacting config, indexed projects, a daemon process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from supergrep.daemon import client, lifecycle, paths

SRC = Path(__file__).resolve().parents[2] / "src"

FAST_CONFIG = """\
[daemon]
debounce_ms = 50
max_delay_ms = 300
preload = false
rescan_s = 0
"""


@pytest.fixture(autouse=True)
def fast_daemon_config(_isolated_home):
    """Every daemon (in-process or not) in these tests reacts within ~50 ms and loads no model
    until it needs one."""
    (_isolated_home / "config.toml").write_text(FAST_CONFIG)
    yield _isolated_home


def wait_for(predicate, timeout: float = 20.0, interval: float = 0.05, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def cli_env(home: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "SUPERGREP_HOME": str(home), "NO_COLOR": "1", "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]])
    env.pop("SUPERGREP_NO_DAEMON", None)
    env.update(extra)
    return env


def run_cli(args, env, cwd=None, timeout=180, input=None):
    return subprocess.run([sys.executable, "-m", "supergrep", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, input=input)


@pytest.fixture
def indexed(sample_project, tiny_encoder):
    """The sample project, indexed in-process with the tiny model (so lexical searches in a
    daemon never load one)."""
    from supergrep.index.indexer import update_index
    from supergrep.index.project import Index

    index = Index(sample_project)
    update_index(index, tiny_encoder)
    index.close()
    return sample_project


@pytest.fixture
def daemon(_isolated_home, tiny_model):
    """A daemon process started by `supergrep daemon start`, stopped (or killed) afterwards."""
    env = cli_env(_isolated_home, SUPERGREP_MODEL=str(tiny_model))
    r = run_cli(["daemon", "start"], env)
    assert r.returncode == 0, r.stdout + r.stderr
    answer = client.ping()
    assert answer is not None
    yield {"env": env, "pid": answer["pid"], "home": _isolated_home}
    if lifecycle.lock_held():
        try:
            lifecycle.stop(timeout=10)
        except Exception:  # last resort in a fixture
            pid = json.loads(Path(paths.pid_path()).read_text()).get("pid")
            os.kill(pid, 9)
