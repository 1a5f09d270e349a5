"""`supergrep serve-mcp`: an MCP server over stdio for coding agents (docs/agents.md)."""

from __future__ import annotations

import click

from supergrep.cli.common import Options, common_options
from supergrep.errors import UsageError


@click.command("serve-mcp")
@common_options(device=False)
def serve_mcp_cmd(opts: Options) -> None:
    """Serve supergrep's search to a coding agent over MCP (stdio): tools `search`, `index`,
    `status`. Uses the daemon when it runs, else loads the model itself.

        claude mcp add supergrep -- supergrep serve-mcp
    """
    try:
        from supergrep.daemon.mcp_server import Backend, serve
    except ImportError as exc:
        raise UsageError(f"serve-mcp needs the MCP SDK ({exc}); pip install 'supergrep[mcp]'") from None
    backend = Backend(model_path=str(opts.model_path.expanduser().resolve()) if opts.model_path else None,
                      index_dir=str(opts.index_dir.resolve()) if opts.index_dir else None,
                      config=str(opts.config_file.resolve()) if opts.config_file else None)
    serve(backend)
