"""Drives a mesh gateway with the official A2A Python SDK (a2a-sdk), in protocol 1.0 and 0.3.

Usage: python a2a_sdk_client.py BASE_URL

The mesh behind BASE_URL runs the example agents `echo`, `writer` and `flight-booker`. For
each protocol version the script resolves each agent's card from
`BASE_URL/agents/<name>/.well-known/agent-card.json`, keeps the card's JSONRPC interface of
that version (the SDK picks its transport from `supportedInterfaces`), and checks: a
blocking send, a stream (events in order, the Task first, the final status last), get,
multi-turn (input-required, then a follow-up on the same task), and cancel. Exits non-zero
with a message on the first failure.
"""

import asyncio
import sys
import uuid

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.helpers.proto_helpers import get_artifact_text, new_text_message
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    Role,
    SendMessageRequest,
    TaskState,
)


def check(condition, what):
    if not condition:
        raise AssertionError(what)
    print(f"  ok: {what}")


async def card_for(http, base, agent, version):
    resolver = A2ACardResolver(http, f"{base}/agents/{agent}")
    card = await resolver.get_agent_card()
    keep = [i for i in card.supported_interfaces if i.protocol_version.startswith(version)]
    check(keep, f"{agent}'s card lists a JSONRPC interface for {version}")
    del card.supported_interfaces[:]
    card.supported_interfaces.extend(keep)
    return card


def user(text, task_id=None, context_id=None):
    message = new_text_message(text, role=Role.ROLE_USER)
    message.message_id = str(uuid.uuid4())
    if task_id:
        message.task_id = task_id
    if context_id:
        message.context_id = context_id
    return SendMessageRequest(message=message)


async def collect(client, request):
    return [event async for event in client.send_message(request)]


async def run(base, version):
    print(f"protocol {version}")
    async with httpx.AsyncClient(timeout=20) as http:
        blocking = ClientFactory(ClientConfig(streaming=False, httpx_client=http))
        streaming = ClientFactory(ClientConfig(streaming=True, httpx_client=http))

        # Blocking send and get.
        echo_card = await card_for(http, base, "echo", version)
        echo = blocking.create(echo_card)
        transport = type(getattr(echo, "_transport", None)).__name__
        legacy = transport.startswith("Compat")
        check(legacy == (version == "0.3"), f"the SDK speaks {version} (transport {transport})")
        events = await collect(echo, user("hello from python"))
        check(len(events) == 1 and events[0].HasField("task"), "a blocking send answers a task")
        task = events[0].task
        check(task.status.state == TaskState.TASK_STATE_COMPLETED, "the task is completed")
        check(
            get_artifact_text(task.artifacts[0]) == "hello from python",
            "the artifact echoes the message",
        )
        got = await echo.get_task(GetTaskRequest(id=task.id))
        check(got.id == task.id and got.status.state == TaskState.TASK_STATE_COMPLETED, "get")

        # Streaming, in order.
        writer_card = await card_for(http, base, "writer", version)
        writer = streaming.create(writer_card)
        events = await collect(writer, user("interop, chunks: 5"))
        check(events and events[0].HasField("task"), "the stream opens with the task")
        chunks = [
            get_artifact_text(e.artifact_update.artifact)
            for e in events
            if e.HasField("artifact_update")
        ]
        check(len(chunks) == 5, "five chunks arrive")
        check(
            all(chunk.startswith(f"[{i}]") for i, chunk in enumerate(chunks)),
            "the chunks arrive in order",
        )
        last = events[-1]
        check(
            last.HasField("status_update")
            and last.status_update.status.state == TaskState.TASK_STATE_COMPLETED,
            "the stream ends with the completed status",
        )

        # Multi-turn, then cancel.
        booker_card = await card_for(http, base, "flight-booker", version)
        booker = blocking.create(booker_card)
        events = await collect(booker, user("I need a flight"))
        task = events[0].task
        check(task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED, "the agent asks for input")
        events = await collect(
            booker, user("JFK to LHR on 2026-12-01", task.id, task.context_id)
        )
        done = events[0].task
        check(
            done.id == task.id and done.status.state == TaskState.TASK_STATE_COMPLETED,
            "the follow-up completes the same task",
        )
        events = await collect(booker, user("another flight"))
        waiting = events[0].task
        canceled = await booker.cancel_task(CancelTaskRequest(id=waiting.id))
        check(canceled.status.state == TaskState.TASK_STATE_CANCELED, "cancel")

        for client in (echo, writer, booker):
            await client.close()


async def main():
    base = sys.argv[1].rstrip("/")
    for version in ("1.0", "0.3"):
        await run(base, version)
    print("interop: all checks passed")


if __name__ == "__main__":
    asyncio.run(main())
