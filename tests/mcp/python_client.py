"""Drive warden's MCP endpoint with the reference Python SDK.

Usage: python python_client.py URL TOKEN
Prints one JSON line: the tools listed and the results of two calls.
"""

import asyncio
import json
import sys

import httpx2  # mcp 2.x's HTTP client
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client


async def main(url: str, token: str) -> None:
    auth = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"},
        timeout=httpx2.Timeout(30, read=300),
    )
    async with auth, streamable_http_client(url, http_client=auth) as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(
            read,
            write,
            client_info=types.Implementation(name="python-sdk-client", version="0.3.0"),
        ) as session:
            await session.initialize()
            tools = await session.list_tools()
            allowed = await session.call_tool("read", {"filePath": "notes.txt"})
            denied = await session.call_tool("read", {"filePath": "secret.env"})
            dump = lambda r: r.model_dump(mode="json", by_alias=True, exclude_none=True)
            print(
                json.dumps(
                    {
                        "tools": [t.name for t in tools.tools],
                        "allowed": dump(allowed),
                        "denied": dump(denied),
                    }
                ),
                flush=True,
            )


asyncio.run(main(sys.argv[1], sys.argv[2]))
