"""`supergrep index [PATH] [--force] [--workers N]`."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import click

from supergrep.cli.common import Options, common_options, resolve_root
from supergrep.cli.output import BarProgress, echo_json
from supergrep.errors import UsageError


def describe_report(root, rep) -> str:
    return (
        f"{root}: {rep.files} files, {rep.chunks} chunks; {rep.files_indexed} files re-indexed, "
        f"{rep.files_removed} removed; {rep.lines_indexed} lines in {rep.seconds:.1f} s "
        f"({rep.lines_per_s:.0f} lines/s)"
    )


def store_options(cfg, index, root, force: bool, store: str | None, vector_dtype: str | None) -> None:
    """Apply `index --store/--vector-dtype` to ``cfg``; a vector type an existing index does
    not have needs --force (its vectors would have to be rewritten)."""
    if store:
        cfg.index.store = store
    if vector_dtype:
        if index.exists() and not force and index.manifest.vector_dtype != vector_dtype:
            raise UsageError(f"the index of {root} stores {index.manifest.vector_dtype} vectors; "
                             f"pass --force to rebuild it with {vector_dtype}")
        cfg.encode.vector_dtype = vector_dtype


def run_index(opts: Options, root, force: bool = False, quiet: bool = False, store: str | None = None,
              vector_dtype: str | None = None):
    """Index ``root`` (shared with `search`, which indexes an unindexed project first)."""
    from supergrep.index.indexer import update_index

    cfg = opts.config(root)
    index = opts.index(root)
    store_options(cfg, index, root, force, store, vector_dtype)
    encoder = opts.encoder(cfg, None if force else index)  # an index keeps its model unless --force
    report = update_index(index, encoder, cfg, force=force, progress=BarProgress())
    if report.skipped and not quiet:
        parts = ", ".join(f"{n} {why}" for why, n in sorted(report.skipped.items()))
        click.echo(f"skipped: {parts}", err=True)
    return index, encoder, report


@click.command("index")
@click.argument("path", required=False, type=click.Path(file_okay=False))
@click.option("--force", is_flag=True, help="Rebuild the index from scratch (e.g. after changing model).")
@click.option("--json", "as_json", is_flag=True, help="Print the run's report as JSON.")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Encode with N processes started through torchrun: one per GPU (cuda:LOCAL_RANK) when CUDA "
                   "is there, else CPU processes sharing the cores. Rank 0 alone walks and writes the index.")
@click.option("--store", type=click.Choice(["auto", "exact", "compressed"]),
              help="Vector store: exact, compressed codes, or auto (compressed past [index] compress_above vectors).")
@click.option("--vector-dtype", type=click.Choice(["float16", "int8"]),
              help="How an exact store keeps vectors: float16 (default) or int8 + a scale per vector "
                   "(half the bytes; an existing index keeps its kind unless --force).")
@common_options
def index_cmd(path: str | None, force: bool, as_json: bool, workers: int, store: str | None,
              vector_dtype: str | None, opts: Options) -> None:
    """Index PATH (default: the current directory), incrementally.

    Only files whose content changed are re-embedded; deleted files leave the index. Example:

        supergrep index ~/src/myproject

    A large corpus on several GPUs: `supergrep index --workers 4 ~/src/monorepo` (the same as
    `torchrun --standalone --nproc-per-node 4 -m supergrep index ~/src/monorepo`).
    """
    from supergrep.train.distributed import World

    root = resolve_root(path, search_up=False)
    world = World.from_env()
    if workers > 1 and not world.distributed:
        relaunch_under_torchrun(workers, root, force, as_json, opts, store, vector_dtype)  # does not return
    if world.distributed:
        if workers not in (1, world.size):
            raise UsageError(f"--workers {workers} but torchrun started {world.size} processes")
        done = run_index_distributed(opts, root, force, world, quiet=as_json, store=store, vector_dtype=vector_dtype)
        if done is None:
            return  # a worker: rank 0 reports
        rep = done
    else:
        _, _, rep = run_index(opts, root, force=force, quiet=as_json, store=store, vector_dtype=vector_dtype)
    if as_json:
        echo_json({
            "root": str(root), "files": rep.files, "chunks": rep.chunks,
            "files_indexed": rep.files_indexed, "files_removed": rep.files_removed,
            "files_unchanged": rep.files_unchanged, "chunks_embedded": rep.chunks_embedded,
            "chunks_reused": rep.chunks_reused, "lines": rep.lines_indexed,
            "seconds": round(rep.seconds, 3), "lines_per_s": round(rep.lines_per_s, 1),
            "skipped": rep.skipped, "workers": max(workers, world.size),
        })
    else:
        click.echo(describe_report(root, rep))


def relaunch_under_torchrun(workers: int, root: Path, force: bool, as_json: bool, opts: Options,
                            store: str | None = None, vector_dtype: str | None = None) -> None:
    """Replace this process with torchrun starting ``workers`` copies of this command."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        raise UsageError("--workers needs PyTorch (torch.distributed and torchrun); install supergrep with torch")
    args = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(workers),
            "-m", "supergrep", "index", str(root), "--workers", str(workers)]
    args += ["--force"] * force + ["--json"] * as_json + (["--store", store] if store else [])
    args += ["--vector-dtype", vector_dtype] if vector_dtype else []
    for flag, value in (("--index-dir", opts.index_dir), ("--model-path", opts.model_path),
                        ("--device", opts.device), ("--config", opts.config_file)):
        if value is not None:
            args += [flag, str(value)]
    level = logging.getLogger().level
    args += ["-v"] * (level <= logging.INFO) + ["-v"] * (level <= logging.DEBUG)
    # torchrun would set 1 thread per process (and say so); share the cores instead.
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // workers)))
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, args)


def run_index_distributed(opts: Options, root: Path, force: bool, world, quiet: bool = False,
                          store: str | None = None, vector_dtype: str | None = None):
    """One rank of `index` under torchrun: rank 0 indexes with a ``ShardedEncoder`` and returns
    its report; the other ranks encode what it sends and return None."""
    from supergrep.backends.torch_dist import TorchCollective, rank_device
    from supergrep.encoder.sharded import ShardedEncoder, serve
    from supergrep.index.indexer import update_index

    cfg = opts.config(root)
    store_options(cfg, opts.index(root), root, force, store, vector_dtype)
    cfg.encode.device = rank_device(cfg.encode.device, world)
    if cfg.encode.device == "cpu" and not cfg.encode.threads:
        cfg.encode.threads = max(1, (os.cpu_count() or 1) // world.size)
    coll = TorchCollective(world, "cpu")  # gloo: texts and NumPy vectors travel between host memories
    encoder = opts.encoder(cfg, None if force else opts.index(root))
    if not world.is_main:
        serve(encoder, coll)
        coll.close()
        return None
    sharded = ShardedEncoder(encoder, coll)
    # On an error the workers are not released: this process exits non-zero and torchrun stops them.
    report = update_index(opts.index(root), sharded, cfg, force=force, progress=BarProgress())
    sharded.close()
    coll.close()
    if report.skipped and not quiet:
        click.echo("skipped: " + ", ".join(f"{n} {why}" for why, n in sorted(report.skipped.items())), err=True)
    return report
