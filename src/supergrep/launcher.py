"""The ``supergrep`` / ``sgr`` entry point: searches answered by a running daemon in milliseconds.

Importing the click CLI costs ~0.5 s (click, NumPy, every command) and a direct semantic search
then loads torch and the model (~5 s). This module recognises a plain search invocation with
the standard library alone, sends it to the daemon (docs/daemon.md) and writes the daemon's
answer, which the daemon renders with the same code as the direct path (``index/render.py``):
same bytes, same exit status (0 results, 1 none, 2 error).

Everything else goes to the click CLI unchanged: other commands, ``--direct``, ``-v``,
``--device``, ``-h``, an option or form this parser does not know, a value click would reject,
no daemon running (or ``SUPERGREP_NO_DAEMON=1``), and anything the daemon hands back
(``fallback``). So the CLI stays the one definition of the command line; this is a shortcut
for its most common sentence. It lives outside ``cli/`` because importing any module of that
package runs ``cli/__init__`` (click and every command).
"""

from __future__ import annotations

import os
import sys

# The command line's one definition (shared with the daemon's `argv` op for the native client).
from supergrep.daemon.cmdline import COMMANDS, MODEL_NAMES, MODES, parse_search  # noqa: E402,F401


def _quiet_stdout() -> None:
    """The reader went away (``| head``): point stdout at /dev/null so the exit flush is quiet."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def search_via_daemon(request: dict) -> int | None:
    """Run a search request on the daemon and write its output. Returns the exit status, or
    None when the CLI should handle the command instead (nothing was written to stdout)."""
    from supergrep.daemon import client

    def notice(line: str) -> None:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()

    try:
        answer = client.call(request, timeout=None, on_notice=notice)
    except client.DaemonUnavailable:
        return None
    except client.DaemonError as exc:
        if exc.fallback:
            return None
        sys.stderr.write(f"supergrep: error: {exc.message}\n")
        return exc.exit_code
    out, code = answer.get("stdout"), answer.get("exit_code")
    if not isinstance(out, str) or code not in (0, 1):
        return None
    try:
        sys.stdout.write(out)
        sys.stdout.flush()
    except BrokenPipeError:
        _quiet_stdout()
        return 0
    return code


def _daemon_allowed() -> bool:
    if os.environ.get("SUPERGREP_NO_DAEMON", "") not in ("", "0"):
        return False
    return "_SUPERGREP_COMPLETE" not in os.environ  # shell completion: click answers it


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``supergrep`` and ``sgr`` scripts and of ``python -m supergrep``."""
    args = sys.argv[1:] if argv is None else list(argv)
    if _daemon_allowed():
        request = parse_search(args)
        if request is not None:
            try:
                code = search_via_daemon(request)
            except KeyboardInterrupt:
                sys.stderr.write("supergrep: interrupted\n")
                code = 130
            if code is not None:
                sys.exit(code)
    from supergrep.cli import main as cli_main

    cli_main(args)
