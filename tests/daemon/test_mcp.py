"""The MCP server, driven by the official SDK's own stdio client."""

from __future__ import annotations

import json
import sys

import pytest

from conftest import cli_env

mcp = pytest.importorskip("mcp")


def field(obj, snake: str, camel: str):
    """mcp 2.x names fields in snake_case, 1.x in camelCase."""
    return getattr(obj, snake, None) if hasattr(obj, snake) else getattr(obj, camel)


def structured(result) -> dict:
    data = getattr(result, "structured_content", None) or getattr(result, "structuredContent", None)
    if data is None:  # an SDK that only sends text content
        data = json.loads(result.content[0].text)
    return data.get("result", data) if set(data) == {"result"} else data


def test_mcp_round_trip(sample_project, tiny_model, _isolated_home):
    import anyio
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    env = cli_env(_isolated_home, SUPERGREP_MODEL=str(tiny_model))
    params = StdioServerParameters(command=sys.executable, args=["-m", "supergrep", "serve-mcp"], env=env,
                                   cwd=str(sample_project))

    async def session_calls():
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            tools = {t.name: t for t in (await session.list_tools()).tools}
            assert set(tools) == {"search", "index", "status"}
            assert {"query", "path", "limit", "mode", "languages"} <= set(field(tools["search"], "input_schema", "inputSchema")["properties"])

            st = structured(await session.call_tool("status", {}))
            assert st["root"] == str(sample_project) and st["indexed"] is False
            assert st["daemon"]["running"] is False

            rep = structured(await session.call_tool("index", {}))
            assert rep["files"] == 3 and rep["chunks"] > 5

            res = structured(await session.call_tool("search", {"query": "retry with exponential backoff",
                                                                 "limit": 3, "languages": ["python"]}))
            assert res["root"] == str(sample_project) and 0 < res["count"] <= 3
            top = res["results"][0]
            assert {"path", "start_line", "end_line", "symbol", "kind", "language", "score", "snippet"} <= set(top)
            assert all(r["language"] == "python" for r in res["results"])
            hit = next(r for r in res["results"] if r["symbol"] == "retry_with_backoff")
            assert (hit["path"], hit["start_line"]) == ("app/retry.py", 4) and "def retry_with_backoff" in hit["snippet"]

            lex = structured(await session.call_tool("search", {"query": "check_password", "mode": "lexical",
                                                                 "path": "app"}))
            assert lex["results"][0]["symbol"] == "User.check_password"

            bad = await session.call_tool("search", {"query": "x", "languages": ["klingon"]})
            assert field(bad, "is_error", "isError")
            assert "unknown language 'klingon'; known: " in bad.content[0].text  # the agent reads why
            missing = await session.call_tool("index", {"path": str(sample_project / "no-such-dir")})
            assert field(missing, "is_error", "isError") and "does not exist" in missing.content[0].text

            st = structured(await session.call_tool("status", {"path": str(sample_project)}))
            assert st["indexed"] is True and st["files"] == 3

    anyio.run(session_calls)
