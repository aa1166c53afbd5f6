"""A small MCP server for the `examples/mcp` team, written with the `mcp` package (PyPI).

Tools (over stdio):
- `append_note` (side effects: appends a line to the notes file; not idempotent),
- `read_notes` (read-only: the notes so far),
- `count_words` (read-only: the words in a text).

The notes file is $NOTES_FILE, else `notes.md` in the directory the server runs in.
"""

import asyncio
import os

import mcp_types as types
from mcp.server import Server
from mcp.server.stdio import stdio_server

NOTES = os.environ.get("NOTES_FILE", "notes.md")


def text(value):
    return [types.TextContent(type="text", text=value)]


TOOLS = [
    types.Tool(
        name="append_note",
        description="Appends one line to the notes file and says how many lines it has.",
        input_schema={
            "type": "object",
            "properties": {"line": {"type": "string", "minLength": 1, "maxLength": 500}},
            "required": ["line"],
        },
        annotations=types.ToolAnnotations(read_only_hint=False, idempotent_hint=False),
    ),
    types.Tool(
        name="read_notes",
        description="Returns the notes file.",
        input_schema={"type": "object", "properties": {}},
        annotations=types.ToolAnnotations(read_only_hint=True),
    ),
    types.Tool(
        name="count_words",
        description="Counts the words of a text.",
        input_schema={
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        },
        annotations=types.ToolAnnotations(read_only_hint=True),
    ),
]


async def list_tools(ctx, params):
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(ctx, params):
    args = params.arguments or {}
    if params.name == "append_note":
        parent = os.path.dirname(NOTES)
        if parent:
            os.makedirs(parent, exist_ok=True)
        with open(NOTES, "a", encoding="utf-8") as f:
            f.write(args["line"] + "\n")
        with open(NOTES, encoding="utf-8") as f:
            lines = sum(1 for _ in f)
        return types.CallToolResult(content=text(f"{NOTES} has {lines} line(s)"))
    if params.name == "read_notes":
        try:
            with open(NOTES, encoding="utf-8") as f:
                return types.CallToolResult(content=text(f.read()))
        except FileNotFoundError:
            return types.CallToolResult(content=text(f"{NOTES} does not exist yet"), is_error=True)
    if params.name == "count_words":
        return types.CallToolResult(content=text(str(len(args["text"].split()))))
    return types.CallToolResult(content=text("unknown tool " + params.name), is_error=True)


async def main():
    server = Server("strata-notes", on_list_tools=list_tools, on_call_tool=call_tool)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


if __name__ == "__main__":
    asyncio.run(main())
