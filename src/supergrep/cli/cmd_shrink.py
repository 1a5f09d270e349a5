"""`supergrep shrink PAIRS -o DIR --layers 0,2,4`: a layer-dropped student distilled from its base."""

from __future__ import annotations

from pathlib import Path

import click

from supergrep.cli.common import Options, common_options
from supergrep.cli.output import echo_json


@click.command("shrink")
@click.argument("pairs", type=click.Path(dir_okay=False, path_type=Path))
@click.option("-o", "--output", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Model directory to write (the base by reference + the kept layers' weights).")
@click.option("--layers", "layers", default="0,2,4", show_default=True,
              help="The base's encoder layers the student keeps, in order (0 = the first).")
@click.option("--pairs-used", "n_pairs", type=click.IntRange(0), default=0, show_default=True,
              help="Training pairs to sample (0: every training row).")
@click.option("--val-pairs", type=click.IntRange(11), default=500, show_default=True,
              help="Held-out pairs (split == 'val' rows; else the end of the shuffle) for the report.")
@click.option("--steps", type=click.IntRange(1), default=600, show_default=True)
@click.option("--batch-size", type=click.IntRange(2), default=32, show_default=True,
              help="Pairs per step (each query is ranked among the batch's documents).")
@click.option("--lr", type=click.FloatRange(min=0, min_open=True), default=5e-4, show_default=True)
@click.option("--temperature", type=click.FloatRange(min=0, min_open=True), default=0.05, show_default=True,
              help="Of the MaxSim softmax in the ranking term (scores: means over query tokens).")
@click.option("--rank-weight", type=click.FloatRange(min=0), default=1.0, show_default=True,
              help="Weight of the ranking term (KL of in-batch MaxSim distributions) beside the token term.")
@click.option("--max-document-tokens", type=click.IntRange(0), default=0, show_default=True,
              help="Truncate training documents to this many tokens (0: the model's own length).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--force", is_flag=True, help="Overwrite a non-empty output directory.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object (progress stays on stderr).")
@common_options(config=False, backend=False)
def shrink_cmd(pairs: Path, output: Path, layers: str, n_pairs: int, val_pairs: int, steps: int, batch_size: int,
               lr: float, temperature: float, rank_weight: float, max_document_tokens: int, seed: int, force: bool,
               as_json: bool, opts: Options) -> None:
    """Distil a model into one with fewer encoder layers (~2x cheaper with half of them), for
    the same index format and dimension. Needs torch.

    The student starts as the base's --layers, keeps its embeddings and projection frozen,
    and learns the base's token vectors (1 - cosine) and in-batch MaxSim rankings (KL) on the
    pairs' queries and code; the pairs' labels are not used.

        supergrep shrink pairs.jsonl -o models/minilm-l3 --layers 0,2,4
        supergrep index . --model-path models/minilm-l3
    """
    from supergrep.train.shrink import ShrinkConfig, parse_layers, shrink_model

    cfg = ShrinkConfig(pairs=pairs, output=output, layers=parse_layers(layers),
                       model_path=str(opts.model_path or ""), n_pairs=n_pairs, val_pairs=val_pairs, steps=steps,
                       batch_size=batch_size, lr=lr, temperature=temperature, rank_weight=rank_weight,
                       max_document_tokens=max_document_tokens, device=opts.device or "auto", seed=seed, force=force)
    # progress goes to stderr even with --json (stdout holds only the report): runs are minutes long
    report = shrink_model(cfg, progress=lambda m: click.echo(m, err=True))
    if as_json:
        echo_json(report.to_dict())
        return
    a, s = report.start, report.student
    click.echo(f"wrote {output}: layers {','.join(map(str, report.layers))} of {report.of_layers} "
               f"({report.bytes_written / 1e6:.1f} MB) from {report.train_pairs} pairs in "
               f"{report.seconds_setup + report.seconds_train + report.seconds_eval:.0f} s "
               f"(training {report.seconds_train:.0f} s)")
    click.echo(f"  held-out token cosine mean / min: start {a.token_cos_mean:.4f} / {a.token_cos_min:.3f}, "
               f"distilled {s.token_cos_mean:.4f} / {s.token_cos_min:.3f}")
    click.echo(f"  held-out MaxSim top-10 agreement: start {a.agreement_at_10:.3f}, distilled {s.agreement_at_10:.3f}; "
               f"MRR / P@1: base {report.teacher['mrr']:.3f} / {report.teacher['p_at_1']:.3f}, "
               f"distilled {s.mrr:.3f} / {s.p_at_1:.3f}")
