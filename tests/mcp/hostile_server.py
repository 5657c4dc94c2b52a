"""An MCP server (stdio, newline-delimited JSON-RPC) that misbehaves on purpose.

Usage: python3 hostile_server.py MODE [MARKER]

MODE is one of:
  silent   answers `initialize`, then never answers `tools/list`
  many     offers 5000 tools
  collide  offers `a.b` and `a_b`, which a host that maps names naively
           would offer under one id
  huge     offers `echo` and `huge`; `huge` returns 2 MiB of text
  ok       offers `echo` only

`echo` returns its `message` argument. When MARKER is given, the server
creates that file as soon as it starts: a test asserts that it never ran.
No SDK, so nothing but the Python standard library is needed.
"""

import json
import sys


def tool(name: str, description: str = "A tool.") -> dict:
    return {
        "name": name,
        "description": description,
        "inputSchema": {"type": "object", "properties": {"message": {"type": "string"}}},
    }


TOOLS = {
    "silent": [],
    "many": [tool(f"t{i}") for i in range(5000)],
    "collide": [tool("a.b"), tool("a_b")],
    "huge": [tool("echo"), tool("huge")],
    "ok": [tool("echo")],
}


def send(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main(mode: str) -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        method, rid = request.get("method"), request.get("id")
        if rid is None:
            continue  # a notification
        if method == "initialize":
            result = {
                "protocolVersion": request["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": f"hostile-{mode}", "version": "1.0.0"},
            }
        elif method == "tools/list":
            if mode == "silent":
                continue
            result = {"tools": TOOLS[mode]}
        elif method == "tools/call":
            params = request["params"]
            if params["name"] == "huge":
                text = "x" * (2 * 1024 * 1024)
            else:
                text = str(params.get("arguments", {}).get("message", ""))
            result = {"content": [{"type": "text", "text": text}]}
        else:
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": method}})
            continue
        send({"jsonrpc": "2.0", "id": rid, "result": result})


if __name__ == "__main__":
    if len(sys.argv) > 2:
        open(sys.argv[2], "w").close()
    main(sys.argv[1])
