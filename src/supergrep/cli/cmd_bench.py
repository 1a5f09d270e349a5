"""`supergrep bench train|encode`: speed, MFU and memory benchmarks (see supergrep.bench).

``bench`` is a click group: another benchmark joins it with ``bench_group.add_command(cmd)``
(e.g. ``bench search``).
"""

from __future__ import annotations

from pathlib import Path

import click

from supergrep.cli.cmd_bench_search import bench_search_cmd
from supergrep.cli.common import Options, common_options
from supergrep.cli.output import echo_json


@click.group("bench", context_settings={"max_content_width": 120})
def bench_group() -> None:
    """Benchmarks: training speed (vs a naive loop and sentence-transformers), index-time encoding."""


def _work_dir(work_dir: Path | None) -> Path:
    from supergrep.config import supergrep_home

    return work_dir or supergrep_home() / "cache" / "bench"


def _workload_options(f):
    f = click.option("--work-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
                     help="Where synthetic models are written once (default: $SUPERGREP_HOME/cache/bench).")(f)
    f = click.option("--doc-cap", type=click.IntRange(min=8), default=None,
                     help="Longest document in tokens (default: the workload's, 512).")(f)
    f = click.option("--batch-size", type=click.IntRange(min=2), default=None, help="Override the workload's batch.")(f)
    f = click.option("--model-path", default=None, help="The model of the 'minilm' workload (default: the packaged one); "
                     "the synthetic workloads copy its tokenizer files.")(f)
    f = click.option("-w", "--workload", "workloads", multiple=True,
                     help="xtr-base, minilm, minilm-random (its shape, random init), xtr-tiny, minilm-tiny or a model directory (repeatable; default minilm).")(f)
    f = click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
                     help="Write <kind>-<workload>.json/.md/.png here.")(f)
    f = click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")(f)
    return f


@bench_group.command("train")
@_workload_options
@click.option("--variants", default=None, metavar="V1,V2,...",
              help="Variants as +-joined tokens, e.g. naive,bf16,bf16+packing,bf16+compile,peer+bf16; "
                   "mlx+fp32, mlx+bf16 run the MLX trainer (default: a CPU or GPU ladder).")
@click.option("--grid", "grid", multiple=True, metavar="KEY=V1,V2",
              help="Grid axis (repeatable): precision, compile, ckpt, attn, batching, packing, batch, device, sync, "
                   "backend (torch,mlx); "
                   "the product is run, plus naive.")
@click.option("--steps", type=click.IntRange(min=1), default=20, show_default=True, help="Timed steps per variant.")
@click.option("--warmup", type=click.IntRange(min=0), default=5, show_default=True, help="Untimed steps first.")
@click.option("--time-limit", type=float, default=None, help="Skip the variants left after this many seconds.")
@click.option("--rounds", type=click.IntRange(min=1), default=1, show_default=True,
              help="Above 1: warm every variant first, keep them all, then time each in this many segments of "
                   "--steps steps, interleaved (A B B A ...): no variant keeps a position in the process.")
@common_options(model_path=False)
def bench_train_cmd(workloads, model_path, batch_size, doc_cap, work_dir, out_dir, as_json, variants, grid, steps,
                    warmup, time_limit, rounds, opts: Options) -> None:
    """Training samples/s, useful tokens/s, MFU and peak memory over a grid, each a speedup over
    the naive loop (fp32, eager, padded to the cap, a host sync every step) in the same run.

        supergrep bench train -w xtr-base --variants naive,bf16,bf16+packing,bf16+compile,peer+bf16

        supergrep bench train -w minilm --grid precision=fp32,bf16 --grid packing=0,1 --out bench/

        supergrep bench train -w minilm --variants naive,fp32,mlx+fp32 --device cpu

        supergrep bench train -w xtr-base --variants bs=192+bf16+compile+varlen+packing,bs=192+bf16+compile+varlen+packing+fp8 --warmup 60 --steps 20 --rounds 4

    The 50% MFU row (H200, ~83 GiB; docs/performance.md #51):

        supergrep bench train -w xtr-base --variants bs=512+bf16+cppwrap+varlen+packing+nodropout+fp8g+res16 --warmup 40 --steps 30 --rounds 2
    """
    from supergrep.bench import report
    from supergrep.bench.train import (
        DEFAULT_CPU,
        DEFAULT_GPU,
        grid_variants,
        mlx_missing,
        parse_variant,
        run_train_bench,
    )
    from supergrep.bench.workloads import get_workload
    from supergrep.errors import UsageError

    try:
        if grid:
            chosen = grid_variants(list(grid))
        elif variants:
            chosen = [parse_variant(v) for v in variants.split(",") if v.strip()]
        else:
            import torch

            chosen = [parse_variant(v) for v in (DEFAULT_GPU if torch.cuda.is_available() else DEFAULT_CPU)]
        if opts.device:
            chosen = [v if v.device != "auto" else _with_device(v, opts.device) for v in chosen]
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if any(v.backend == "mlx" for v in chosen) and mlx_missing():
        raise UsageError(mlx_missing())
    results = []
    for name in workloads or ("minilm",):
        wl = get_workload(name, _work_dir(work_dir), model_path, batch_size, doc_cap)
        stem = f"train-{wl.name}"
        res = run_train_bench(wl, chosen, steps=steps, warmup=warmup, time_limit=time_limit, rounds=rounds,
                              on_row=(lambda partial, stem=stem: report.write(partial, out_dir, stem)) if out_dir else None)
        results.append(res)
        files = report.write(res, out_dir, stem) if out_dir else {}
        if not as_json:
            click.echo(report.train_markdown(res))
            for kind, path in files.items():
                click.echo(f"{kind}: {path}")
    if as_json:
        echo_json(results if len(results) > 1 else results[0])


def _modes(text: str | None) -> tuple[str, ...] | None:
    from supergrep.bench.encode import MODES, parse_mode
    from supergrep.errors import UsageError

    if not text:
        return None
    modes = tuple(m.strip() for m in text.split(",") if m.strip())
    if not modes:
        raise UsageError(f"--modes: no mode in {text!r}; choose from {', '.join(MODES)}")
    for m in modes:
        try:
            parse_mode(m)
        except ValueError as exc:
            raise UsageError(f"--modes: {exc}") from None
    return modes


def _with_device(v, device: str):
    from dataclasses import replace

    return replace(v, device=device)


@bench_group.command("encode")
@_workload_options
@click.option("--docs", type=click.IntRange(min=1), default=2000, show_default=True,
              help="Synthetic documents for the forward-pass measurement.")
@click.option("--index-root", type=click.Path(file_okay=False, exists=True, path_type=Path), default=None,
              help="Directory for the whole-index run (default: supergrep's own source).")
@click.option("--no-index", is_flag=True, help="Skip the whole-index run.")
@click.option("--batch-tokens", type=click.IntRange(min=0), default=0, help="Encoder batch budget (0: its default).")
@click.option("--modes", default=None, metavar="M,M",
              help="Forward modes to time: padded, varlen, varlen+compile, varlen+autotune (default: padded, and varlen "
                   "where the backend takes it by default: CUDA with Triton, T5/BERT/RoBERTa); a varlen mode "
                   "+half copies float16 to the host (converted there), +fp8 runs the projections as float8 products "
                   "(CUDA 8.9+; +fp8t: one scale per tensor, not per row; +f32acc: without fast accumulation); +pageable uploads the "
                   "inputs from pageable memory.")
@common_options(model_path=False)
def bench_encode_cmd(workloads, model_path, batch_size, doc_cap, work_dir, out_dir, as_json, docs, index_root, no_index,
                     batch_tokens, modes, opts: Options) -> None:
    """Index-time encoding: tokens/s and MFU of the forward pass, lines/s of a whole index run.

        supergrep bench encode -w minilm --out bench/
        supergrep bench encode -w xtr-base --modes padded,varlen,varlen+compile --no-index
    """
    import supergrep
    from supergrep.bench import report
    from supergrep.bench.encode import run_encode_bench
    from supergrep.bench.workloads import get_workload

    root = None if no_index else (index_root or Path(supergrep.__file__).parent)
    results = []
    for name in workloads or ("minilm",):
        wl = get_workload(name, _work_dir(work_dir), model_path, batch_size, doc_cap)
        res = run_encode_bench(wl, device=opts.device or "auto", n_docs=docs, index_root=root,
                               batch_tokens=batch_tokens, doc_cap=doc_cap, modes=_modes(modes))
        results.append(res)
        files = report.write(res, out_dir, f"encode-{wl.name}") if out_dir else {}
        if not as_json:
            click.echo(report.encode_markdown(res))
            for kind, path in files.items():
                click.echo(f"{kind}: {path}")
    if as_json:
        echo_json(results if len(results) > 1 else results[0])


bench_group.add_command(bench_search_cmd)  # `bench search` (cli/cmd_bench_search.py)
