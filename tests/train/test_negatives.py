"""BM25 hard-negative mining (`supergrep mine-negatives`) and how training reads the result."""

from __future__ import annotations

import json
from pathlib import Path

from cli_runner import run_main
from supergrep.corpus.documents import load_pairs
from supergrep.train.negatives import mine_negatives


def _row(query, code, symbol, language="python", split="train", path="pkg/m.py", **kw):
    return {"query": query, "code": code, "symbol": symbol, "language": language, "split": split,
            "path": path, **kw}


ROWS = [
    _row("Parse a config file into a dict.", "def parse_config(path):\n    return toml.load(path)", "parse_config"),
    # Shares the query's words (config, file, dict) but is not the answer: the hard negative.
    _row("Write settings back to disk.", "def save_config_file(cfg, path):\n    dump(dict(cfg), path)",
         "save_config_file"),
    # The same code again (a vendored copy) and an overload of the same name: never negatives.
    _row("Read the config.", "def parse_config(path):\n        return toml.load(path)", "parse_config", path="v/m.py"),
    _row("Load a config from a file path.", "def load(path):\n    return parse_config_file(path)", "Loader.parse_config"),
    _row("Count the words of a text.", "def count_words(text):\n    return len(text.split())", "count_words"),
    # Other languages are never negatives for a Python query, however many words they share.
    _row("Parse config file dict.", "fn parse_config_file_dict(path: &str) -> Dict { config(file) }",
         "parse_config_file_dict", language="rust", path="src/lib.rs"),
    # Validation rows: unchanged, and never a negative.
    _row("Parse a config file dict.", "def parse_config_file_dict(p):\n    return dict(config(file(p)))",
         "parse_config_file_dict", split="val", path="val/m.py"),
]


def _write(tmp_path: Path, rows) -> Path:
    p = tmp_path / "pairs.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def test_negatives_are_lexical_neighbours_but_never_the_answer(tmp_path):
    out = tmp_path / "hn.jsonl"
    stats = mine_negatives(_write(tmp_path, ROWS), out, per_query=2, workers=1)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == len(ROWS) and [r["query"] for r in rows] == [r["query"] for r in ROWS]  # order kept
    first = [n["symbol"] for n in rows[0]["negatives"]]
    # The hardest is the one sharing "config", "file", "dict"; the copy, the overload (same last
    # name), the other language and the validation row are excluded.
    assert first[0] == "save_config_file"
    assert not {"parse_config", "Loader.parse_config", "parse_config_file_dict"} & set(first)
    for r in rows[:6]:
        assert all(n["language"] == r["language"] for n in r["negatives"])
        assert all(n["code"] != r["code"] for n in r["negatives"])
    assert "negatives" not in rows[6]  # a validation row is copied as it was
    assert rows[5]["negatives"] == []  # the only Rust row has no Rust neighbour
    assert stats.train_rows == 6 and stats.no_match >= 1 and stats.with_negatives + stats.no_match == 6


def test_parallel_workers_give_the_same_file(tmp_path):
    p = _write(tmp_path, ROWS * 3)
    mine_negatives(p, tmp_path / "a.jsonl", workers=1)
    mine_negatives(p, tmp_path / "b.jsonl", workers=2)
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()


def test_training_reads_negatives_rendered_like_positives(tmp_path):
    out = tmp_path / "hn.jsonl"
    mine_negatives(_write(tmp_path, ROWS), out, workers=1)
    pairs = load_pairs(out, split="train")
    neg = pairs[0].negatives[0]
    # Header (path + symbol) then code, exactly as a positive document is rendered.
    assert neg.document() == "pkg/m.py save_config_file\n" + ROWS[1]["code"]
    assert neg.document().startswith(neg.path) and pairs[0].document().startswith("pkg/m.py parse_config")


def test_negative_augmentations_follow_the_positive_rates(tmp_path):
    from supergrep.train.config import TrainConfig
    from supergrep.train.loop import augment_pairs

    rows = [_row(f"Do thing number {i} with the config.", f"def f{i}(config):\n    return config.thing + {i}", f"f{i}",
                 docstring=f"Do thing number {i} with the config.\n\nLonger body text number {i}.")
            for i in range(40)]
    out = tmp_path / "hn.jsonl"
    mine_negatives(_write(tmp_path, rows), out, workers=1)
    pairs = load_pairs(out, split="train")
    assert all(p.negatives for p in pairs)
    cfg = TrainConfig(document_header_dropout=0.5, docstring_body_rate=0.5)
    aug = augment_pairs(pairs, cfg)
    negs = [n for p in aug for n in p.negatives]
    headless = sum(1 for n in negs if not n.path)
    with_body = sum(1 for n in negs if "Longer body text" in n.code)
    # Both augmentations reach the negatives, at about their rates (40 draws each).
    assert 8 <= headless <= 32 and 8 <= with_body <= 32




def test_cli_reports_counts_and_rejects_bad_input(tmp_path):
    p = _write(tmp_path, ROWS)
    out = tmp_path / "hn.jsonl"
    r = run_main(["mine-negatives", str(p), "-o", str(out), "-j", "1"])
    assert r.exit_code == 0, r.output
    assert "of 6 training rows" in r.output and "by language: python" in r.output
    r = run_main(["mine-negatives", str(p), "-o", str(out), "-j", "1", "--json"])
    assert json.loads(r.stdout)["train_rows"] == 6

    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(ROWS[0]) + "\n{not json\n")
    before = out.read_bytes()
    r = run_main(["mine-negatives", str(bad), "-o", str(out)])
    assert r.exit_code == 2 and r.output.count("\n") == 1 and "bad.jsonl:2" in r.output
    assert out.read_bytes() == before  # nothing lost: the old output is untouched
    r = run_main(["mine-negatives", str(tmp_path / "missing.jsonl"), "-o", str(out)])
    assert r.exit_code == 2 and "does not exist" in r.output
    nocode = tmp_path / "nocode.jsonl"
    nocode.write_text(json.dumps({"query": "x"}) + "\n")
    r = run_main(["mine-negatives", str(nocode), "-o", str(out)])
    assert r.exit_code == 2 and "nocode.jsonl:1" in r.output and "'code'" in r.output
