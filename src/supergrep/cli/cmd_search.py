"""`supergrep search QUERY [PATH]` (also `supergrep "QUERY"`)."""

from __future__ import annotations

import os
from pathlib import Path

import click

from supergrep.cli.common import Options, common_options
from supergrep.cli.output import echo_json, hit_json, print_hits
from supergrep.corpus.languages import language_names
from supergrep.errors import IndexMissingError, UsageError
from supergrep.index.search import MODES, Searcher, SearchFilters


def locate(path: str | None) -> tuple[Path, str | None]:
    """(project root, sub-path filter) for a search from PATH (default: cwd).

    PATH inside an indexed project searches that project restricted to PATH; otherwise PATH
    (or the enclosing git work tree, for the cwd) is the project.
    """
    from supergrep.index.project import find_project_root

    start = Path(path).expanduser() if path else Path.cwd()
    if not start.exists():
        raise UsageError(f"{start} does not exist; pass a directory inside the project to search")
    start = start.resolve()
    directory = start if start.is_dir() else start.parent
    root = find_project_root(directory) if not path else None
    if root is None:
        from supergrep.index.format import MANIFEST, default_index_dir

        root = directory
        for d in [directory, *directory.parents]:
            if (default_index_dir(d) / MANIFEST).is_file():
                root = d
                break
    sub = os.path.relpath(start, root) if start != root else None
    if sub is not None and (sub == "." or sub.startswith("..")):
        sub = None
    return root, sub


@click.command("search")
@click.argument("query")
@click.argument("path", required=False)
@click.option("-n", "--limit", type=click.IntRange(1, 10_000), help="Number of results (default 10).")
@click.option("-t", "--type", "types", multiple=True, type=click.Choice(language_names()),
              help="Only this language (repeatable).")
@click.option("-T", "--exclude", "excludes", multiple=True, help="Leave out paths matching this glob (repeatable).")
@click.option("--path", "subdir", help="Only results under this sub-directory of the project.")
@click.option("-C", "--context", type=click.IntRange(0, 10_000), default=3, show_default=True,
              help="Lines of each result to show.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: query, mode, count, results.")
@click.option("--mode", type=click.Choice(MODES), help="semantic, lexical or hybrid (default).")
@click.option("--auto", is_flag=True, help="Weigh lexical matching up for code-like queries.")
@click.option("--no-index", is_flag=True, help="Fail instead of indexing an unindexed project.")
@click.option("--exact", is_flag=True, help="Exact MaxSim over every chunk (no candidate generation on a compressed index).")
@common_options
def search_cmd(query: str, path: str | None, limit: int | None, types: tuple[str, ...],
               excludes: tuple[str, ...], subdir: str | None, context: int, as_json: bool,
               mode: str | None, auto: bool, no_index: bool, exact: bool, opts: Options) -> None:
    """Find code by meaning. Exit status: 0 results, 1 none, 2 error.

        supergrep search "retry a request with exponential backoff"

        supergrep "where do we parse the config file" src/ -n 5 --json
    """
    root, sub = locate(path)
    if subdir:
        sub = f"{sub}/{subdir.strip('/')}" if sub else subdir.strip("/")
    cfg = opts.config(root)
    if exact:
        cfg.search.exact = True
    index = opts.index(root)
    encoder = None
    if not index.exists():
        if no_index:
            raise IndexMissingError(f"{root} has no index; run `supergrep index {root}` (or drop --no-index)")
        from supergrep.cli.cmd_index import run_index

        click.echo(f"supergrep: indexing {root} first (`supergrep index` keeps it current)", err=True)
        index, encoder, _ = run_index(opts, root, quiet=as_json)
    searcher = Searcher(index, encoder or (lambda: opts.encoder(cfg)), cfg.search)
    filters = SearchFilters(languages=list(types), path_prefix=sub, exclude_globs=list(excludes))
    hits = searcher.search(query, mode=mode, limit=limit, filters=filters, auto=auto)
    if as_json:
        echo_json({
            "query": query,
            "mode": mode or cfg.search.mode,
            "count": len(hits),
            "results": [hit_json(h, context) for h in hits],
        })
    else:
        print_hits(hits, context)
    if not hits:
        raise SystemExit(1)
