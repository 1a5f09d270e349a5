"""`supergrep serve-mcp`: supergrep's search as MCP tools for coding agents (stdio transport).

Built on the official MCP Python SDK (``pip install 'supergrep[mcp]'``): ``MCPServer`` in
mcp 2.x, ``FastMCP`` in 1.x. Tools: ``search``, ``index``, ``status`` (docs/agents.md).

Requests go to the daemon when one runs (shared warm model, indexes kept current); otherwise
the server runs the same engine in its own process: the model is loaded on the first semantic
search and stays loaded, and the projects it searched are watched while it runs.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any, Literal

from supergrep.daemon import client
from supergrep.errors import SupergrepError

log = logging.getLogger(__name__)

INSTRUCTIONS = """\
supergrep finds code by meaning (semantic multi-vector search fused with BM25 keyword search).
Use `search` with a natural-language description of the code you need ("where are expired
sessions cleaned up", "retry with exponential backoff") or an identifier; results are best
first, with the file path (relative to the project root), the 1-based line span, the enclosing
symbol and a snippet. Projects are indexed on first use and kept current as files change.
Use mode="lexical" for exact identifiers; `status` tells whether a project is indexed."""


def _sdk_tool_error() -> type[Exception]:
    """The SDK's "anticipated failure" exception: the agent reads its message (mcp 2.x turns
    any other exception into a bare "Error executing tool NAME" and logs a traceback)."""
    try:
        from mcp.server.mcpserver.exceptions import ToolError as SdkToolError  # mcp >= 2
    except ImportError:
        try:
            from mcp.server.fastmcp.exceptions import ToolError as SdkToolError  # mcp 1.x
        except ImportError:  # no SDK: Backend still works (tests, the CLI's error path)
            return Exception
    return SdkToolError


class ToolError(_sdk_tool_error()):  # type: ignore[misc]
    """A tool call that failed in a way the agent can fix (the message says how)."""


class Backend:
    """Where tool calls go: the daemon if it answers, else an in-process engine.

    Args:
        model_path: The model to index and search with (None: the default model).
        index_dir: An explicit index directory (None: the default per project).
        config: An extra TOML config file.
    """

    def __init__(self, model_path: str | None = None, index_dir: str | None = None, config: str | None = None):
        self.defaults = {"model_path": model_path, "index_dir": index_dir, "config": config}
        self._engine = None
        self._lock = threading.Lock()

    def engine(self):
        with self._lock:
            if self._engine is None:
                from supergrep.daemon.engine import Engine

                self._engine = Engine(watch=True, persist=False, preload=[])
                self._engine.start()
            return self._engine

    def via_daemon(self) -> bool:
        return not client.disabled() and client.ping(1.0) is not None

    def call(self, request: dict) -> dict:
        request = {"cwd": os.getcwd(), **self.defaults, **request}
        if not client.disabled():
            try:
                return client.call(request, timeout=None)
            except client.DaemonUnavailable:
                pass
            except client.DaemonError as exc:
                if not exc.fallback:
                    raise ToolError(exc.message) from None
        answer = self.engine().handle(request)
        if not answer.get("ok"):
            raise ToolError(answer["error"]["message"])
        return answer

    def close(self) -> None:
        if self._engine is not None:
            self._engine.stop()


def _server_class():
    try:
        from mcp.server.mcpserver import MCPServer  # mcp >= 2

        return MCPServer
    except ImportError:
        from mcp.server.fastmcp import FastMCP  # mcp 1.x

        return FastMCP


def build_server(backend: Backend):
    """The MCP server with its three tools (not started)."""
    import anyio

    from supergrep import __version__
    from supergrep.corpus.languages import language_names

    known_languages = set(language_names())
    server = _server_class()("supergrep", instructions=INSTRUCTIONS)
    try:
        server._mcp_server.version = __version__  # type: ignore[attr-defined]  # mcp 1.x only
    except AttributeError:
        pass

    @server.tool()
    async def search(
        query: str,
        path: str | None = None,
        limit: int = 10,
        mode: Literal["hybrid", "semantic", "lexical"] = "hybrid",
        languages: list[str] | None = None,
        exclude: list[str] | None = None,
        context_lines: int = 30,
    ) -> dict[str, Any]:
        """Find code by meaning in a project, best matches first.

        Args:
            query: What the code does, in words ("validate a JWT and return its claims"), or an
                identifier (then mode="lexical" is exact).
            path: The project directory, or a sub-directory or file inside an indexed project
                to search only there (absolute, or relative to the server's working directory;
                default: the working directory's project).
            limit: Number of results (1-200).
            mode: "hybrid" (default, meaning + keywords), "semantic" or "lexical" (BM25 only).
            languages: Only these languages, e.g. ["python", "rust"].
            exclude: gitignore-style globs of paths to leave out, e.g. ["tests/"].
            context_lines: Lines of each result's code to return (0-500).

        Returns:
            {"root", "query", "mode", "count", "results": [{"path", "start_line", "end_line",
            "symbol", "kind", "language", "score", "snippet"}]}; paths are relative to root and
            line numbers 1-based, inclusive.
        """
        bad = sorted(set(languages or []) - known_languages)
        if bad:
            raise ToolError(f"unknown language {bad[0]!r}; known: {', '.join(sorted(known_languages))}")
        request = {"op": "search", "query": query, "path": path, "limit": max(1, min(int(limit), 200)),
                   "mode": mode, "types": list(languages or []), "excludes": list(exclude or []),
                   "context": max(0, min(int(context_lines), 500))}
        answer = await anyio.to_thread.run_sync(backend.call, request)
        return {"root": answer["root"], "query": query, "mode": answer["mode"], "count": answer["count"],
                "results": answer["results"]}

    @server.tool()
    async def index(path: str | None = None, force: bool = False) -> dict[str, Any]:
        """Index a project now (incremental: only changed files are re-embedded) and keep it
        current. Searching an unindexed project indexes it too; use this to do it ahead.

        Args:
            path: The project directory (default: the working directory's project).
            force: Rebuild from scratch (e.g. after changing the model).

        Returns:
            {"root", "files", "chunks", "files_indexed", "files_removed", "seconds", ...}.
        """
        answer = await anyio.to_thread.run_sync(backend.call, {"op": "index", "path": path, "force": force})
        return {k: v for k, v in answer.items() if k not in ("v", "ok", "id")}

    @server.tool()
    async def status(path: str | None = None) -> dict[str, Any]:
        """Whether a project is indexed, and what its index holds.

        Args:
            path: The project directory (default: the working directory's project).

        Returns:
            {"root", "indexed", "files", "chunks", "vectors", "updated", "model", "daemon"}.
        """
        return await anyio.to_thread.run_sync(_status, backend, path)

    return server


def _status(backend: Backend, path: str | None) -> dict[str, Any]:
    from supergrep.index.project import Index, search_root

    try:
        root, _ = search_root(path)
    except SupergrepError as exc:
        raise ToolError(str(exc)) from None
    index_dir = backend.defaults.get("index_dir")
    index = Index(root, Path(index_dir) if index_dir else None)
    out: dict[str, Any] = {"root": str(root), "indexed": index.exists()}
    if index.exists():
        s = index.stats()
        out.update({k: s[k] for k in ("files", "lines", "chunks", "vectors", "bytes", "updated", "index_dir")})
        out["model"] = s["model"].get("name")
        index.close()
    answer = client.ping(1.0) if not client.disabled() else None
    out["daemon"] = {"running": answer is not None, "pid": answer.get("pid") if answer else None}
    return out


def serve(backend: Backend) -> None:
    """Serve MCP over stdin/stdout until the client disconnects."""
    server = build_server(backend)
    try:
        server.run()  # stdio is the default transport
    finally:
        backend.close()
