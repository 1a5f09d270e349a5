"""The entry point's fast path: which command lines it takes, what it imports."""

from __future__ import annotations

import subprocess
import sys

import pytest

from supergrep.launcher import COMMANDS, parse_search


def test_the_command_list_matches_the_cli():
    from supergrep.cli import cli

    assert set(cli.commands) == COMMANDS


@pytest.mark.parametrize("argv, want", [
    (["retry with backoff"], {"query": "retry with backoff", "path": None}),
    (["search", "q", "src"], {"query": "q", "path": "src"}),
    (["q", "-n", "5", "--json", "-C0"], {"limit": 5, "render": {"format": "json", "context": 0, "color": False}}),
    (["q", "--limit=7", "-t", "python", "--type=rust", "-Ttests/", "--exclude", "docs/"],
     {"limit": 7, "types": ["python", "rust"], "excludes": ["tests/", "docs/"]}),
    (["q", "--mode", "lexical", "--auto", "--no-index", "--path", "sub"],
     {"mode": "lexical", "auto": True, "no_index": True, "subdir": "sub"}),
    (["search", "--", "-looks-like-an-option"], {"query": "-looks-like-an-option"}),
    (["q", "--index-dir", "idx"], {"index_dir": "/w/idx"}),
])
def test_plain_searches_are_recognised(argv, want, monkeypatch):
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False, raising=False)
    req = parse_search(argv, cwd="/w")
    assert req is not None and req["op"] == "search" and req["cwd"] == "/w"
    for key, value in want.items():
        assert req[key] == value, key


@pytest.mark.parametrize("argv", [
    [], ["index", "."], ["status"], ["daemon", "start"], ["--version"], ["-h"], ["q", "-v"],
    ["q", "--direct"], ["q", "--device", "cpu"], ["q", "--help"], ["q", "-n", "0"], ["q", "-n", "x"],
    ["q", "--mode", "psychic"], ["q", "a", "b"], ["search"], ["q", "-n"], ["q", "--frobnicate"],
    ["q", "--model-path", "/no/such/model"], ["q", "--config", "/no/such.toml"], ["q", "-C", "-1"],
])
def test_everything_else_goes_to_the_cli(argv):
    assert parse_search(argv, cwd="/w") is None


def test_environment_defaults(monkeypatch, tmp_path):
    monkeypatch.setenv("SUPERGREP_INDEX_DIR", "rel-idx")
    monkeypatch.setenv("SUPERGREP_MODEL", str(tmp_path))
    req = parse_search(["q"], cwd="/w")
    assert req["index_dir"] == "/w/rel-idx" and req["model_path"] == str(tmp_path)


def test_the_fast_path_imports_only_the_standard_library():
    code = ("import sys; import supergrep.launcher; from supergrep.daemon import client; "
            "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('numpy', 'click', 'torch', 'json', 're', 'socket', 'typing', 'pathlib', 'supergrep'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["supergrep", "supergrep.daemon", "supergrep.daemon.client", "supergrep.daemon.cmdline", "supergrep.daemon.paths",
                   "supergrep.daemon.protocol", "supergrep.home", "supergrep.launcher"]
