"""benchmarks/comment_pairs.py: comment -> definition pairs (the fifth training sweep's data)."""

from __future__ import annotations

import importlib.util
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "comment_pairs.py"
spec = importlib.util.spec_from_file_location("comment_pairs", SCRIPT)
cp = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cp)

SOURCE = '''\
import os


def documented(path):
    """Remove a file, ignoring a missing one."""
    # the file may be gone already when another process cleaned up first
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


class Store:
    def undocumented(self, key):
        marker = "#not a comment"  # noqa: E501
        # keys are case-insensitive on Windows so fold them before hashing
        # and keep the original for display
        folded = key.lower()
        return hash(folded), marker

    def short(self):
        # too short
        return 1


def test_something():
    # a test function explains itself but is never a training target
    assert True
'''


def test_file_rows_query_is_cut_from_the_code_and_docstrings_dropped():
    rows = cp.file_rows(SOURCE, "pkg/mod.py", "pkg", "train", random.Random(0), min_words=6)
    by_symbol = {r["symbol"]: r for r in rows}
    assert set(by_symbol) == {"documented", "Store.undocumented"}  # short comment, test skipped
    doc = by_symbol["documented"]
    assert doc["query"] == "the file may be gone already when another process cleaned up first"
    assert "may be gone" not in doc["code"] and '"""' not in doc["code"]
    assert "os.remove(path)" in doc["code"]
    und = by_symbol["Store.undocumented"]
    # the two comment lines are one comment; the pragma and the '#' in the string stay
    assert und["query"] == ("keys are case-insensitive on Windows so fold them before hashing "
                            "and keep the original for display")
    assert "case-insensitive" not in und["code"]
    assert 'marker = "#not a comment"  # noqa: E501' in und["code"]
    assert und["code"].startswith("    def undocumented(self, key):")
    assert (und["start_line"], und["split"], und["language"]) == (14, "train", "python")


def test_commented_out_code_and_pragmas_are_not_queries():
    code = "def f(x):\n    # y = compute(x, 2)\n    # type: ignore because mypy cannot see it\n    return x\n"
    assert cp.explanatory_comments(code) == []


def test_script_end_to_end_and_bad_jsonl(tmp_path: Path):
    root = tmp_path / "roots" / "r1"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text(SOURCE)
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps({"query": "q", "code": "c", "path": "pkg/mod.py", "repo": "pkg",
                                 "language": "python", "split": "val"}) + "\n")
    out = tmp_path / "out.jsonl"
    res = subprocess.run([sys.executable, str(SCRIPT), str(pairs), "--roots", str(tmp_path / "roots"),
                          "-o", str(out)], capture_output=True, text=True, check=True)
    assert json.loads(res.stdout)["rows val"] == 2
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["split"] for r in rows} == {"val"} and all(r["query_kind"] == "comment" for r in rows)
    pairs.write_text(pairs.read_text() + "{not json\n")
    bad = subprocess.run([sys.executable, str(SCRIPT), str(pairs), "--roots", str(tmp_path / "roots"),
                          "-o", str(out)], capture_output=True, text=True)
    assert bad.returncode == 2 and "pairs.jsonl:2: not JSON" in bad.stderr
    missing = subprocess.run([sys.executable, str(SCRIPT), str(pairs), "--roots", str(tmp_path / "nope"),
                              "-o", str(out)], capture_output=True, text=True)
    assert missing.returncode == 2 and "no such roots folder" in missing.stderr


@pytest.mark.parametrize("places, expected", [
    ([(0, 13)], "    a = '#'\n    # gone\n    b = 1"),
    ([(1, 4)], "    a = '#'  # note\n    b = 1"),
])
def test_strip_comment(places, expected):
    assert cp.strip_comment("    a = '#'  # note\n    # gone\n    b = 1", places) == expected
