"""`supergrep eval` end to end: a fixture corpus with a tiny model, and the public set with the
real default model (slow; fetches the corpora from PyPI once into .cache/)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from supergrep.cli import cli

REPO = Path(__file__).resolve().parents[2]
PUBLIC = REPO / "eval" / "public"


def test_eval_on_a_fixture_corpus(sample_project, tiny_model, tmp_path):
    q = tmp_path / "q.jsonl"
    q.write_text("\n".join(json.dumps(x) for x in [
        {"id": "a", "corpus": "demo", "query": "retry_with_backoff", "kind": "keyword",
         "targets": [{"path": "app/retry.py", "symbol": "retry_with_backoff", "start_line": 4, "end_line": 11}]},
        {"id": "b", "corpus": "demo", "query": "check_password hash", "kind": "keyword",
         "targets": [{"path": "app/models.py", "symbol": "User.check_password", "start_line": 12, "end_line": 14}]},
    ]))
    out = tmp_path / "report.md"
    r = CliRunner().invoke(cli, ["eval", "--queries", str(q), "--corpus", f"demo={sample_project}",
                                 "--model-path", str(tiny_model), "--json", "--out", str(out), "--failures"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout.split("\n[")[0])
    modes = {row["mode"]: row for row in data["summary"]}
    assert set(modes) == {"semantic", "lexical", "hybrid"}
    assert modes["lexical"]["p@1"] == 1.0  # identifiers: BM25 finds both
    assert {"kind:keyword", "corpus:demo"} <= set(modes["lexical"])
    per_query = data["queries"]
    assert len(per_query) == 6 and all(len(x["top"]) <= 3 for x in per_query)
    assert "| model | mode |" in out.read_text()
    # bad corpus arguments are one-line errors
    r = CliRunner().invoke(cli, ["eval", "--queries", str(q), "--corpus", "nodir"])
    assert r.exit_code != 0


def _fetch_public(dest: Path) -> Path:
    if not (dest / "jinja2-3.1.4/src/jinja2").is_dir() or not (dest / "itsdangerous-2.2.0/src/itsdangerous").is_dir():
        env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
        r = subprocess.run(["bash", str(PUBLIC / "fetch_corpora.sh"), str(dest)], env=env,
                           capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            pytest.skip(f"could not fetch the public corpora from PyPI: {r.stderr[-500:]}")
    return dest


@pytest.mark.slow
@pytest.mark.network
def test_public_set_through_the_cli_hybrid_beats_both_modes():
    """The guard on fusion: with the default model, hybrid is at least as good as the best
    single mode on every metric of the public set (55 queries), through the real CLI."""
    corpora = _fetch_public(REPO / ".cache" / "eval-corpora")
    home = REPO / ".cache" / "test-home"  # reuse the indexes between runs
    env = {**os.environ, "SUPERGREP_HOME": str(home)}
    exe = shutil.which("supergrep", path=str(Path(sys.executable).parent)) or "supergrep"
    r = subprocess.run([exe, "eval", "--queries", str(PUBLIC / "queries.jsonl"), "-t", "python",
                        "--corpus", f"jinja2={corpora}/jinja2-3.1.4/src",
                        "--corpus", f"itsdangerous={corpora}/itsdangerous-2.2.0/src", "--json"],
                       env=env, capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = {row["mode"]: row for row in json.loads(r.stdout)["summary"]}
    assert rows["hybrid"]["n"] == 55
    for metric in ("p@1", "mrr@10", "r@10", "ndcg@10"):
        assert rows["hybrid"][metric] >= rows["semantic"][metric] - 1e-9, metric
        assert rows["hybrid"][metric] >= rows["lexical"][metric] - 1e-9, metric
    # Regression floors: measured .764 / .831 (docs/quality.md); BM25 alone is .600.
    assert rows["hybrid"]["p@1"] >= 0.70 and rows["hybrid"]["mrr@10"] >= 0.78


def test_two_copies_of_a_corpus_get_their_own_eval_index(tmp_path):
    from supergrep.evaluation.evaluate import eval_index_dir

    a = eval_index_dir("jinja2", tmp_path / "checkout-a" / "src", "f" * 64)
    b = eval_index_dir("jinja2", tmp_path / "checkout-b" / "src", "f" * 64)
    assert a != b and a.name.startswith("jinja2-") and a.name.endswith("f" * 12)


def test_two_models_with_one_name_keep_their_own_rows(sample_project, tiny_model, tmp_path):
    # Two checkpoints of one run share the model name; pooling them would report an average.
    first, second = tmp_path / "a" / "model", tmp_path / "b" / "model"
    shutil.copytree(tiny_model, first)
    shutil.copytree(tiny_model, second)
    q = tmp_path / "q.jsonl"
    q.write_text(json.dumps({"id": "a", "corpus": "demo", "query": "retry_with_backoff", "kind": "keyword",
                             "targets": [{"path": "app/retry.py", "symbol": "retry_with_backoff",
                                          "start_line": 4, "end_line": 11}]}))
    r = CliRunner().invoke(cli, ["eval", "--queries", str(q), "--corpus", f"demo={sample_project}", "--mode", "lexical",
                                 "--model-path", str(first), "--model-path", str(second), "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)["summary"]
    assert len(rows) == 2 and all(row["n"] == 1 for row in rows)
    assert [row["model"] for row in rows] == [f"model ({first})", f"model ({second})"]


def test_repeated_mode_flags_add_up(sample_project, tiny_model, tmp_path):
    """`--mode semantic --mode lexical` scores both (click keeps only the last of a single-valued option)."""
    q = tmp_path / "q.jsonl"
    q.write_text(json.dumps({"id": "a", "corpus": "demo", "query": "retry_with_backoff", "kind": "keyword",
                             "targets": [{"path": "app/retry.py", "symbol": "retry_with_backoff",
                                          "start_line": 4, "end_line": 11}]}))
    base = ["eval", "--queries", str(q), "--corpus", f"demo={sample_project}", "--model-path", str(tiny_model), "--json"]
    r = CliRunner().invoke(cli, [*base, "--mode", "lexical", "--mode", "semantic"])
    assert r.exit_code == 0, r.output
    assert [row["mode"] for row in json.loads(r.stdout)["summary"]] == ["semantic", "lexical"]
    r = CliRunner().invoke(cli, base)  # no --mode: every mode
    assert [row["mode"] for row in json.loads(r.stdout)["summary"]] == ["semantic", "lexical", "hybrid"]
