"""`supergrep search QUERY [PATH]` (also `supergrep "QUERY"`)."""

from __future__ import annotations

from pathlib import Path

import click

from supergrep.cli.common import Options, common_options
from supergrep.cli.output import echo_json, hit_json, print_hits, use_color
from supergrep.corpus.languages import language_names
from supergrep.errors import IndexMissingError, SupergrepError
from supergrep.index.search import MODES, Searcher, SearchFilters


def locate(path: str | None) -> tuple[Path, str | None]:
    """(project root, sub-path filter) for a search from PATH (default: cwd); see
    ``index.project.search_root``."""
    from supergrep.index.project import search_root

    return search_root(path)


def search_via_daemon(request: dict, opts: Options) -> int | None:
    """Answer a search through the daemon (same output as the direct path, rendered by the same
    code); None when no daemon runs or it hands the search back."""
    from supergrep.daemon import client

    if client.disabled():
        return None
    cwd = Path.cwd()
    model = Path(opts.model_path).expanduser() if opts.model_path else None
    if (model is not None and not (cwd / model).is_dir()) or (opts.config_file and not (cwd / opts.config_file).is_file()):
        return None  # the direct path words these errors
    request.update(cwd=str(cwd), index_dir=str(cwd / opts.index_dir) if opts.index_dir else None,
                   model_path=str(cwd / model) if model else None,
                   config=str(cwd / opts.config_file) if opts.config_file else None)
    try:
        answer = client.call(request, timeout=None, on_notice=lambda line: click.echo(line, err=True))
    except client.DaemonUnavailable:
        return None
    except client.DaemonError as exc:
        if exc.fallback:
            return None
        raise SupergrepError(exc.message) from None
    if not isinstance(answer.get("stdout"), str) or answer.get("exit_code") not in (0, 1):
        return None
    click.echo(answer["stdout"], nl=False)
    return int(answer["exit_code"])


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
@click.option("--direct", is_flag=True, help="Search in this process even when the daemon runs.")
@click.option("--exact", is_flag=True, help="Exact MaxSim over every chunk (no candidate generation on a compressed index).")
@common_options
def search_cmd(query: str, path: str | None, limit: int | None, types: tuple[str, ...],
               excludes: tuple[str, ...], subdir: str | None, context: int, as_json: bool,
               mode: str | None, auto: bool, no_index: bool, direct: bool, exact: bool, opts: Options) -> None:
    """Find code by meaning. Exit status: 0 results, 1 none, 2 error.

        supergrep search "retry a request with exponential backoff"

        supergrep "where do we parse the config file" src/ -n 5 --json

    A running daemon (`supergrep daemon start`) answers searches without loading the model;
    --direct, --exact, -v, --device or SUPERGREP_NO_DAEMON=1 search in this process.
    """
    if not direct and not exact and not opts.device and not click.get_current_context().params.get("verbose"):
        request = {"op": "search", "query": query, "path": path, "limit": limit, "types": list(types),
                   "excludes": list(excludes), "subdir": subdir, "mode": mode, "auto": auto, "no_index": no_index,
                   "render": {"format": "json" if as_json else "text", "context": context, "color": use_color()}}
        code = search_via_daemon(request, opts)
        if code is not None:
            raise SystemExit(code)
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
    searcher = Searcher(index, encoder or (lambda: opts.encoder(cfg, index)), cfg.search)
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
