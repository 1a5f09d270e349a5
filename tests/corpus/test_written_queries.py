"""benchmarks/written_queries.py and data/written-queries/: the ninth probe's written queries."""

from __future__ import annotations

import gzip
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "written_queries.py"
DATA = ROOT / "data" / "written-queries" / "queries.jsonl.gz"
spec = importlib.util.spec_from_file_location("written_queries", SCRIPT)
wq = importlib.util.module_from_spec(spec)
spec.loader.exec_module(wq)

ITEMS = [
    {"id": "p0-000", "repo": "pkg", "path": "pkg/disk.py", "symbol": "mkdirp",
     "docstring": "Ensure a directory exists.\n\nLike mkdir -p.", "code": "def mkdirp(d):\n    os.makedirs(d, exist_ok=True)"},
    {"id": "p0-001", "repo": "pkg", "path": "pkg/disk.py", "symbol": "stub", "docstring": "Abstract.", "code": "def stub(): ..."},
    {"id": "p0-002", "repo": "pkg", "path": "pkg/size.py", "symbol": "to_bytes",
     "docstring": "Convert a size string to bytes.", "code": "def to_bytes(s):\n    return int(s[:-1]) * 1024"},
]
WRITTEN = [
    {"id": "p0-000", "query": "create a folder and any missing parents without failing if it exists"},
    {"id": "p0-001", "skip": True},
    {"id": "p0-002", "query": "turn a human size like 10K into a number"},
]


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False)


def test_refs_round_trip_rebuilds_the_same_pairs_and_leaves_out_changed_code(tmp_path):
    items, written = _jsonl(tmp_path / "items.jsonl", ITEMS), _jsonl(tmp_path / "out.jsonl", WRITTEN)
    refs = tmp_path / "refs.jsonl.gz"
    r = _run("--items", str(items), "--written", str(written), "--out", str(tmp_path / "a.jsonl"),
             "--docstring-out", str(tmp_path / "doc.jsonl"), "--save-refs", str(refs))
    assert r.returncode == 0, r.stderr
    assert "2 written queries" in r.stdout and "1 skipped" in r.stdout
    pairs = [json.loads(line) for line in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert [p["item"] for p in pairs] == ["p0-000", "p0-002"]
    assert pairs[0]["code"] == ITEMS[0]["code"] and pairs[0]["query"].startswith("create a folder")
    assert {p["split"] for p in pairs} <= {"train", "val"}
    doc = [json.loads(line) for line in (tmp_path / "doc.jsonl").read_text().splitlines()]
    assert doc[0]["query"] == "Ensure a directory exists."  # the summary only, same rows
    with gzip.open(refs, "rt") as f:
        stored = [json.loads(line) for line in f]
    assert all("code" not in s for s in stored)  # references, not third-party source
    assert [s.get("skip", False) for s in stored] == [False, True, False]

    # A mined file of the same packages rebuilds exactly; one whose code changed drops that row.
    mined = [{"query": "x", "code": it["code"], "docstring": it["docstring"], "repo": it["repo"],
              "path": it["path"], "symbol": it["symbol"]} for it in ITEMS]
    _jsonl(tmp_path / "mined.jsonl", mined)
    r = _run("--refs", str(refs), "--pairs", str(tmp_path / "mined.jsonl"), "--out", str(tmp_path / "b.jsonl"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "b.jsonl").read_text() == (tmp_path / "a.jsonl").read_text()
    mined[2]["code"] += "\n    # changed"
    _jsonl(tmp_path / "mined.jsonl", mined)
    r = _run("--refs", str(refs), "--pairs", str(tmp_path / "mined.jsonl"), "--out", str(tmp_path / "c.jsonl"))
    assert r.returncode == 0, r.stderr
    assert "1 refs found no code" in r.stdout
    assert [json.loads(line)["item"] for line in (tmp_path / "c.jsonl").read_text().splitlines()] == ["p0-000"]


def test_bad_lines_are_reported_and_skipped_and_inputs_are_checked(tmp_path):
    items = _jsonl(tmp_path / "items.jsonl", ITEMS)
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": "p0-000", "query": "create a folder and its parents"}\nnot json\n'
                   '{"id": "zz-999", "query": "unknown item id here"}\n{"id": "p0-002", "query": "too short"}\n')
    r = _run("--items", str(items), "--written", str(out), "--out", str(tmp_path / "a.jsonl"))
    assert r.returncode == 0
    assert "1 written queries" in r.stdout and "3 bad lines" in r.stdout
    assert f"{out}:2" in r.stderr and "unknown id 'zz-999'" in r.stderr
    r = _run("--refs", "x.gz", "--out", str(tmp_path / "a.jsonl"))  # --refs without --pairs
    assert r.returncode == 2 and "--refs with --pairs" in r.stderr
    bad_items = tmp_path / "bad-items.jsonl"
    bad_items.write_text(json.dumps(ITEMS[0]) + "\n{broken\n")  # the code's side must be whole
    r = _run("--items", str(bad_items), "--written", str(out), "--out", str(tmp_path / "b.jsonl"))
    assert r.returncode == 2 and f"{bad_items}:2" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "b.jsonl").exists()


def test_overlap_counts_content_words_the_code_spells():
    assert wq.overlap("parse the config file", "def parse_config(path): ...") == 2 / 3  # parse, config; not file
    assert wq.overlap("the of and", "def f(): ...") == 0.0


def test_the_stored_queries_are_well_formed():
    with gzip.open(DATA, "rt") as f:
        rows = [json.loads(line) for line in f]
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)) == 11741
    queries = [r["query"] for r in rows if not r.get("skip")]
    assert len(queries) == 11643
    assert all(3 <= len(q.split()) <= 30 for q in queries)
    assert all(len(r["code_sha1"]) == 40 and r["repo"] and r["path"] for r in rows)
    # none of the development or public sets' packages
    assert not {r["repo"] for r in rows} & {"joblib", "toolz", "tomlkit", "marshmallow", "jinja2", "itsdangerous"}
