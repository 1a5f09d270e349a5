"""Shell integration: completion scripts that complete, and the auto-registration hook."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from conftest import cli_env, run_cli


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_scripts(shell, _isolated_home):
    r = run_cli(["completions", shell], cli_env(_isolated_home))
    assert r.returncode == 0 and "_SUPERGREP_COMPLETE" in r.stdout and "sgr" in r.stdout
    if shell == "bash":
        assert subprocess.run(["bash", "-n"], input=r.stdout, text=True).returncode == 0


def test_completion_answers(_isolated_home):
    env = cli_env(_isolated_home, _SUPERGREP_COMPLETE="bash_complete", COMP_WORDS="supergrep dae", COMP_CWORD="1")
    r = subprocess.run([sys.executable, "-m", "supergrep"], env=env, capture_output=True, text=True, timeout=60)
    assert "plain,daemon" in r.stdout.split()
    env.update(COMP_WORDS="supergrep daemon st", COMP_CWORD="2")
    r = subprocess.run([sys.executable, "-m", "supergrep"], env=env, capture_output=True, text=True, timeout=60)
    assert {"plain,start", "plain,status", "plain,stop"} <= set(r.stdout.split())


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_init_hook_registers_git_roots_on_cd(_isolated_home, tmp_path):
    r = run_cli(["init", "bash", "--auto-register"], cli_env(_isolated_home))
    assert r.returncode == 0 and "__supergrep_register" in r.stdout and "complete -o nosort" in r.stdout
    snippet = tmp_path / "init.bash"
    snippet.write_text(r.stdout)
    assert subprocess.run(["bash", "-n", str(snippet)]).returncode == 0
    repo = tmp_path / "repo"
    (repo / "sub").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "calls.log"
    fake = bindir / "supergrep"  # records what the hook runs instead of running it
    fake.write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    fake.chmod(0o755)
    script = f"""
source {snippet}
cd {repo}/sub && __supergrep_register
cd {repo} && __supergrep_register
cd {tmp_path} && __supergrep_register
wait; sleep 0.5
"""
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}
    subprocess.run(["bash", "-c", script], env=env, check=True, timeout=60)
    calls = log.read_text().splitlines()
    assert calls == [f"daemon add --quiet -- {repo.resolve()}"]  # once per git root, none outside
    r = run_cli(["init", "zsh"], cli_env(_isolated_home))
    assert "compdef" in r.stdout and "__supergrep_register" not in r.stdout


def test_init_puts_the_native_client_on_sgr(_isolated_home, tmp_path):
    """Where the native client was built, `init` makes `sgr` run it with `supergrep` as its
    fallback: here without a daemon, so `sgr` ends in the Python CLI (its --help)."""
    from supergrep.daemon.paths import native_client

    exe = native_client()
    if exe is None:
        if os.environ.get("SUPERGREP_REQUIRE_NATIVE") == "1":
            raise AssertionError("SUPERGREP_REQUIRE_NATIVE=1 but the native client was not built")
        pytest.skip("the native client is not built here")
    script = os.path.join(os.path.dirname(sys.executable), "supergrep")
    r = subprocess.run([script, "init", "bash"], env=cli_env(_isolated_home), capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and f"SUPERGREP_FALLBACK={script} {exe}" in r.stdout
    snippet = tmp_path / "init.bash"
    snippet.write_text(r.stdout)
    out = subprocess.run(["bash", "-c", f"source {snippet}; type sgr; sgr --help"], env=cli_env(_isolated_home),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "sgr is a function" in out.stdout and "Usage:" in out.stdout
