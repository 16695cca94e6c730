#!/usr/bin/env python3
"""An MCP server built with the official Python MCP SDK (`mcp` 2.3.0), for interop tests.

Serves Streamable HTTP at http://127.0.0.1:PORT/mcp with three tools:
  shout(text)    -> the text in upper case
  multiply(a, b) -> a * b
  explode()      -> raises ToolError, so the call result has isError: true

Usage: mcp_python_server.py --port PORT [--host 127.0.0.1]
"""

import argparse
import sys

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("relay-python-test-server", instructions="responses-relay interop test server")


@server.tool(description="Returns the text in upper case")
def shout(text: str) -> str:
    return text.upper()


@server.tool(description="Multiplies two numbers")
def multiply(a: float, b: float) -> float:
    return a * b


@server.tool(description="Always raises an exception")
def explode() -> str:
    # ToolError's message reaches the client; any other exception is reported without its text.
    raise ToolError("exploded on purpose")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args()
    print(f"listening on http://{args.host}:{args.port}/mcp", flush=True)
    sys.stdout.flush()
    server.run("streamable-http", host=args.host, port=args.port, streamable_http_path="/mcp")


if __name__ == "__main__":
    main()
