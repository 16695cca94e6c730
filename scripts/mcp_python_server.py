#!/usr/bin/env python3
"""An MCP server built with the official Python MCP SDK (`mcp` 2.3.0), for interop tests.

Serves at http://127.0.0.1:PORT/mcp (Streamable HTTP) or http://127.0.0.1:PORT/sse (the legacy
HTTP+SSE transport, `--transport sse`) with four tools:
  shout(text)    -> the text in upper case
  multiply(a, b) -> a * b
  explode()      -> raises ToolError, so the call result has isError: true
  confirm()      -> asks the client for input (elicitation) and says what the client answered
  ask(kind)      -> sends the client a `sampling/createMessage` or `roots/list` request and says
                    whether it was answered or refused

`--era` narrows which lifecycles the Streamable HTTP server speaks (the SDK speaks both):
  both        the SDK as it is: 2026-07-28 (server/discover) and the initialize handshake
  modern      2026-07-28 only: `initialize` is answered with JSON-RPC -32601
  handshake   the handshake only: a 2026-07-28 request (`server/discover`, or the version
              header) is answered with JSON-RPC -32601, as an older server answers it

Usage: mcp_python_server.py --port PORT [--host 127.0.0.1] [--transport streamable-http|sse]
       [--era both|modern|handshake] [--sse-path /sse]
"""

import argparse
import json
import sys
import warnings

import uvicorn
from pydantic import BaseModel

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp.types import SamplingMessage, TextContent

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


class Proceed(BaseModel):
    proceed: bool


@server.tool(description="Asks the user whether to proceed, and says what they answered")
async def confirm(ctx: Context) -> str:
    try:
        result = await ctx.elicit(message="Proceed?", schema=Proceed)
    except Exception as e:  # the client refused the request outright
        return f"elicitation failed: {e}"
    return f"elicitation: {result.action}"


@server.tool(description="Sends the client a sampling or roots request and says what happened")
async def ask(kind: str, ctx: Context) -> str:
    session = ctx.session
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # both capabilities are deprecated as of 2026-07-28
            if kind == "sampling":
                message = SamplingMessage(role="user", content=TextContent(type="text", text="hi"))
                answer = await session.create_message([message], max_tokens=1, related_request_id=ctx.request_id)
            else:
                answer = await session.list_roots()
    except MCPError as e:
        return f"refused: JSON-RPC {e.code}: {e.message}"
    except Exception as e:
        return f"refused: {e}"
    return f"answered: {answer}"


def refusing(app, era: str):
    """`app`, answering the requests of the lifecycle `era` leaves out with JSON-RPC -32601."""
    if era == "both":
        return app

    async def wrapped(scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST":
            return await app(scope, receive, send)
        chunks = []
        more = True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        try:
            rpc = json.loads(body)
        except ValueError:
            rpc = None
        method = rpc.get("method") if isinstance(rpc, dict) else None
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        modern = method == "server/discover" or headers.get("mcp-protocol-version") == "2026-07-28"
        refused = (era == "modern" and method == "initialize") or (era == "handshake" and modern)
        if refused and isinstance(rpc, dict) and "id" in rpc:
            answer = json.dumps(
                {"jsonrpc": "2.0", "id": rpc["id"], "error": {"code": -32601, "message": f"Method not found: {method}"}}
            ).encode()
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": answer})
            return
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await app(scope, replay, send)

    return wrapped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--transport", choices=["streamable-http", "sse"], default="streamable-http")
    parser.add_argument("--era", choices=["both", "modern", "handshake"], default="both")
    parser.add_argument("--sse-path", default="/sse", help="where the legacy SSE stream is served")
    args = parser.parse_args()
    if args.transport == "sse":
        app = server.sse_app(sse_path=args.sse_path, host=args.host)
        path = args.sse_path
    else:
        app = refusing(server.streamable_http_app(streamable_http_path="/mcp", host=args.host), args.era)
        path = "/mcp"
    print(f"listening on http://{args.host}:{args.port}{path}", flush=True)
    sys.stdout.flush()
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
