"""The gateway's /mcp driven by the official MCP Python SDK (a client nobody here wrote).

    python gateway_client.py URL

Checks, in order, printing one line per check passed and `ALL PASSED` at the end (any failure
raises and exits non-zero):
- the agents online are tools (echo, writer, flight-booker), with the shared input schema;
- calling echo answers its text; a call of no agent, or without `text`, is refused saying why;
- calling writer (it streams) reports progress and answers its chunks;
- flight-booker's question comes back with its taskId, and a call with that taskId continues
  the task to its itinerary (structured content);
- with an elicitation callback, the same question comes as an MCP elicitation, and the answer
  given there completes the task; a declined one cancels it;
- a call canceled by the client (after its first progress) ends; the line `CANCELED <n>` tells
  the driving test how many progress notifications came first;
- a `subscriptions/listen` stream hears `notifications/tools/list_changed`: after printing
  `LISTENING` the script waits for the driving test to start an agent `late`, then checks that
  the list has it.
"""

import sys

import anyio
import mcp_types as types
from mcp import Client


def check(condition, what):
    if not condition:
        raise SystemExit(f"FAILED: {what}")
    print(f"ok: {what}", flush=True)


def texts(result):
    return [c.text for c in result.content if getattr(c, "type", "") == "text"]


async def main(url):
    async with Client(url) as client:
        tools = (await client.list_tools()).tools
        names = {t.name for t in tools}
        check({"echo", "writer", "flight-booker"} <= names, f"the agents are tools: {sorted(names)}")
        echo = next(t for t in tools if t.name == "echo")
        check("text" in echo.input_schema["properties"], "a tool takes text")

        result = await client.call_tool("echo", {"text": "hello over mcp"})
        check(not result.is_error and "hello over mcp" in texts(result), f"echo answers: {texts(result)}")

        for name, arguments, said in [("no-such-agent", {"text": "x"}, "no agent"), ("echo", {}, "`text` is required")]:
            try:
                refused = await client.call_tool(name, arguments)
                why = " ".join(texts(refused)) if refused.is_error else ""
            except Exception as error:  # the SDK raises a protocol error
                why = str(error)
            check(said in why, f"{name} {arguments} refused: {why!r}")

        progress = []

        async def on_progress(value, total, message):
            progress.append(message)

        result = await client.call_tool(
            "writer", {"text": "brokers chunks: 3"}, progress_callback=on_progress
        )
        joined = "".join(texts(result))
        check("[0] On brokers" in joined and "[2] On brokers" in joined, f"writer's chunks: {joined!r}")
        check(len(progress) >= 3, f"writer's progress: {progress}")

        result = await client.call_tool("flight-booker", {"text": "book a flight"})
        question = result.structured_content or {}
        check(question.get("state") == "input-required" and question.get("taskId"), f"a question: {question}")
        result = await client.call_tool(
            "flight-booker",
            {"text": "from SFO to JFK on 2026-12-24", "taskId": question["taskId"]},
        )
        itinerary = result.structured_content or {}
        check(not result.is_error and "SFO" in str(itinerary), f"the task went on: {itinerary}")

        asked = []

        async def answer(context, params):
            asked.append(params.message)
            return types.ElicitResult(action="accept", content={"answer": "from SFO to JFK on 2026-12-24"})

        async with Client(url, elicitation_callback=answer) as eliciting:
            result = await eliciting.call_tool("flight-booker", {"text": "book a flight"})
            itinerary = result.structured_content or {}
            check(asked and "airport" in asked[0], f"the question as an elicitation: {asked}")
            check(not result.is_error and "JFK" in str(itinerary), f"the answer went on: {itinerary}")

        async def decline(context, params):
            return types.ElicitResult(action="decline")

        async with Client(url, elicitation_callback=decline) as declining:
            result = await declining.call_tool("flight-booker", {"text": "book a flight"})
            check(result.is_error and "canceled" in "".join(texts(result)), f"declined: {texts(result)}")

        seen = []

        async def first_progress(value, total, message):
            seen.append(message)
            if len(seen) == 1:
                scope.cancel()

        with anyio.CancelScope() as scope:
            await client.call_tool(
                "writer", {"text": "slowly chunks: 50 pace: 200"}, progress_callback=first_progress
            )
        check(scope.cancelled_caught, "the call was canceled")
        print(f"CANCELED {len(seen)}", flush=True)

        async with client.listen(tools_list_changed=True) as subscription:
            print("LISTENING", flush=True)
            with anyio.fail_after(30):
                async for _event in subscription:
                    names = {t.name for t in (await client.list_tools(cache_mode="refresh")).tools}
                    if "late" in names:
                        break
        check("late" in names, "the tool list changed and has the late agent")
    print("ALL PASSED", flush=True)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1])
