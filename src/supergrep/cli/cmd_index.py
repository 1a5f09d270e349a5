"""`supergrep index [PATH] [--force]`."""

from __future__ import annotations

import click

from supergrep.cli.common import Options, common_options, resolve_root
from supergrep.cli.output import BarProgress, echo_json


def describe_report(root, rep) -> str:
    return (
        f"{root}: {rep.files} files, {rep.chunks} chunks; {rep.files_indexed} files re-indexed, "
        f"{rep.files_removed} removed; {rep.lines_indexed} lines in {rep.seconds:.1f} s "
        f"({rep.lines_per_s:.0f} lines/s)"
    )


def run_index(opts: Options, root, force: bool = False, quiet: bool = False, vector_dtype: str | None = None):
    """Index ``root`` (shared with `search`, which indexes an unindexed project first)."""
    from supergrep.errors import UsageError
    from supergrep.index.indexer import update_index

    cfg = opts.config(root)
    index = opts.index(root)
    if vector_dtype:
        if index.exists() and not force and index.manifest.vector_dtype != vector_dtype:
            raise UsageError(f"the index of {root} stores {index.manifest.vector_dtype} vectors; "
                             f"pass --force to rebuild it with {vector_dtype}")
        cfg.encode.vector_dtype = vector_dtype
    encoder = opts.encoder(cfg)
    report = update_index(index, encoder, cfg, force=force, progress=BarProgress())
    if report.skipped and not quiet:
        parts = ", ".join(f"{n} {why}" for why, n in sorted(report.skipped.items()))
        click.echo(f"skipped: {parts}", err=True)
    return index, encoder, report


@click.command("index")
@click.argument("path", required=False, type=click.Path(file_okay=False))
@click.option("--force", is_flag=True, help="Rebuild the index from scratch (e.g. after changing model).")
@click.option("--json", "as_json", is_flag=True, help="Print the run's report as JSON.")
@click.option("--vector-dtype", type=click.Choice(["float16", "int8"]),
              help="How a new index stores vectors: float16 (default) or int8 + a scale per vector "
                   "(half the bytes; an existing index keeps its kind unless --force).")
@common_options
def index_cmd(path: str | None, force: bool, as_json: bool, vector_dtype: str | None, opts: Options) -> None:
    """Index PATH (default: the current directory), incrementally.

    Only files whose content changed are re-embedded; deleted files leave the index. Example:

        supergrep index ~/src/myproject
    """
    root = resolve_root(path, search_up=False)
    _, _, rep = run_index(opts, root, force=force, quiet=as_json, vector_dtype=vector_dtype)
    if as_json:
        echo_json({
            "root": str(root), "files": rep.files, "chunks": rep.chunks,
            "files_indexed": rep.files_indexed, "files_removed": rep.files_removed,
            "files_unchanged": rep.files_unchanged, "chunks_embedded": rep.chunks_embedded,
            "chunks_reused": rep.chunks_reused, "lines": rep.lines_indexed,
            "seconds": round(rep.seconds, 3), "lines_per_s": round(rep.lines_per_s, 1),
            "skipped": rep.skipped,
        })
    else:
        click.echo(describe_report(root, rep))
