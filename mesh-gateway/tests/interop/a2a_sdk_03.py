"""The official A2A Python SDK of the 0.3 line (a2a-sdk 0.3.x) against the gateway.

Usage: python a2a_sdk_03.py BASE_URL

The mesh behind BASE_URL runs the example agents `echo` and `writer`. The SDK here is the
0.3 one (scripts/interop/requirements-0.3.txt, a venv of its own): it speaks protocol 0.3
only, sends no A2A-Version header and reads 0.3 cards. With its own card resolver and
ClientFactory (JSON-RPC, the 0.3 SDK's default transport), the script checks that

  - the resolver reads `BASE_URL/agents/echo/.well-known/agent-card.json` (the gateway's
    combined card, served to clients without A2A-Version) and the client built from it sends
    to `echo` and gets the completed task with its artifact;
  - `tasks/resubscribe` (the client's `resubscribe`) on an unknown task raises the SDK's
    JSON-RPC error carrying TaskNotFoundError's code -32001 (the gateway answers it as the
    SSE stream's one event), not an HTTP or transport error;
  - a streaming send to `writer` gets the task first, then the status update, the chunks in
    order (append / lastChunk) and the final, completed status.

Exits non-zero with a message on the first failure; every call is bounded.
"""

import asyncio
import sys
import uuid

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.client.errors import A2AClientError, A2AClientJSONRPCError
from a2a.client.helpers import create_text_message_object
from a2a.types import (
    Role,
    Task,
    TaskArtifactUpdateEvent,
    TaskIdParams,
    TaskNotFoundError,
    TaskState,
    TaskStatusUpdateEvent,
)

HTTP_TIMEOUT = 20
CALL_TIMEOUT = 30
CHUNKS = 5


def check(condition, what):
    if not condition:
        raise AssertionError(what)
    print(f"  ok: {what}", flush=True)


def user(text):
    message = create_text_message_object(role=Role.user, content=text)
    message.message_id = str(uuid.uuid4())
    return message


def texts(parts):
    return "".join(p.root.text for p in parts if getattr(p.root, "kind", None) == "text")


def kind(update):
    """An event of a ClientEvent as a short name: `task` (no update), `status <state>` or
    `artifact`."""
    if update is None:
        return "task"
    if isinstance(update, TaskStatusUpdateEvent):
        return f"status {update.status.state.value}"
    if isinstance(update, TaskArtifactUpdateEvent):
        return "artifact"
    return type(update).__name__


async def collect(stream):
    return [event async for event in stream]


async def main(base):
    made = []
    requests = []

    async def on_request(request):
        requests.append((request.method, request.url.path, request.headers.get("a2a-version")))

    responses = []

    async def on_response(response):
        responses.append((response.status_code, response.headers.get("content-type", "")))

    hooks = {"request": [on_request], "response": [on_response]}
    async with httpx.AsyncClient(timeout=HTTP_TIMEOUT, event_hooks=hooks) as http:
        blocking = ClientFactory(ClientConfig(streaming=False, httpx_client=http))
        streaming = ClientFactory(ClientConfig(streaming=True, httpx_client=http))
        try:
            print("card and send (echo):", flush=True)
            echo_card = await asyncio.wait_for(
                A2ACardResolver(http, f"{base}/agents/echo").get_agent_card(), CALL_TIMEOUT
            )
            check(echo_card.name == "echo", "the resolver reads echo's card")
            check(
                requests == [("GET", "/agents/echo/.well-known/agent-card.json", None)],
                "from /agents/echo/.well-known/agent-card.json, without A2A-Version",
            )
            print(
                f"    protocolVersion {echo_card.protocol_version}, url {echo_card.url},"
                f" preferredTransport {echo_card.preferred_transport}",
                flush=True,
            )
            check(
                echo_card.url.rstrip("/") == f"{base}/agents/echo",
                "the card's url is echo's JSON-RPC endpoint",
            )
            echo = blocking.create(echo_card)
            made.append(echo)
            sent = await asyncio.wait_for(
                collect(echo.send_message(user("hello 0.3"))), CALL_TIMEOUT
            )
            check(
                len(sent) == 1 and isinstance(sent[0], tuple) and isinstance(sent[0][0], Task),
                "a send to echo answers a task",
            )
            task = sent[0][0]
            check(task.status.state == TaskState.completed, "the task is completed")
            check(
                [texts(a.parts) for a in task.artifacts or []] == ["hello 0.3"],
                "its artifact echoes the text",
            )

            print("resubscribe to an unknown task:", flush=True)
            watcher = streaming.create(echo_card)
            made.append(watcher)
            missing = f"no-such-task-{uuid.uuid4()}"
            try:
                events = await asyncio.wait_for(
                    collect(watcher.resubscribe(TaskIdParams(id=missing))), CALL_TIMEOUT
                )
                check(False, f"resubscribe to an unknown task raises (got {events})")
            except A2AClientError as error:
                print(f"    {type(error).__name__}: {error}", flush=True)
                check(
                    isinstance(error, A2AClientJSONRPCError),
                    f"resubscribe raises the SDK's JSON-RPC error ({type(error).__name__}),"
                    " not a transport error",
                )
                check(
                    error.error.code == TaskNotFoundError().code,
                    f"its code is TaskNotFoundError's ({error.error.code})",
                )
                status, content_type = responses[-1]
                check(
                    status == 200 and content_type.startswith("text/event-stream"),
                    f"it came as an event of the stream ({status} {content_type})",
                )

            print("streaming send (writer):", flush=True)
            writer_card = await asyncio.wait_for(
                A2ACardResolver(http, f"{base}/agents/writer").get_agent_card(), CALL_TIMEOUT
            )
            check(writer_card.capabilities.streaming, "writer's card declares streaming")
            writer = streaming.create(writer_card)
            made.append(writer)
            events = await asyncio.wait_for(
                collect(writer.send_message(user(f"interop 0.3, chunks: {CHUNKS}"))),
                CALL_TIMEOUT,
            )
            updates = [update for _, update in events]
            order = [kind(u) for u in updates]
            print(f"    events: {order}", flush=True)
            working = order.index("artifact") - 1 if "artifact" in order else 0
            check(
                working >= 1
                and order
                == ["task"]
                + ["status working"] * working
                + ["artifact"] * CHUNKS
                + ["status completed"],
                "the task, working statuses, the chunks and the final status, in that order",
            )
            said = [
                texts(u.status.message.parts)
                for u in updates
                if isinstance(u, TaskStatusUpdateEvent) and u.status.message
            ]
            check(
                f"writing {CHUNKS} paragraphs" in " ".join(said),
                "the writer's working status message arrives",
            )
            chunks = [u for u in updates if isinstance(u, TaskArtifactUpdateEvent)]
            check(len(chunks) == CHUNKS, f"{CHUNKS} chunks arrive (got {len(chunks)})")
            check(
                all(texts(c.artifact.parts).startswith(f"[{i}]") for i, c in enumerate(chunks)),
                "the chunks arrive in order",
            )
            check(
                [bool(c.append) for c in chunks] == [False] + [True] * (CHUNKS - 1)
                and [bool(c.last_chunk) for c in chunks] == [False] * (CHUNKS - 1) + [True],
                "the first chunk starts the artifact, the others append, the last says so",
            )
            check(updates[-1].final, "the last status is final")
            final_task = events[-1][0]
            check(
                [texts(a.parts).count("\n") for a in final_task.artifacts or []] == [CHUNKS],
                "the SDK's task holds the whole artifact",
            )
        finally:
            for client in made:
                try:
                    await client.close()
                except Exception as error:  # noqa: BLE001 - closing is best effort
                    print(f"  close: {type(error).__name__}: {error}", file=sys.stderr)
    print("interop 0.3: all checks passed")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    asyncio.run(main(sys.argv[1].rstrip("/")))
