"""`supergrep mine PATH... -o pairs.jsonl`: (docstring -> code) training pairs."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import click

from supergrep.cli.common import Options, common_options
from supergrep.cli.output import echo_json
from supergrep.corpus.mine import MineConfig, MineStats, minable_languages, mine

_FIELDS = {f.name: f for f in dataclasses.fields(MineConfig)}


def _default(name: str) -> Any:
    f = _FIELDS[name]
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def _opt(name: str, *decls: str, **kw: Any):
    """A click option whose default and help come from MineConfig (the only source of both)."""
    f = _FIELDS[name]
    kw.setdefault("help", f.metadata["help"])
    if "multiple" not in kw and not kw.get("is_flag"):
        kw.setdefault("default", _default(name))
        kw.setdefault("show_default", True)
    return click.option(*decls, name, **kw)


def _counts(d: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(d.items(), key=lambda kv: (-kv[1], kv[0]))) or "none"


def describe(stats: MineStats) -> list[str]:
    rate = stats.lines / stats.seconds * 60 if stats.seconds else 0.0
    return [
        f"{stats.pairs} pairs from {stats.files} files ({stats.lines} lines, {stats.definitions} definitions) "
        f"in {stats.seconds:.1f} s ({rate:,.0f} lines/min) -> {stats.output}",
        f"  by language: {_counts(stats.by_language)}",
        f"  by split: {_counts(stats.by_split)}",
        f"  skipped files: {_counts(stats.skipped_files)}",
        f"  dropped definitions: {_counts(stats.dropped)}",
    ]


class _Progress:
    """Files and pairs so far, on stderr, only when stderr is a terminal."""

    def __init__(self) -> None:
        self.bar = None
        if sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(desc="mining", unit="file", file=sys.stderr, leave=False, dynamic_ncols=True)

    def __call__(self, files: int, pairs: int) -> None:
        if self.bar is not None:
            self.bar.update(files - self.bar.n)
            if files % 200 == 0:
                self.bar.set_postfix(pairs=pairs, refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


@click.command("mine")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="JSON Lines file to write (atomically: a temporary file renamed into place).")
@_opt("min_doc_words", "--min-doc-words", type=click.IntRange(0))
@_opt("max_query_words", "--max-query-words", type=click.IntRange(0))
@_opt("min_code_lines", "--min-code-lines", type=click.IntRange(0))
@_opt("min_code_chars", "--min-code-chars", type=click.IntRange(0))
@_opt("max_code_lines", "--max-code-lines", type=click.IntRange(1))
@_opt("max_file_bytes", "--max-file-bytes", type=click.IntRange(1))
@_opt("include_tests", "--include-tests/--no-include-tests")
@_opt("include_generated", "--include-generated/--no-include-generated")
@_opt("dedupe", "--dedupe/--no-dedupe")
@_opt("max_per_query", "--max-per-query", type=click.IntRange(0))
@_opt("split_by", "--split-by", type=click.Choice(["package", "file"]))
@_opt("val_fraction", "--val-fraction", type=click.FloatRange(0.0, 1.0))
@_opt("exclude", "--exclude", metavar="PKG", multiple=True,
      help=f"Also leave out this package (repeatable); always excluded unless --no-default-excludes: "
           f"{', '.join(_default('exclude'))}.")
@click.option("--no-default-excludes", is_flag=True,
              help="Do not exclude the evaluation packages listed under --exclude (never for training data).")
@_opt("repo_name", "--repo-name", metavar="NAME", show_default=False)
@_opt("languages", "-t", "--type", metavar="LANG", multiple=True,
      help=f"Only this language (repeatable): {', '.join(minable_languages())}.")
@_opt("respect_ignore_files", "--ignore-files/--no-ignore-files")
@_opt("jobs", "-j", "--jobs", type=click.IntRange(0))
@click.option("--json", "as_json", is_flag=True, help="Print the run's statistics as one JSON object.")
@common_options(model_path=False)
def mine_cmd(paths: tuple[Path, ...], output: Path, exclude: tuple[str, ...], no_default_excludes: bool,
             languages: tuple[str, ...], as_json: bool, opts: Options, **settings: Any) -> None:
    """Mine (docstring -> code) pairs from PATHs (directories or files) into JSON Lines.

    One line per documented definition: query (the docstring's summary), code (the definition
    without its docstring), docstring, language, repo, path, symbol, kind, start_line, end_line,
    split (train/val), doc_words, code_lines. Exit status 1 when no pair was mined.

        supergrep mine /usr/lib/python3.11 .venv/lib/python3.11/site-packages -o pairs.jsonl
    """
    base = [] if no_default_excludes else _default("exclude")
    cfg = MineConfig(**settings, exclude=[*base, *exclude], languages=list(languages))
    progress = _Progress()
    try:
        stats = mine(list(paths), output, cfg, progress=progress)
    finally:
        progress.close()
    if as_json:
        echo_json(stats.to_dict())
    else:
        for line in describe(stats):
            click.echo(line)
    if stats.pairs == 0:
        raise SystemExit(1)


@click.command("mine-negatives")
@click.argument("pairs", type=click.Path(dir_okay=False, path_type=Path))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="JSON Lines file to write: every row of PAIRS, training rows with 'negatives' added.")
@click.option("--per-query", type=click.IntRange(1, 32), default=1, show_default=True,
              help="Hard negatives per training row (each is one more document in the batch).")
@click.option("--skip-top", type=click.IntRange(0), default=0, show_default=True,
              help="BM25 hits to skip before choosing (a guard against near-copies of the answer).")
@click.option("-j", "--jobs", type=click.IntRange(0), default=0, show_default=True,
              help="Worker processes (0: one per CPU core).")
@click.option("--teacher", "teacher", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Mine with this model (MaxSim) instead of BM25, and write its scores as 'teacher_scores' "
                   "for `train` with teacher_weight > 0.")
@click.option("--pool", type=click.IntRange(2), default=1024, show_default=True,
              help="With --teacher: training rows (same language first) each query is ranked against.")
@click.option("--max-relative", type=click.FloatRange(0, 1, min_open=True), default=0.95, show_default=True,
              help="With --teacher: skip candidates scoring above this share of the positive's score "
                   "(likely unlabelled answers).")
@click.option("--json", "as_json", is_flag=True, help="Print the run's statistics as one JSON object.")
@common_options(model_path=False)
def mine_negatives_cmd(pairs: Path, output: Path, per_query: int, skip_top: int, jobs: int, teacher: Path | None,
                       pool: int, max_relative: float, as_json: bool, opts: Options) -> None:
    """Add hard negatives to the training rows of a pairs file (`train` with
    hard_negatives: true uses them): BM25's, or a teacher model's with its scores.

    A negative is same-language training code ranked high for the query that is not the
    answer (never the code itself, a whitespace-equal copy, a same-named symbol, or code with
    the same docstring summary; with --teacher, nor code scoring above --max-relative of the
    answer). Validation rows are copied unchanged and are never negatives.

        supergrep mine-negatives pairs.jsonl -o pairs-hn.jsonl --per-query 1
        supergrep mine-negatives pairs.jsonl -o pairs-kd.jsonl --per-query 3 --teacher mpnet
    """
    if teacher is not None:
        from supergrep.train.teacher import mine_with_teacher

        t = mine_with_teacher(pairs, output, str(teacher), per_query=per_query, pool=pool,
                              max_relative=max_relative, device=opts.device or "auto",
                              progress=None if as_json else (lambda m: click.echo(m, err=True)))
        if as_json:
            echo_json(t.to_dict())
            return
        click.echo(f"{t.negatives} negatives for {t.with_negatives} of {t.train_rows} training rows by {t.teacher} "
                   f"on {t.device} ({t.no_match} without, {t.above_threshold} above --max-relative) in "
                   f"{t.seconds:.1f} s -> {t.output}")
        click.echo(f"  teacher: own code first in its pool for {t.teacher_p_at_1:.3f} of queries; mean score "
                   f"positive {t.mean_positive:.3f}, negative {t.mean_negative:.3f}")
        click.echo(f"  by language: {_counts(t.by_language)}")
        return
    from supergrep.train.negatives import mine_negatives

    stats = mine_negatives(pairs, output, per_query=per_query, skip_top=skip_top, workers=jobs)
    if as_json:
        echo_json(stats.to_dict())
        return
    click.echo(f"{stats.negatives} negatives for {stats.with_negatives} of {stats.train_rows} training rows "
               f"({stats.no_match} without a BM25 match) in {stats.seconds:.1f} s -> {stats.output}")
    click.echo(f"  by language: {_counts(stats.by_language)}")


@click.command("distill")
@click.argument("pairs", type=click.Path(dir_okay=False, path_type=Path))
@click.option("-o", "--output", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Model directory to write (the base by reference + the distilled projection).")
@click.option("--dim", type=click.IntRange(1), default=128, show_default=True, help="Output dimension of the head.")
@click.option("--pairs-used", "n_pairs", type=click.IntRange(1), default=4000, show_default=True,
              help="Training pairs to sample (their queries and documents).")
@click.option("--val-pairs", type=click.IntRange(11), default=500, show_default=True,
              help="Held-out pairs (split == 'val' rows; else the end of the shuffle) for the report.")
@click.option("--pool", type=click.IntRange(2), default=500, show_default=True,
              help="Documents each query is ranked against by the teacher (same language first).")
@click.option("--top-k", type=click.IntRange(1), default=32, show_default=True,
              help="The teacher's best documents per query whose order the head learns.")
@click.option("--steps", type=click.IntRange(1), default=600, show_default=True)
@click.option("--batch-size", type=click.IntRange(1), default=32, show_default=True, help="Queries per step.")
@click.option("--lr", type=click.FloatRange(min=0, min_open=True), default=1e-3, show_default=True)
@click.option("--temperature", type=click.FloatRange(min=0, min_open=True), default=0.02, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--force", is_flag=True, help="Overwrite a non-empty output directory.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object.")
@common_options(config=False, backend=False)
def distill_cmd(pairs: Path, output: Path, dim: int, n_pairs: int, val_pairs: int, pool: int, top_k: int, steps: int,
                batch_size: int, lr: float, temperature: float, seed: int, force: bool, as_json: bool,
                opts: Options) -> None:
    """Fit a DIM-d projection head to a frozen model by distilling its own MaxSim rankings
    (smaller indexes, faster search, the base's ranking kept). Needs torch.

    The pairs only supply realistic queries and documents: the target is the base model's
    order of each query's best documents, not the pair labels.

        supergrep distill pairs.jsonl -o models/minilm-128 --dim 128
        supergrep index . --model-path models/minilm-128
    """
    from supergrep.train.distill import DistillConfig, distill_projection

    cfg = DistillConfig(pairs=pairs, output=output, model_path=str(opts.model_path or ""), dim=dim, n_pairs=n_pairs,
                        val_pairs=val_pairs, pool=pool, top_k=top_k, steps=steps, batch_size=batch_size, lr=lr,
                        temperature=temperature, device=opts.device or "auto", seed=seed, force=force)
    report = distill_projection(cfg, progress=None if as_json else lambda m: click.echo(m, err=True))
    if as_json:
        echo_json(report.to_dict())
        return
    t, p, s = report.teacher, report.pca, report.student
    click.echo(f"wrote {output} ({report.in_dim} -> {report.dim}) from {report.train_pairs} pairs in "
               f"{report.seconds_encode + report.seconds_teacher + report.seconds_train:.0f} s")
    click.echo(f"  held-out MRR / P@1: base {t.mrr:.3f} / {t.p_at_1:.3f}, PCA {p.mrr:.3f} / {p.p_at_1:.3f}, "
               f"distilled {s.mrr:.3f} / {s.p_at_1:.3f} (top-10 agreement with the base {s.agreement_at_10:.3f})")
