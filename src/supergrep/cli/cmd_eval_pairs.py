"""`supergrep eval-pairs`: held-out docstring -> code retrieval (CodeSearchNet style)."""

from __future__ import annotations

from pathlib import Path

import click

from supergrep.cli.common import Options, common_options
from supergrep.cli.output import echo_json


@click.command("eval-pairs")
@click.option("--pairs", "pairs_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="JSON Lines with 'query' and 'code' (and optional path, symbol, language).")
@click.option("--candidates", type=click.IntRange(2, 100_000), default=100, show_default=True,
              help="Codes each query is ranked among (its own + N-1 distractors; CodeSearchNet used 1000).")
@click.option("--limit", type=click.IntRange(1), help="Use at most this many pairs.")
@click.option("--seed", type=int, default=0, show_default=True, help="Shuffle seed for the groups.")
@click.option("--split", default="val", show_default=True,
              help="Use rows of this split (rows without a split are always used); '' for all rows.")
@click.option("--behaviour", is_flag=True,
              help="Drop from every query the words its code already spells (identifiers, symbol, path), "
                   "keeping pairs with at least 3 words left: a held-out proxy for queries that describe "
                   "behaviour without naming it.")
@click.option("--json", "as_json", is_flag=True)
@common_options
def eval_pairs_cmd(pairs_path: Path, candidates: int, limit: int | None, seed: int, split: str, behaviour: bool,
                   as_json: bool, opts: Options) -> None:
    """MRR and R@1/5/10 of finding each pair's code among N candidates.

        supergrep eval-pairs --pairs val.jsonl --candidates 100
    """
    from supergrep.evaluation.pairs import behaviour_pairs, evaluate_pairs, load_pairs

    pairs = load_pairs(pairs_path, split=split or None)
    if behaviour:
        pairs = behaviour_pairs(pairs)
    cfg = opts.config(None)
    encoder = opts.encoder(cfg)
    m = evaluate_pairs(encoder, pairs, candidates=candidates, seed=seed, limit=limit)
    if as_json:
        echo_json({"model": encoder.name, "behaviour": behaviour, **m})
        return
    click.echo(f"{encoder.name}: {m['n']} pairs, {m['candidates']} candidates each: "
               f"MRR {m['mrr']:.3f}  R@1 {m['r@1']:.3f}  R@5 {m['r@5']:.3f}  R@10 {m['r@10']:.3f}")
