"""`supergrep eval`: retrieval quality of one or more models on a query set."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click

from supergrep.cli.common import Options, common_options
from supergrep.cli.output import echo_json
from supergrep.corpus.languages import language_names
from supergrep.errors import UsageError
from supergrep.index.search import MODES


def _corpus(value: str) -> tuple[str, Path]:
    name, sep, directory = value.partition("=")
    if not sep or not name or not directory:
        raise UsageError(f"--corpus expects NAME=DIR, got {value!r}")
    path = Path(directory).expanduser()
    if not path.is_dir():
        raise UsageError(f"--corpus {name}: {path} is not a directory (run `make eval` to fetch the public corpora)")
    return name, path.resolve()


def _group_table(rows: list[dict]) -> str:
    """Every metric per (model, mode, group): the per-kind and per-corpus breakdown."""
    lines = ["| model | mode | group | n | P@1 | MRR@10 | R@10 | nDCG@10 |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        groups = [("all", r)] + [(k, v) for k, v in r.items() if ":" in k]
        for g, m in groups:
            lines.append(f"| {r['model']} | {r['mode']} | {g} | {m['n']} | {m['p@1']:.3f} | {m['mrr@10']:.3f} "
                         f"| {m['r@10']:.3f} | {m['ndcg@10']:.3f} |")
    return "\n".join(lines)


@click.command("eval")
@click.option("--queries", "queries_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Query file (JSON Lines, format of eval/public/README.md).")
@click.option("--corpus", "corpora", multiple=True, required=True, metavar="NAME=DIR",
              help="A corpus the queries refer to (repeatable).")
@click.option("--mode", "modes_given", type=click.Choice([*MODES, "all"]), multiple=True,
              help="Search mode(s) to score (repeatable; default: all of them).")
@click.option("--model-path", "--model", "model_paths", multiple=True, type=click.Path(path_type=Path),
              help="Model name (minilm, minilm-l3, mpnet) or directory to evaluate (repeatable: a side-by-side table). "
                   "Default: the default model.")
@click.option("-t", "--type", "types", multiple=True, type=click.Choice(language_names()),
              help="Only index these languages of each corpus (the public set: python).")
@click.option("--json", "as_json", is_flag=True, help="Summary rows and every query's rank and top 3 as JSON.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Also write the tables (markdown) here.")
@click.option("--failures", is_flag=True, help="List the queries whose first result missed, with what came first.")
@click.option("--auto", is_flag=True, help="Search as `search --auto` does (fusion weights from the query's style).")
@common_options(model_path=False)
def eval_cmd(queries_path: Path, corpora: tuple[str, ...], modes_given: tuple[str, ...], model_paths: tuple[Path, ...],
             types: tuple[str, ...], as_json: bool, out: Path | None, failures: bool, auto: bool,
             opts: Options) -> None:
    """Measure P@1, MRR@10, R@10 and nDCG@10 per model and mode.

        supergrep eval --queries eval/public/queries.jsonl -t python \\
            --corpus jinja2=.cache/eval-corpora/jinja2-3.1.4/src \\
            --corpus itsdangerous=.cache/eval-corpora/itsdangerous-2.2.0/src
    """
    from supergrep.cli.common import make_encoder
    from supergrep.encoder.spec import resolve_model
    from supergrep.evaluation.evaluate import markdown_table, run_eval, summary_rows
    from supergrep.evaluation.queries import load_queries

    queries = load_queries(queries_path)
    named = dict(_corpus(c) for c in corpora)
    cfg = opts.config(None)
    if types:
        cfg.walk.languages = list(types)
    # repeated --mode values add up (in MODES' order); "all" or none: every mode
    modes = list(MODES) if not modes_given or "all" in modes_given else [m for m in MODES if m in modes_given]
    from supergrep.encoder.named import default_model

    # no --model-path: the default model of the device that encodes (minilm-l3 on a CPU)
    specs = [resolve_model(p) for p in (model_paths or [default_model(cfg.encode.device)])]  # fail fast

    def factory(spec):
        return lambda: make_encoder(spec, cfg)

    def announce(corpus: str, model: str) -> None:
        if not as_json:
            click.echo(f"indexing {corpus} with {model} (reused when unchanged)...", err=True)

    # Two model directories with the same model name (two checkpoints of one run, say) would pool
    # their results into one row: label every model by its path then.
    names = [s.name for s in specs]
    labels = [f"{n} ({p})" if names.count(n) > 1 else n for n, p in zip(names, model_paths or [specs[0].path], strict=True)]
    results = run_eval(queries, named, [factory(s) for s in specs], modes, cfg, on_index=announce, auto=auto,
                       labels=labels)
    rows = summary_rows(results)
    table = markdown_table(rows)
    groups = _group_table(rows)
    if as_json:
        echo_json({"summary": rows, "queries": [dataclasses.asdict(r) for r in results]})
    else:
        click.echo(table)
        click.echo("")
        click.echo(groups)
    if failures:
        for r in results:
            if r.rank == 1:
                continue
            got = "; ".join(f"{t['path']}:{t['start_line']} {t['symbol']}" for t in r.top) or "(nothing)"
            click.echo(f"\n[{r.model} {r.mode}] {r.id} ({r.kind}) rank={r.rank or '>10'}: {r.query}\n    got: {got}",
                       err=as_json)
    if out:
        out.write_text(f"# supergrep eval\n\n{table}\n\n{groups}\n", encoding="utf-8")
        click.echo(f"wrote {out}", err=True)
