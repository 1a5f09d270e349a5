"""The plain search command line, recognised with the standard library alone.

``parse_search`` turns ``supergrep QUERY [PATH] [options]`` into a daemon search request, or
None for anything the click CLI must judge. Two callers: the Python launcher
(``supergrep.launcher``) and the daemon's ``argv`` op, which parses a native client's command
line (``daemon/sgr.c``) with the client's environment, so there is one definition of it.
"""

from __future__ import annotations

import os
import sys

# Every top-level command: a first argument that names one is not a query. Checked against
# the click group by tests/daemon/test_launcher.py, so a new command cannot be missed here.
COMMANDS = frozenset({
    "search", "index", "status", "files", "chunks", "clean", "eval", "eval-pairs", "mine", "mine-negatives", "distill", "shrink", "train", "merge", "interpolate",
    "convert", "profile", "bench", "quantize", "export", "daemon", "serve-mcp", "completions", "init", "models",
})
MODES = ("semantic", "lexical", "hybrid")
_VALUE_OPTIONS = {
    "-n": "limit", "--limit": "limit", "-t": "types", "--type": "types", "-T": "excludes",
    "--exclude": "excludes", "--path": "subdir", "-C": "context", "--context": "context",
    "--mode": "mode", "--index-dir": "index_dir", "--model-path": "model_path", "--model": "model_path",
    "--config": "config",
}
# supergrep.encoder.named.MODEL_NAMES, repeated so this module imports nothing of supergrep's
# (tests/encoder/test_named.py checks they agree). A name is sent as is; the daemon resolves it.
MODEL_NAMES = ("minilm", "minilm-l3", "mpnet")
_FLAGS = {"--json": "json", "--auto": "auto", "--no-index": "no_index"}
_REPEATABLE = ("types", "excludes")


def _int(value: str, low: int, high: int) -> int | None:
    try:
        n = int(value)
    except ValueError:
        return None
    return n if low <= n <= high else None


def _path_option(value: str | None, cwd: str, want_dir: bool) -> tuple[bool, str | None]:
    """(ok, absolute path): what click would accept, made absolute for the daemon."""
    if value is None:
        return True, None
    if value == "":
        return False, None
    path = os.path.join(cwd, value)
    if os.path.exists(path) and os.path.isdir(path) != want_dir:
        return False, None
    return True, path


def parse_search(argv: list[str], cwd: str | None = None, env=None, tty: bool | None = None) -> dict | None:
    """The daemon request for a plain search command line, or None to leave it to the CLI.

    ``env`` (default ``os.environ``) and ``tty`` (default: whether stdout is a terminal) are the
    client's: the daemon parses a native client's command line with them (the ``argv`` op)."""
    environ = os.environ if env is None else env
    if not argv:
        return None
    args = list(argv)
    if args[0] == "search":
        args = args[1:]
    elif args[0] in COMMANDS or args[0].startswith("-"):
        return None
    opts: dict = {"types": [], "excludes": []}
    positional: list[str] = []
    i, only_positional = 0, False
    while i < len(args):
        arg = args[i]
        i += 1
        if only_positional or arg == "-" or not arg.startswith("-"):
            positional.append(arg)
            continue
        if arg == "--":
            only_positional = True
            continue
        if arg in _FLAGS:
            opts[_FLAGS[arg]] = True
            continue
        name, value = arg, None
        if arg.startswith("--"):
            if "=" in arg:
                name, value = arg.split("=", 1)
        elif len(arg) > 2:
            name, value = arg[:2], arg[2:]  # -n5, -tpython
        key = _VALUE_OPTIONS.get(name)
        if key is None:
            return None  # -v, --device, --direct, -h/--help, or something click must judge
        if value is None:
            if i >= len(args):
                return None
            value = args[i]
            i += 1
        if key in _REPEATABLE:
            opts[key].append(value)
        else:
            opts[key] = value
    if not 1 <= len(positional) <= 2:
        return None
    try:
        cwd = cwd or os.getcwd()
    except OSError:  # the working directory was deleted
        return None
    limit = context = None
    if "limit" in opts and (limit := _int(opts["limit"], 1, 10_000)) is None:
        return None
    if "context" in opts:
        if (context := _int(opts["context"], 0, 10_000)) is None:
            return None
    if opts.get("mode") is not None and opts["mode"] not in MODES:
        return None
    ok_i, index_dir = _path_option(opts.get("index_dir", environ.get("SUPERGREP_INDEX_DIR") or None), cwd, True)
    ok_c, config = _path_option(opts.get("config"), cwd, False)
    model = opts.get("model_path", environ.get("SUPERGREP_MODEL") or None)
    model_path = os.path.join(cwd, os.path.expanduser(model)) if model else None
    ok_m = model_path is None or os.path.isdir(model_path)
    if model in MODEL_NAMES and not ok_m:
        model_path, ok_m = model, True  # a name (no directory of that name here): the daemon resolves it
    if not (ok_i and ok_c and ok_m) or (config and not os.path.isfile(config)):
        return None  # let click / the direct path word the error exactly
    return {
        "op": "search", "query": positional[0], "path": positional[1] if len(positional) > 1 else None,
        "cwd": cwd, "limit": limit, "types": opts["types"], "excludes": opts["excludes"],
        "subdir": opts.get("subdir"), "mode": opts.get("mode"), "auto": bool(opts.get("auto")),
        "no_index": bool(opts.get("no_index")), "index_dir": index_dir, "model_path": model_path,
        "config": config,
        "render": {"format": "json" if opts.get("json") else "text", "context": 3 if context is None else context,
                   "color": _color(environ, tty)},
    }


def _color(environ, tty: bool | None = None) -> bool:
    """Colour only on a terminal, never with NO_COLOR (as cli/output.use_color decides)."""
    if environ.get("NO_COLOR"):
        return False
    if tty is not None:
        return tty
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False
