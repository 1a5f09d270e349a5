"""`supergrep status`, `files`, `chunks` and `clean`."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import click

from supergrep.cli.common import Options, common_options, resolve_root
from supergrep.cli.output import echo_json
from supergrep.errors import UsageError


def _human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


@click.command("status")
@click.argument("path", required=False, type=click.Path(file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Keys: model, files, chunks, vectors, bytes, updated.")
@common_options
def status_cmd(path: str | None, as_json: bool, opts: Options) -> None:
    """Show what the project's index holds. Exit status 1 when there is no index.

        supergrep status --json
    """
    root = resolve_root(path)
    index = opts.index(root)
    if not index.exists():
        if as_json:
            echo_json({"root": str(root), "indexed": False, "model": None, "files": 0, "chunks": 0,
                       "vectors": 0, "bytes": 0, "updated": None})
        else:
            click.echo(f"{root}: not indexed (run `supergrep index {root}`)")
        raise SystemExit(1)
    s = index.stats()
    if as_json:
        echo_json({"indexed": True, **s})
        return
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(s["updated"])) if s["updated"] else "never"
    m = s["model"]
    click.echo(f"root:     {s['root']}")
    click.echo(f"index:    {s['index_dir']} (format {s['format_version']})")
    click.echo(f"model:    {m.get('name')} ({str(m.get('fingerprint', ''))[:12]}, dim {m.get('dim')})")
    click.echo(f"files:    {s['files']} ({s['lines']} lines)")
    click.echo(f"chunks:   {s['chunks']}")
    click.echo(f"vectors:  {s['vectors']} ({s.get('store', 'exact')} store, {s['vector_dtype']})")
    click.echo(f"size:     {_human_bytes(s['bytes'])}")
    click.echo(f"updated:  {when}")


@click.command("files")
@click.argument("path", required=False, type=click.Path(file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="JSON lines: path, language, lines, chunks.")
@click.option("--summary", is_flag=True, help="Totals per language instead of one line per file.")
@common_options
def files_cmd(path: str | None, as_json: bool, summary: bool, opts: Options) -> None:
    """List the files in the project's index.

        supergrep files --summary
    """
    root = resolve_root(path)
    index = opts.index(root)
    rows = index.conn.execute(
        "SELECT f.path, COALESCE(f.language, 'text'), f.n_lines, COUNT(c.id) FROM files f "
        "LEFT JOIN chunks c ON c.file_id = f.id GROUP BY f.id ORDER BY f.path"
    ).fetchall()
    if summary:
        per: dict[str, list[int]] = {}
        for _, lang, lines, chunks in rows:
            t = per.setdefault(lang, [0, 0, 0])
            t[0] += 1
            t[1] += lines
            t[2] += chunks
        items = sorted(per.items(), key=lambda kv: -kv[1][1])
        if as_json:
            echo_json({lang: {"files": f, "lines": ln, "chunks": c} for lang, (f, ln, c) in items})
            return
        click.echo(f"{'language':<14}{'files':>8}{'lines':>10}{'chunks':>9}")
        for lang, (f, ln, c) in items:
            click.echo(f"{lang:<14}{f:>8}{ln:>10}{c:>9}")
        click.echo(f"{'total':<14}{len(rows):>8}{sum(r[2] for r in rows):>10}{sum(r[3] for r in rows):>9}")
        return
    for p, lang, lines, chunks in rows:
        if as_json:
            echo_json({"path": p, "language": lang, "lines": lines, "chunks": chunks})
        else:
            click.echo(p)


@click.command("chunks")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="JSON lines: symbol, kind, language, start_line, end_line, part, text.")
@click.option("-c", "--content", is_flag=True, help="Print each chunk's text too.")
@common_options
def chunks_cmd(file: str, as_json: bool, content: bool, opts: Options) -> None:
    """Show how FILE is cut into chunks (no index or model needed).

        supergrep chunks src/app.py -c
    """
    from supergrep.corpus.chunk import chunk_source
    from supergrep.corpus.types import Source
    from supergrep.corpus.walk import SkipFile, read_source

    p = Path(file)
    if not p.exists():
        raise UsageError(f"{file} does not exist")
    cfg = opts.config(None)
    try:
        fc = read_source(Source(p.name, str(p), None, 0, 0), cfg.walk.max_file_bytes)
    except SkipFile as skip:
        raise UsageError(f"{file} cannot be chunked: {skip.reason} (limit {cfg.walk.max_file_bytes} bytes)") from None
    for c in chunk_source(str(p), fc.text, None, cfg.chunk):
        if as_json:
            echo_json({"symbol": c.symbol, "kind": c.kind, "language": c.language, "start_line": c.start_line,
                       "end_line": c.end_line, "part": c.part, "text": c.text})
            continue
        part = f" (part {c.part})" if c.part else ""
        click.echo(f"{c.start_line}-{c.end_line}\t{c.kind}\t{c.symbol or '-'}{part}")
        if content:
            for line in c.text.split("\n"):
                click.echo(f"    {line}")


@click.command("clean")
@click.argument("path", required=False, type=click.Path(file_okay=False))
@click.option("--all", "everything", is_flag=True, help="Delete every index under $SUPERGREP_HOME.")
@common_options
def clean_cmd(path: str | None, everything: bool, opts: Options) -> None:
    """Delete the project's index (it is rebuilt by the next `index` or `search`).

        supergrep clean
    """
    if everything:
        from supergrep.config import supergrep_home

        target = supergrep_home() / "indexes"
        shutil.rmtree(target, ignore_errors=True)
        click.echo(f"removed {target}")
        return
    root = resolve_root(path)
    index = opts.index(root)
    if not index.dir.exists():
        click.echo(f"{root}: no index to remove")
        return
    with index.write_lock():
        index.wipe()
    shutil.rmtree(index.dir, ignore_errors=True)
    click.echo(f"removed the index of {root} ({index.dir})")
