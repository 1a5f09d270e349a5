"""The command line as users drive it: exit codes, JSON schema, errors, default command."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from supergrep.cli import cli, main


def run(args, **kw):
    """Run through `main` (the real entry point: error mapping, exit codes)."""
    runner = CliRunner()
    return runner.invoke(_Main(), args, catch_exceptions=False, **kw)


class _Main:
    """Adapter so CliRunner drives `main(argv)` rather than the bare click group."""

    name = "supergrep"

    def main(self, args=None, prog_name=None, **_):
        main(list(args or []))


@pytest.fixture
def indexed(sample_project, tiny_model):
    r = run(["index", str(sample_project), "--model-path", str(tiny_model)])
    assert r.exit_code == 0, r.output
    return sample_project, ["--model-path", str(tiny_model)]


def test_index_reports_files_chunks_lines_and_rate(sample_project, tiny_model):
    r = run(["index", str(sample_project), "--model-path", str(tiny_model)])
    assert r.exit_code == 0
    line = r.output.strip().splitlines()[-1]
    assert "3 files" in line and "chunks" in line and "lines in" in line and "lines/s" in line
    r = run(["index", str(sample_project), "--model-path", str(tiny_model), "--json"])
    rep = json.loads(r.stdout)
    assert rep["files_indexed"] == 0 and rep["files"] == 3 and rep["lines_per_s"] == 0


def test_search_json_schema_and_exit_codes(indexed):
    root, model = indexed
    r = run(["search", "retry with backoff", str(root), "--json", "-n", "2", *model])
    assert r.exit_code == 0
    out = json.loads(r.stdout)
    assert set(out) == {"query", "mode", "count", "results"}
    assert out["mode"] == "hybrid" and out["count"] == len(out["results"]) == 2
    assert set(out["results"][0]) == {"path", "start_line", "end_line", "symbol", "language", "score", "snippet"}
    # lexical mode with a word that appears nowhere: no results, exit 1
    r = run(["search", "zzzqqqxxx", str(root), "--mode", "lexical", *model])
    assert r.exit_code == 1 and r.output == ""


def test_default_command_and_human_output(indexed, monkeypatch):
    root, model = indexed
    monkeypatch.chdir(root)
    r = run(["retry_with_backoff", "--mode", "lexical", "-C", "1", *model])
    assert r.exit_code == 0
    first = r.output.splitlines()[0]
    assert first.startswith("app/retry.py:4-11 retry_with_backoff")
    assert "\x1b[" not in r.output  # no colour when not a tty


def test_filters_from_the_cli(indexed):
    root, model = indexed
    r = run(["search", "sessions", str(root), "-t", "markdown", "--json", *model])
    assert {x["language"] for x in json.loads(r.stdout)["results"]} == {"markdown"}
    r = run(["search", "sessions", str(root / "app"), "--json", *model])  # a sub-directory
    assert {x["path"].split("/")[0] for x in json.loads(r.stdout)["results"]} == {"app"}
    r = run(["search", "sessions", str(root), "-T", "app/", "--json", *model])
    assert all(not x["path"].startswith("app/") for x in json.loads(r.stdout)["results"])


def test_status_files_chunks_clean(indexed):
    root, model = indexed
    st = json.loads(run(["status", str(root), "--json"]).stdout)
    assert {"model", "files", "chunks", "vectors", "bytes", "updated"} <= set(st)
    assert st["files"] == 3 and st["chunks"] > 0 and st["vectors"] > st["chunks"] and st["bytes"] > 0
    assert st["model"]["dim"] == 32
    files = run(["files", str(root)]).output.split()
    assert files == ["app/models.py", "app/retry.py", "docs/guide.md"]
    summary = json.loads(run(["files", str(root), "--summary", "--json"]).stdout)
    assert summary["python"]["files"] == 2
    ch = [json.loads(x) for x in run(["chunks", str(root / "app/models.py"), "--json"]).output.splitlines()]
    assert ("User.check_password", 12, 14) in {(c["symbol"], c["start_line"], c["end_line"]) for c in ch}
    assert run(["clean", str(root)]).exit_code == 0
    r = run(["status", str(root), "--json"])
    assert r.exit_code == 1 and json.loads(r.stdout)["indexed"] is False


def test_search_indexes_an_unindexed_project_unless_no_index(sample_project, tiny_model):
    model = ["--model-path", str(tiny_model)]
    r = run(["search", "password", str(sample_project), "--no-index", *model])
    assert r.exit_code == 2 and "supergrep index" in r.output
    r = run(["search", "password", str(sample_project), "--json", *model])
    assert r.exit_code == 0 and json.loads(r.stdout)["count"] > 0


@pytest.mark.parametrize(
    "args, needle",
    [
        (["search", "x", "/no/such/dir"], "does not exist"),
        (["index", "/no/such/dir"], "does not exist"),
        (["search", "x", "-n", "0"], "--limit"),
        (["search", "x", "-t", "klingon"], "--type"),
        (["search", "x", "--mode", "psychic"], "--mode"),
        (["index", "--model-path", "/no/model"], "model directory /no/model does not exist"),
        (["chunks", "/no/file.py"], "does not exist"),
        (["bogus-command-with-dash", "--frobnicate"], "No such option"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, needle, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = run(args)
    assert r.exit_code == 2, r.output
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("supergrep: error:"), r.output
    assert needle in lines[0]


def test_malformed_config_names_file_and_line(sample_project, tiny_model):
    (sample_project / ".supergrep.toml").write_text("[search]\nlimit = 5\nmode = \n")
    r = run(["search", "x", str(sample_project), "--model-path", str(tiny_model)])
    assert r.exit_code == 2 and ".supergrep.toml" in r.output and "line 3" in r.output
    (sample_project / ".supergrep.toml").write_text("[search]\nlimt = 5\n")
    r = run(["search", "x", str(sample_project), "--model-path", str(tiny_model)])
    assert r.exit_code == 2 and "unknown key 'limt'" in r.output
    (sample_project / ".supergrep.toml").write_text("[search]\nlimit = 'ten'\n")
    r = run(["search", "x", str(sample_project), "--model-path", str(tiny_model)])
    assert r.exit_code == 2 and "limit must be int" in r.output


def test_model_mismatch_from_the_cli(indexed, tmp_path, tiny_bert_factory):
    root, _ = indexed
    other = tiny_bert_factory(tmp_path / "other", hidden=16, seed=3)
    r = run(["search", "retry", str(root), "--model-path", str(other)])
    assert r.exit_code == 2 and "re-index" in r.output and "--force" in r.output
    assert run(["index", str(root), "--force", "--model-path", str(other)]).exit_code == 0
    assert run(["search", "retry", str(root), "--model-path", str(other)]).exit_code == 0


def test_help_and_version():
    assert "find code by meaning" in CliRunner().invoke(cli, ["-h"]).output
    assert CliRunner().invoke(cli, ["--version"]).output.startswith("supergrep, version")


def test_colour_only_on_a_tty_and_never_with_no_color(monkeypatch):
    from supergrep.cli.output import use_color

    class Tty:
        def isatty(self):
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    assert use_color(Tty()) is True
    assert use_color(open(__file__)) is False  # a regular file is not a terminal
    monkeypatch.setenv("NO_COLOR", "1")
    assert use_color(Tty()) is False


def test_broken_pipe_exits_quietly_with_0(tmp_path, tiny_model):
    import os
    import subprocess
    import sys

    root = tmp_path / "big"
    root.mkdir()
    for i in range(40):  # enough output to overflow the pipe's buffer
        (root / f"m{i}.py").write_text("".join(f"def f{j}(x):\n    return x + {j}\n\n" for j in range(40)))
    assert run(["index", str(root), "--model-path", str(tiny_model)]).exit_code == 0
    p = subprocess.Popen([sys.executable, "-m", "supergrep", "search", "def return", str(root),
                          "--mode", "lexical", "-n", "2000", "-C", "1000"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ))
    p.stdout.readline()
    p.stdout.close()  # like `| head -1`
    assert p.wait(timeout=120) == 0
    assert p.stderr.read() == b""
