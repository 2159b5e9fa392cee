"""An MCP server for the tests of `mesh agent mcp`, on the official Python SDK (MCPServer).

Its tools do what the reference servers cannot be made to do on demand:
- `slow(seconds)` sleeps, reporting progress every 0.1 s; canceled, it writes a file
  `canceled` into the directory given with `--marks DIR` (so a test sees that the
  cancellation arrived);
- `crash()` ends the process at once (exit status 3), as a crashing server would;
- `grow(name)` adds a tool `name` and announces the change (notifications/tools/list_changed);
- `fail(reason)` raises a ToolError, which the SDK answers as a tool error (isError) carrying
  the reason.

With `--one-tool` it serves `shout(text)` alone (with `--marks`, each call writes `shouted`) (a server whose one tool takes one string, which
a message's text calls). Runs over stdio, or over Streamable HTTP with `--http PORT` (on
127.0.0.1, at /mcp).
"""

import os
import sys

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("mesh-test-server")
marks = None


def mark(name: str) -> None:
    if marks:
        with open(os.path.join(marks, name), "w") as f:
            f.write(name)


@server.tool()
async def slow(seconds: float, ctx: Context) -> str:
    """Sleeps for `seconds`, reporting progress every 0.1 s."""
    steps = max(1, int(seconds * 10))
    try:
        for step in range(steps):
            await ctx.report_progress(step + 1, steps, f"step {step + 1}")
            await anyio.sleep(0.1)
    except anyio.get_cancelled_exc_class():
        mark("canceled")
        raise
    return f"slept {seconds} s"


@server.tool()
def crash() -> str:
    """Ends the server's process at once."""
    os._exit(3)


@server.tool()
async def grow(name: str, ctx: Context) -> str:
    """Adds a tool called `name` and announces that the tool list changed."""
    server.add_tool(lambda: f"I am {name}", name=name, description=f"added at run time: {name}")
    await ctx.session.send_tool_list_changed()
    return f"added {name}"


@server.tool()
def fail(reason: str) -> str:
    """Fails with `reason`."""
    raise ToolError(reason)


def shout(text: str) -> str:
    """Answers `text` in capitals."""
    mark("shouted")
    return text.upper()


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--marks" in args:
        at = args.index("--marks")
        marks = args[at + 1]
        del args[at : at + 2]
    if "--one-tool" in args:
        args.remove("--one-tool")
        for name in ("slow", "crash", "grow", "fail"):
            server.remove_tool(name)
        server.add_tool(shout)
    if len(args) == 2 and args[0] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(args[1]))
    else:
        server.run()
