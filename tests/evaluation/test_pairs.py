"""`eval-pairs`: grouping, ranking and the pairs-file validation."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from supergrep.cli import cli
from supergrep.errors import InputError
from supergrep.evaluation.pairs import evaluate_pairs, load_pairs, rank_in_group

WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november".split()


def pairs_file(tmp_path, n=40):
    rng = np.random.default_rng(0)
    lines = []
    for i in range(n):
        words = " ".join(rng.choice(WORDS, 6)) + f" item{i}"
        lines.append(json.dumps({"query": words, "code": f"def f{i}():\n    return '{words}'", "path": f"m{i}.py"}))
    p = tmp_path / "pairs.jsonl"
    p.write_text("\n".join(lines) + "\n")
    return p


def test_rank_in_group_counts_ties_against_the_query():
    a = np.array([[1.0, 0.0]], np.float32)
    b = np.array([[0.0, 1.0]], np.float32)
    # query 0 ties with doc 1 (both identical to doc 0): the earlier tie is not counted,
    # the later one is, so an identical distractor costs a rank
    assert rank_in_group([a, a], [a, a]) == [1, 2]
    assert rank_in_group([a, b], [b, a]) == [2, 2]


def test_evaluate_pairs_with_a_real_tiny_model(tmp_path, tiny_encoder):
    pairs = load_pairs(pairs_file(tmp_path))
    m = evaluate_pairs(tiny_encoder, pairs, candidates=10)
    assert m["n"] == 40 and m["candidates"] == 10
    # queries share their words with their own code: even a random model ranks it high
    assert m["r@10"] == 1.0 and m["mrr"] > 0.5
    assert 0 <= m["r@1"] <= m["r@5"] <= m["r@10"]
    with pytest.raises(InputError, match="need at least"):
        evaluate_pairs(tiny_encoder, pairs, candidates=100)


def test_pairs_file_validation(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"query": "q", "code": "c"}\n{"query": "", "code": "c"}\n')
    with pytest.raises(InputError, match=r"bad.jsonl:2: 'query' must be a non-empty string"):
        load_pairs(p)
    p.write_text('{"query": "q", "code": "c"}\nnot json\n')
    with pytest.raises(InputError, match=r"bad.jsonl:2: invalid JSON"):
        load_pairs(p)


def test_eval_pairs_cli(tmp_path, tiny_model):
    r = CliRunner().invoke(cli, ["eval-pairs", "--pairs", str(pairs_file(tmp_path)), "--candidates", "20",
                                 "--model-path", str(tiny_model), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["n"] == 40 and set(out) >= {"mrr", "r@1", "r@5", "r@10", "model"}


def test_eval_pairs_behaviour_drops_the_words_the_code_spells(tmp_path, tiny_model):
    rng = np.random.default_rng(1)
    lines = []
    for i in range(40):
        words = " ".join(rng.choice(WORDS, 6))
        # Three words the code never spells survive; the six it does are dropped.
        other = " ".join(rng.choice("oscar papa quebec romeo sierra tango uniform victor".split(), 3))
        lines.append(json.dumps({"query": f"{words} {other}",
                                 "code": f"def f{i}():\n    return '{words}'"}))
    p = tmp_path / "pairs.jsonl"
    p.write_text("\n".join(lines) + "\n")
    args = ["eval-pairs", "--pairs", str(p), "--candidates", "20", "--model-path", str(tiny_model), "--json"]
    plain = json.loads(CliRunner().invoke(cli, args).stdout)
    r = CliRunner().invoke(cli, [*args, "--behaviour"])
    assert r.exit_code == 0, r.output
    behaviour = json.loads(r.stdout)
    assert behaviour["behaviour"] is True and behaviour["n"] == 40
    # Without the shared words a random model can no longer find the code.
    assert behaviour["mrr"] < plain["mrr"] - 0.15, (plain["mrr"], behaviour["mrr"])
