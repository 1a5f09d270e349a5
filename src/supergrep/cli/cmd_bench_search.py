"""`supergrep bench search`: search latency, QPS and recall of the compressed store by index size.

A subcommand of the `bench` group (``cli/cmd_bench.py`` registers it beside `train` and `encode`).
"""

from __future__ import annotations

from pathlib import Path

import click

from supergrep.cli.output import echo_json
from supergrep.errors import UsageError


def _sizes(value: str) -> list[int]:
    try:
        sizes = [int(float(v)) for v in value.replace("_", "").split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"--sizes expects comma-separated chunk counts like 10000,100000, got {value!r}") from None
    if not sizes or min(sizes) < 100:
        raise UsageError("--sizes: every size must be at least 100 chunks")
    return sizes


@click.command("search")
@click.option("--sizes", default="10000,100000", show_default=True, help="Index sizes in chunks (synthetic token vectors).")
@click.option("--queries", type=click.IntRange(1, 100_000), default=100, show_default=True, help="Timed queries per size.")
@click.option("--exact-queries", type=click.IntRange(0, 1000), default=5, show_default=True,
              help="Queries also run exhaustively: the latency baseline and the recall reference.")
@click.option("--exact-max", type=int, default=100_000, show_default=True,
              help="Skip the exhaustive baseline above this many chunks (it takes minutes per query).")
@click.option("--nbits", type=click.Choice(["1", "2", "4"]), default="4", show_default=True)
@click.option("--components", type=click.IntRange(0, 4096), default=0, show_default=True,
              help="Code each residual on this many principal axes ([index] components; 0: every dimension).")
@click.option("--dim", type=click.IntRange(8, 4096), default=384, show_default=True)
@click.option("--mean-tokens", type=float, default=139.0, show_default=True,
              help="Mean stored vectors per chunk (139: the stdlib corpus with the default model).")
@click.option("--nprobe", type=int, help="Centroids probed per query token (default: the config's).")
@click.option("--candidates", type=int, help="Centroid-interaction candidates (default: the config's).")
@click.option("--rerank", type=int, help="Exactly re-ranked candidates (default: the config's).")
@click.option("--work-dir", type=click.Path(file_okay=False, path_type=Path), default=Path(".cache/bench-search"),
              show_default=True, help="Where the synthetic indexes are built (deleted afterwards unless --keep).")
@click.option("--integer-scores/--float-scores", default=None,
              help="Score with 8-bit integer products or in float32 (default: the config's, integer).")
@click.option("--keep", is_flag=True, help="Keep the synthetic indexes.")
@click.option("--reuse", is_flag=True, help="Reuse indexes an earlier --keep run built with the same settings.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Also write the JSON result here.")
def bench_search_cmd(sizes: str, queries: int, exact_queries: int, exact_max: int, nbits: str, components: int, dim: int,
                     mean_tokens: float, nprobe: int | None, candidates: int | None, rerank: int | None,
                     integer_scores: bool | None, work_dir: Path, keep: bool, reuse: bool, out: Path | None) -> None:
    """p50/p95 latency, QPS and Recall@10 (vs exhaustive MaxSim) at each index size.

        supergrep bench search --sizes 100000,1000000 --out benchmarks/results/search.json
    """
    from supergrep.bench.search import run_search_bench

    if dim * int(nbits) % 8:
        raise UsageError(f"--dim {dim} times --nbits {nbits} must be a multiple of 8")
    if components > dim or components * int(nbits) % 8:
        raise UsageError(f"--components {components} must be at most --dim {dim}, times --nbits {nbits} a multiple of 8")
    result = run_search_bench(_sizes(sizes), work_dir, queries=queries, exact_queries=exact_queries,
                              exact_max_chunks=exact_max, dim=dim, nbits=int(nbits), components=components, mean_tokens=mean_tokens,
                              nprobe=nprobe, candidates=candidates, rerank=rerank, keep=keep,
                              integer_scores=integer_scores, reuse=reuse,
                              progress=lambda m: click.echo(m, err=True))
    if out:
        import json

        out.write_text(json.dumps(result, indent=1) + "\n")
    echo_json(result)
