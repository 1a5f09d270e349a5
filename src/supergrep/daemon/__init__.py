"""The supergrep daemon: warm models, indexes kept current by a file watcher, search over a
unix socket (docs/daemon.md).

``paths``, ``protocol`` and ``client`` import only the standard library: the search client in
``supergrep.launcher`` must start in milliseconds. ``engine``, ``watcher`` and ``server`` are
the daemon itself; ``mcp_server`` serves the same engine to coding agents over MCP.
"""
