"""A small MCP server for agent-mcp's tests, on the `mcp` package's low-level server, over stdio.

Tools: `echo` and `add` (read-only), `env` (its environment, working directory and pid, as
JSON), `read_path` (a file's text, or why it cannot be read), `append_line` (appends a line to a file: a side effect the
tests can count), `append_then_sleep` (appends, then sleeps: a kill lands mid-call), `fail` (answers with isError), `crash` (the server exits mid-call), `slow`
(sleeps), `effect_then_sleep` (appends, then sleeps; a cancellation of the call
(`notifications/cancelled`) appends `cancelled` to `<path>.cancelled`), `huge` (returns a text
of `bytes` bytes, generated), and `bad_schema` (an input schema that is not valid JSON Schema).

`--exit-at-start` makes it exit before the MCP handshake, as a server that fails to start.
`--http PORT` serves streamable HTTP on 127.0.0.1:PORT at `/mcp` instead of stdio.
"""

import asyncio
import os
import sys

import mcp_types as types
from mcp.server import Server
from mcp.server.stdio import stdio_server


def text(value):
    return [types.TextContent(type="text", text=value)]


TOOLS = [
    types.Tool(
        name="echo",
        description="Returns its text.",
        input_schema={
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        },
        annotations=types.ToolAnnotations(read_only_hint=True),
    ),
    types.Tool(
        name="add",
        description="Adds two integers.",
        input_schema={
            "type": "object",
            "properties": {
                "a": {"type": "integer"},
                "b": {"type": "integer", "exclusiveMinimum": -1000},
            },
            "required": ["a", "b"],
            "$defs": {"unused": {"type": "string"}},
        },
        annotations=types.ToolAnnotations(read_only_hint=True, idempotent_hint=True),
    ),
    types.Tool(
        name="append_line",
        description="Appends a line to a file.",
        input_schema={
            "type": "object",
            "properties": {"path": {"type": "string"}, "line": {"type": "string"}},
            "required": ["path", "line"],
        },
        annotations=types.ToolAnnotations(read_only_hint=False, destructive_hint=False),
    ),
    types.Tool(
        name="append_then_sleep",
        description="Appends a line to a file, then sleeps for `seconds`.",
        input_schema={
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "line": {"type": "string"},
                "seconds": {"type": "number"},
            },
            "required": ["path", "line", "seconds"],
        },
    ),
    types.Tool(
        name="effect_then_sleep",
        description="Appends a line to a file, then sleeps for `seconds`; a cancelled call appends `cancelled` to `<path>.cancelled`.",
        input_schema={
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "line": {"type": "string"},
                "seconds": {"type": "number"},
            },
            "required": ["path", "line", "seconds"],
        },
        annotations=types.ToolAnnotations(read_only_hint=False, idempotent_hint=False),
    ),
    types.Tool(
        name="huge",
        description="Returns a text of `bytes` bytes.",
        input_schema={
            "type": "object",
            "properties": {"bytes": {"type": "integer"}},
            "required": ["bytes"],
        },
        annotations=types.ToolAnnotations(read_only_hint=True),
    ),
    types.Tool(
        name="fail",
        description="Always fails, as a tool error.",
        input_schema={"type": "object", "properties": {}},
        annotations=types.ToolAnnotations(read_only_hint=True),
    ),
    types.Tool(
        name="crash",
        description="Makes the server exit in the middle of the call.",
        input_schema={"type": "object", "properties": {}},
    ),
    types.Tool(
        name="slow",
        description="Sleeps for `seconds`.",
        input_schema={
            "type": "object",
            "properties": {"seconds": {"type": "number"}},
            "required": ["seconds"],
        },
        annotations=types.ToolAnnotations(read_only_hint=True),
    ),
    types.Tool(
        name="env",
        description="Returns the server's environment (JSON) and working directory; writes it to `path` too when given.",
        input_schema={"type": "object", "properties": {"path": {"type": "string"}}},
        annotations=types.ToolAnnotations(read_only_hint=True),
    ),
    types.Tool(
        name="read_path",
        description="Returns the text of a file, or why it cannot be read.",
        input_schema={
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
        annotations=types.ToolAnnotations(read_only_hint=True),
    ),
    types.Tool(
        name="bad_schema",
        description="Its input schema is not valid JSON Schema.",
        input_schema={"type": "object", "properties": {"x": {"type": "strng"}, "y": {"minLength": -1}}},
    ),
]


async def list_tools(ctx, params):
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(ctx, params):
    args = params.arguments or {}
    if params.name == "echo":
        return types.CallToolResult(content=text(args["text"]))
    if params.name == "add":
        return types.CallToolResult(content=text(str(args["a"] + args["b"])))
    if params.name == "append_line":
        with open(args["path"], "a", encoding="utf-8") as f:
            f.write(args["line"] + "\n")
        return types.CallToolResult(content=text("appended to " + args["path"]))
    if params.name == "append_then_sleep":
        with open(args["path"], "a", encoding="utf-8") as f:
            f.write(args["line"] + "\n")
        await asyncio.sleep(float(args["seconds"]))
        return types.CallToolResult(content=text("appended, then slept"))
    if params.name == "effect_then_sleep":
        with open(args["path"], "a", encoding="utf-8") as f:
            f.write(args["line"] + "\n")
        finished = False
        try:
            await asyncio.sleep(float(args["seconds"]))
            finished = True
        finally:
            if not finished:
                with open(args["path"] + ".cancelled", "a", encoding="utf-8") as f:
                    f.write("cancelled\n")
        return types.CallToolResult(content=text("appended, then slept"))
    if params.name == "huge":
        n = int(args["bytes"])
        line = "0123456789abcdef" * 7 + "0123456789abcd\n"  # 128 bytes
        body = line * (n // len(line)) + "x" * (n % len(line))
        return types.CallToolResult(content=text(body))
    if params.name == "env":
        import json

        seen = json.dumps({"env": dict(os.environ), "cwd": os.getcwd(), "pid": os.getpid()})
        if "path" in args:
            with open(args["path"], "w", encoding="utf-8") as f:
                f.write(seen)
        return types.CallToolResult(content=text(seen))
    if params.name == "read_path":
        try:
            with open(args["path"], encoding="utf-8") as f:
                return types.CallToolResult(content=text(f.read()))
        except OSError as e:
            return types.CallToolResult(content=text("cannot read: " + str(e)), is_error=True)
    if params.name == "fail":
        return types.CallToolResult(content=text("this tool always fails"), is_error=True)
    if params.name == "crash":
        print("crashing on purpose", file=sys.stderr, flush=True)
        os._exit(3)
    if params.name == "slow":
        await asyncio.sleep(float(args["seconds"]))
        return types.CallToolResult(content=text("slept"))
    return types.CallToolResult(content=text("unknown tool " + params.name), is_error=True)


async def main():
    if "--exit-at-start" in sys.argv:
        print("the test server refuses to start", file=sys.stderr, flush=True)
        sys.exit(2)
    server = Server("strata-test", on_list_tools=list_tools, on_call_tool=call_tool)
    if "--http" in sys.argv:
        import uvicorn

        port = int(sys.argv[sys.argv.index("--http") + 1])
        app = server.streamable_http_app(host="127.0.0.1")
        config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
        await uvicorn.Server(config).serve()
        return
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


if __name__ == "__main__":
    asyncio.run(main())
