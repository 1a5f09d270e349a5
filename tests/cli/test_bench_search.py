"""`supergrep bench search`: synthetic compressed indexes, latency against the exhaustive baseline."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from supergrep.cli import cli, main


def test_bench_search_reports_latency_recall_and_size(tmp_path):
    out = tmp_path / "r.json"
    res = CliRunner().invoke(cli, ["bench", "search", "--sizes", "400,800", "--queries", "6", "--exact-queries", "3",
                                   "--dim", "32", "--mean-tokens", "12", "--nbits", "2", "--rerank", "800",
                                   "--work-dir", str(tmp_path / "w"), "--out", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    rows = data["results"]
    assert [r["chunks"] for r in rows] == [400, 800]
    for r in rows:
        assert r["p50_ms"] > 0 and r["p95_ms"] >= r["p50_ms"] and r["qps"] > 0
        assert r["exact_queries"] == 3 and r["exact_p50_ms"] > 0
        # rerank >= the index size: the pipeline re-ranks everything, so it equals the baseline
        assert r["recall_at_10"] == 1.0
        assert 0 < r["bytes_per_vector"] < 32 * 4
    assert not (tmp_path / "w" / "synthetic-400").exists()  # cleaned up


def test_bench_search_bad_sizes_exit_2(capsys):
    for bad in ("ten", "10"):
        with pytest.raises(SystemExit) as e:
            main(["bench", "search", "--sizes", bad])
        assert e.value.code == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("supergrep: error: --sizes") and "\n" not in err


def test_bench_search_reuses_a_kept_index_and_reports_warming(tmp_path):
    """--reuse opens the index a --keep run built with the same settings (same results, no
    rebuild); other settings rebuild it. Both runs warm the store before the clock and say how
    they scored."""
    w = tmp_path / "w"
    base = ["bench", "search", "--sizes", "400", "--queries", "5", "--exact-queries", "2", "--dim", "32",
            "--mean-tokens", "10", "--nbits", "2", "--work-dir", str(w)]

    def run(*extra):
        out = tmp_path / "r.json"
        res = CliRunner().invoke(cli, [*base, *extra, "--out", str(out)])
        assert res.exit_code == 0, res.output
        return json.loads(out.read_text())

    first = run("--keep", "--float-scores")
    stamp = w / "synthetic-400" / "synthetic.json"
    assert stamp.is_file()
    built = stamp.stat().st_mtime_ns
    again = run("--reuse", "--integer-scores")
    r0, r1 = first["results"][0], again["results"][0]
    assert (r0["reused"], r1["reused"]) == (False, True) and stamp.stat().st_mtime_ns == built
    assert r1["vectors"] == r0["vectors"] and r1["bytes"] == r0["bytes"]
    assert first["settings"]["integer_scores"] is False and first["settings"]["int_backend"] is None
    assert again["settings"]["integer_scores"] is True and again["settings"]["int_backend"] in {"onnxruntime", "torch", "numpy"}
    assert r0["warm_s"] >= 0 and r1["warm_s"] >= 0
    other = run("--reuse", "--mean-tokens", "11")  # another build: not the kept index
    assert other["results"][0]["reused"] is False


def test_bench_search_with_components(tmp_path, capsys):
    """--components builds the synthetic index with a rotated codec: fewer bytes a vector than
    every dimension at the same bits, and a re-rank of everything still equals the baseline."""
    out = tmp_path / "r.json"
    res = CliRunner().invoke(cli, ["bench", "search", "--sizes", "300", "--queries", "4", "--exact-queries", "2",
                                   "--dim", "32", "--mean-tokens", "10", "--nbits", "4", "--components", "8",
                                   "--rerank", "300", "--work-dir", str(tmp_path / "w"), "--out", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    r = data["results"][0]
    assert data["settings"]["components"] == 8 and r["recall_at_10"] == 1.0
    assert r["bytes_per_vector"] < 4 + 2 + 2 + 16  # 4 B of residual (8 axes x 4 bits) + code + scale + lists
    with pytest.raises(SystemExit) as e:
        main(["bench", "search", "--sizes", "300", "--dim", "32", "--components", "64"])
    assert e.value.code == 2 and "--components 64 must be at most --dim 32" in capsys.readouterr().err
