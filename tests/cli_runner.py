"""Drive the real entry point `supergrep.cli.main` (error mapping, exit codes) from CliRunner."""

from __future__ import annotations

from click.testing import CliRunner

from supergrep.cli import main


class _Main:
    """Adapter so CliRunner calls `main(argv)` rather than the bare click group."""

    name = "supergrep"

    def main(self, args=None, prog_name=None, **_):
        main(list(args or []))


def run_main(args, catch_exceptions: bool = False, **kw):
    """`supergrep ARGS` through `main`; every arg is passed as a string."""
    return CliRunner().invoke(_Main(), [str(a) for a in args], catch_exceptions=catch_exceptions, **kw)
