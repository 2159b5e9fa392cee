"""One scenario suite, run through one A2A protocol binding with the official SDK (a2a-sdk).

Usage: python a2a_sdk_bindings.py BASE_URL BINDING [WEBHOOK_URL]

BINDING is JSONRPC, HTTP+JSON or GRPC. The mesh behind BASE_URL runs the example agents
`echo`, `writer` and `flight-booker` and an agent `slow` that works until it is canceled.
For each agent the script resolves the card at
`BASE_URL/agents/<name>/.well-known/agent-card.json` and lets the SDK's ClientFactory pick
the transport from the card's `supportedInterfaces`, allowing BINDING alone: the way a user
of the SDK reaches the agent over that binding.

It prints ONE JSON document on stdout (progress goes to stderr): for each scenario the answers
as the SDK decoded them, normalised so that the same behaviour gives the same JSON whatever
the binding (task states, artifact names and texts in order, message texts, history lengths,
page sizes, error types; never ids, timestamps or bytes). A2A 1.0 §5.1 asks the bindings to
be functionally equivalent: documents of two bindings against the same gateway must be equal.

Scenarios:
  send        blocking send to echo
  stream      streaming send to writer, five chunks (append / lastChunk)
  multi_turn  flight-booker: input-required, then a follow-up on the same task completes it
  cancel      a task of `slow` sent with returnImmediately, canceled, canceled again
  get         get of the finished multi-turn task with historyLength 1 and without
  list        three tasks in one context, one in another; listed by context, two per page
  subscribe   to an input-required task while a follow-up completes it; to a completed task
  push        push-notification config create, get, list, delete, delete again, get
  errors      what a client can provoke: unknown tasks, an extended card the agent lacks,
              a page size out of range

With A2A_BINDINGS_TRACE=1 in the environment, every HTTP exchange (bodies of answers that
are not event streams) and every streamed event goes to stderr as well.

A scenario that raises where no error was expected records the error in place of its answers
(`{"unexpected": {...}}`); the script exits 0 whenever it printed the document, and 2 on bad
usage. Every call is bounded (a scenario gets 30 s).
"""

import asyncio
import json
import os
import re
import sys
import traceback
import uuid

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.helpers.proto_helpers import new_text_message
from a2a.types import (
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import A2A_ERROR_REASONS
from google.protobuf import json_format

BINDINGS = ("JSONRPC", "HTTP+JSON", "GRPC")
SCENARIO_TIMEOUT = 30
HTTP_TIMEOUT = 20
TRACE = os.environ.get("A2A_BINDINGS_TRACE") == "1"
TRACE_LIMIT = 4000


def log(text):
    print(text, file=sys.stderr, flush=True)


async def trace_request(request):
    body = request.content[:TRACE_LIMIT].decode(errors="replace")
    log(f"    > {request.method} {request.url} {body}")


async def trace_response(response):
    if "text/event-stream" in response.headers.get("content-type", ""):
        log(f"    < {response.status_code} (event stream)")
        return
    body = await response.aread()
    log(f"    < {response.status_code} {body[:TRACE_LIMIT].decode(errors='replace')}")


async def traced(stream):
    """The events of `stream`, each logged first when tracing."""
    try:
        async for e in stream:
            if TRACE:
                log(f"    event {json_format.MessageToJson(e, indent=None)[:TRACE_LIMIT]}")
            yield e
    finally:
        # A stream let go early closes its connection now, not when it is collected.
        await stream.aclose()


# ---- normalisation: what a binding may not change --------------------------------------


def state(value):
    """`TASK_STATE_INPUT_REQUIRED` → `input-required`."""
    name = TaskState.Name(value)
    return name.removeprefix("TASK_STATE_").lower().replace("_", "-")


def scrub(text):
    """A text without the ids an agent may write into it."""
    return re.sub(r"confirmation [A-Z0-9]{6}", "confirmation <id>", text)


def part(p):
    kind = p.WhichOneof("content")
    if kind == "text":
        return {"text": scrub(p.text)}
    if kind == "data":
        data = json_format.MessageToDict(p.data) if p.HasField("data") else None
        if isinstance(data, dict) and "confirmationId" in data:
            data["confirmationId"] = "<id>"
        return {"data": data, "mediaType": p.media_type}
    if kind == "url":
        return {"url": p.url, "mediaType": p.media_type}
    if kind == "raw":
        return {"rawBytes": len(p.raw), "mediaType": p.media_type}
    return {"empty": True}


def message(m):
    if m is None:
        return None
    return {"role": Role.Name(m.role), "parts": [part(p) for p in m.parts]}


def artifact(a):
    return {"name": a.name, "parts": [part(p) for p in a.parts]}


def task(t):
    return {
        "state": state(t.status.state),
        "statusMessage": message(t.status.message) if t.status.HasField("message") else None,
        "artifacts": [artifact(a) for a in t.artifacts],
        "history": [message(m) for m in t.history],
    }


def event(e):
    """One StreamResponse: its kind and what the kind carries."""
    kind = e.WhichOneof("payload")
    if kind == "task":
        return {"task": state(e.task.status.state)}
    if kind == "status_update":
        status = e.status_update.status
        return {
            "statusUpdate": state(status.state),
            "message": message(status.message) if status.HasField("message") else None,
        }
    if kind == "artifact_update":
        u = e.artifact_update
        return {
            "artifactUpdate": u.artifact.name,
            "parts": [part(p) for p in u.artifact.parts],
            "append": u.append,
            "lastChunk": u.last_chunk,
        }
    if kind == "message":
        return {"message": message(e.message)}
    return {"empty": True}


def error(e):
    """An exception as a binding-neutral type: the SDK's class and the A2A error it maps to."""
    return {"error": type(e).__name__, "a2a": A2A_ERROR_REASONS.get(type(e))}


async def outcome(call):
    """The answer of `call` as `{"ok": value}`, or the error it raised."""
    try:
        return {"ok": await call}
    except Exception as e:  # noqa: BLE001 - every error is an answer to record
        log(f"    {type(e).__name__}: {e}")
        return error(e)


def user(text, task_id=None, context_id=None, return_immediately=False):
    m = new_text_message(text, role=Role.ROLE_USER)
    m.message_id = str(uuid.uuid4())
    if task_id:
        m.task_id = task_id
    if context_id:
        m.context_id = context_id
    request = SendMessageRequest(message=m)
    if return_immediately:
        request.configuration.return_immediately = True
    return request


async def send(client, request):
    """A blocking send: the Task it answers (a Message is an error here)."""
    events = [e async for e in client.send_message(request)]
    if len(events) != 1 or not events[0].HasField("task"):
        raise AssertionError(f"a blocking send answers one task, not {events}")
    return events[0].task


# ---- clients ------------------------------------------------------------------------------


def grpc_channel(url):
    """A channel to the `host:port` of a GRPC interface's URL (a scheme and a path dropped)."""
    import grpc  # the SDK's grpc extra, needed for GRPC alone

    target = re.sub(r"^[a-z][a-z0-9+.-]*://", "", url).split("/", 1)[0]
    if url.startswith(("grpcs://", "https://")):
        return grpc.aio.secure_channel(target, grpc.ssl_channel_credentials())
    return grpc.aio.insecure_channel(target)


class Clients:
    """One SDK client per agent and mode, each restricted to the one binding."""

    def __init__(self, http, base, binding):
        self.http = http
        self.base = base
        self.binding = binding
        self.cards = {}
        self.made = []
        common = dict(
            httpx_client=http,
            supported_protocol_bindings=[binding],
            grpc_channel_factory=grpc_channel,
        )
        # The factories set the A2A-Version header on `http` before any card is read.
        self.blocking = ClientFactory(ClientConfig(streaming=False, **common))
        self.streaming = ClientFactory(ClientConfig(streaming=True, **common))

    async def card(self, agent):
        if agent not in self.cards:
            resolver = A2ACardResolver(self.http, f"{self.base}/agents/{agent}")
            self.cards[agent] = await resolver.get_agent_card()
        return self.cards[agent]

    async def client(self, agent, streaming=False, card=None):
        card = card or await self.card(agent)
        factory = self.streaming if streaming else self.blocking
        client = factory.create(card)
        transport = client._transport
        inner = getattr(transport, "_base", transport)
        name = type(inner).__name__
        log(f"  {agent}: {name}" + (" (tenant)" if inner is not transport else ""))
        if name.startswith("Compat"):
            raise AssertionError(f"{agent}: the SDK chose a 0.3 transport ({name})")
        self.made.append(client)
        return client

    async def close(self):
        for client in self.made:
            try:
                await client.close()
            except Exception as e:  # noqa: BLE001 - closing is best effort
                log(f"  close: {type(e).__name__}: {e}")


# ---- scenarios ----------------------------------------------------------------------------


async def scenario_send(c, shared):
    echo = await c.client("echo")
    t = await send(echo, user("hello over every binding"))
    got = await echo.get_task(GetTaskRequest(id=t.id))
    return {"sent": task(t), "got": task(got), "sameTask": got.id == t.id}


async def scenario_stream(c, shared):
    writer = await c.client("writer", streaming=True)
    events = [e async for e in traced(writer.send_message(user("bindings chunks: 5")))]
    texts = {}
    order = []
    for e in events:
        if e.HasField("artifact_update"):
            u = e.artifact_update
            key = u.artifact.artifact_id
            if key not in texts:
                order.append(key)
                texts[key] = ""
            chunk = "".join(p.text for p in u.artifact.parts if p.WhichOneof("content") == "text")
            texts[key] = texts[key] + chunk if u.append else chunk
    last = events[-1] if events else None
    final = None
    if last is not None and last.HasField("status_update"):
        final = state(last.status_update.status.state)
    elif last is not None and last.HasField("task"):
        final = state(last.task.status.state)
    return {
        "events": [event(e) for e in events],
        "artifacts": [texts[k] for k in order],
        "finalState": final,
    }


async def scenario_multi_turn(c, shared):
    booker = await c.client("flight-booker")
    first = await send(booker, user("I need a flight"))
    follow = await send(booker, user("from SFO to JFK on 2026-12-01", first.id, first.context_id))
    shared["multi_turn"] = follow.id
    return {
        "first": task(first),
        "followUp": task(follow),
        "sameTask": follow.id == first.id,
        "sameContext": follow.context_id == first.context_id,
    }


async def scenario_cancel(c, shared):
    slow = await c.client("slow")
    t = await send(slow, user("take your time", return_immediately=True))
    first = state(t.status.state)
    # Canceled once it works (it said "thinking"), so that what it said is in its history
    # whatever the timing: a subscription tells when.
    watcher = await c.client("slow", streaming=True)
    working = await outcome(asyncio.wait_for(until_state(watcher, t.id, "working"), HTTP_TIMEOUT))
    canceled = await outcome(slow.cancel_task(CancelTaskRequest(id=t.id)))
    if "ok" in canceled:
        canceled = {"ok": task(canceled["ok"])}
    again = await outcome(slow.cancel_task(CancelTaskRequest(id=t.id)))
    if "ok" in again:
        again = {"ok": task(again["ok"])}
    got = await slow.get_task(GetTaskRequest(id=t.id))
    return {
        # Sent with returnImmediately: not finished yet, whichever of the two it is.
        "sentActive": first in ("submitted", "working"),
        "subscribedUntilWorking": working,
        "cancel": canceled,
        "cancelAgain": again,
        "getAfter": state(got.status.state),
    }


async def until_state(client, task_id, wanted):
    """Follows the task until it is in state `wanted`; then lets the subscription go."""
    stream = traced(client.subscribe(SubscribeToTaskRequest(id=task_id)))
    try:
        async for e in stream:
            kind = e.WhichOneof("payload")
            now = None
            if kind == "task":
                now = e.task.status.state
            elif kind == "status_update":
                now = e.status_update.status.state
            if now is not None and state(now) == wanted:
                return wanted
    finally:
        await stream.aclose()
    raise AssertionError(f"the subscription ended before the task was {wanted}")


async def scenario_get(c, shared):
    booker = await c.client("flight-booker")
    task_id = shared.get("multi_turn")
    if not task_id:
        raise AssertionError("the multi-turn scenario left no task")
    trimmed = await booker.get_task(GetTaskRequest(id=task_id, history_length=1))
    full = await booker.get_task(GetTaskRequest(id=task_id))
    return {"historyLength1": task(trimmed), "unlimited": task(full)}


async def scenario_list(c, shared):
    echo = await c.client("echo")
    first = await send(echo, user("list me: one"))
    context = first.context_id
    sent = [first]
    for text in ("list me: two", "list me: three"):
        sent.append(await send(echo, user(text, context_id=context)))
    other = await send(echo, user("list me: elsewhere"))
    ids = [t.id for t in sent]
    page1 = await echo.list_tasks(ListTasksRequest(context_id=context, page_size=2))
    page2 = None
    if page1.next_page_token:
        page2 = await echo.list_tasks(
            ListTasksRequest(context_id=context, page_size=2, page_token=page1.next_page_token)
        )

    def page(p):
        if p is None:
            return None
        return {
            "tasks": len(p.tasks),
            "states": [state(t.status.state) for t in p.tasks],
            # Positions in the order sent (most recently updated first is expected).
            "sentOrder": [ids.index(t.id) if t.id in ids else -1 for t in p.tasks],
            "withArtifacts": sum(1 for t in p.tasks if len(t.artifacts) > 0),
            "hasNextToken": bool(p.next_page_token),
            "pageSize": p.page_size,
            "totalSize": p.total_size,
        }

    listed = [t.id for p in (page1, page2) if p is not None for t in p.tasks]
    return {
        "sameContext": all(t.context_id == context for t in sent),
        "otherContext": other.context_id != context,
        "page1": page(page1),
        "page2": page(page2),
        "eachSentTaskOnce": sorted(listed) == sorted(ids),
    }


async def scenario_subscribe(c, shared):
    booker = await c.client("flight-booker")
    watcher = await c.client("flight-booker", streaming=True)
    waiting = await send(booker, user("I need a flight"))
    events = []
    opened = asyncio.Event()

    async def follow():
        try:
            async for e in traced(watcher.subscribe(SubscribeToTaskRequest(id=waiting.id))):
                events.append(e)
                opened.set()
        finally:
            opened.set()

    reader = asyncio.create_task(follow())
    # The subscription is in place once its first event (the task) has arrived.
    await asyncio.wait_for(opened.wait(), HTTP_TIMEOUT)
    # The follow-up streams too, so that the agent reports every step of it.
    sent = [
        e
        async for e in traced(
            watcher.send_message(
                user("from SFO to JFK on 2026-12-01", waiting.id, waiting.context_id)
            )
        )
    ]
    ended = await outcome(asyncio.wait_for(reader, HTTP_TIMEOUT))
    if "ok" in ended:
        ended = {"ok": "the stream ended"}
    completed = await outcome(
        collect_stream(watcher.subscribe(SubscribeToTaskRequest(id=waiting.id)))
    )
    if "ok" in completed:
        completed = {"ok": [event(e) for e in completed["ok"]]}
    return {
        "waiting": state(waiting.status.state),
        "followUpEvents": [event(e) for e in sent],
        "events": [event(e) for e in events],
        "end": ended,
        "subscribeCompleted": completed,
    }


async def collect_stream(stream):
    return [e async for e in traced(stream)]


async def scenario_push(c, shared):
    webhook = shared.get("webhook")
    if not webhook:
        return {"skipped": "no WEBHOOK_URL"}
    booker = await c.client("flight-booker")
    waiting = await send(booker, user("I need a flight"))
    created = await outcome(
        booker.create_task_push_notification_config(
            TaskPushNotificationConfig(task_id=waiting.id, url=webhook, token="tok-bindings")
        )
    )
    config_id = ""
    if "ok" in created:
        cfg = created["ok"]
        config_id = cfg.id
        created = {"ok": push_config(cfg, waiting.id, webhook)}
    got = await outcome(
        booker.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=waiting.id, id=config_id)
        )
    )
    if "ok" in got:
        got = {"ok": push_config(got["ok"], waiting.id, webhook)}
    listed = await outcome(
        booker.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=waiting.id)
        )
    )
    if "ok" in listed:
        listed = {"ok": [push_config(x, waiting.id, webhook) for x in listed["ok"].configs]}
    deleted = await outcome(
        booker.delete_task_push_notification_config(
            DeleteTaskPushNotificationConfigRequest(task_id=waiting.id, id=config_id)
        )
    )
    again = await outcome(
        booker.delete_task_push_notification_config(
            DeleteTaskPushNotificationConfigRequest(task_id=waiting.id, id=config_id)
        )
    )
    gone = await outcome(
        booker.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=waiting.id, id=config_id)
        )
    )
    if "ok" in gone:
        gone = {"ok": push_config(gone["ok"], waiting.id, webhook)}
    after = await outcome(
        booker.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=waiting.id)
        )
    )
    if "ok" in after:
        after = {"ok": len(after["ok"].configs)}
    # The task is left waiting for input; cancel it so that nothing outlives the run.
    await outcome(booker.cancel_task(CancelTaskRequest(id=waiting.id)))
    return {
        "create": created,
        "get": got,
        "list": listed,
        "delete": {"ok": None} if deleted == {"ok": None} else deleted,
        "deleteAgain": {"ok": None} if again == {"ok": None} else again,
        "getDeleted": gone,
        "listAfter": after,
    }


def push_config(cfg, task_id, webhook):
    return {
        "hasId": bool(cfg.id),
        "taskId": cfg.task_id == task_id,
        "url": cfg.url == webhook,
        "token": cfg.token,
    }


async def scenario_errors(c, shared):
    echo = await c.client("echo")
    missing = f"no-such-task-{uuid.uuid4()}"
    results = {
        "getUnknown": await outcome(echo.get_task(GetTaskRequest(id=missing))),
        "cancelUnknown": await outcome(echo.cancel_task(CancelTaskRequest(id=missing))),
        "sendUnknownTask": await outcome(send(echo, user("hello?", task_id=missing))),
        "listPageSize1000": await outcome(echo.list_tasks(ListTasksRequest(page_size=1000))),
    }
    for key, value in results.items():
        if "ok" in value:
            results[key] = {"ok": "answered without an error"}
    streaming = await c.client("echo", streaming=True)
    unknown = await outcome(
        collect_stream(streaming.subscribe(SubscribeToTaskRequest(id=missing)))
    )
    results["subscribeUnknown"] = {"ok": "events"} if "ok" in unknown else unknown

    # The extended card. The SDK answers with the public card itself, asking nobody, when the
    # card does not claim one; told that it does, it asks the gateway.
    card = await c.card("echo")
    results["cardClaimsExtended"] = card.capabilities.extended_agent_card
    local = await outcome(echo.get_extended_agent_card(GetExtendedAgentCardRequest()))
    results["extendedCardUnclaimed"] = (
        {"ok": local["ok"].name} if "ok" in local else local
    )
    claimed = type(card)()
    claimed.CopyFrom(card)
    claimed.capabilities.extended_agent_card = True
    asking = await c.client("echo", card=claimed)
    asked = await outcome(asking.get_extended_agent_card(GetExtendedAgentCardRequest()))
    results["extendedCardAsked"] = {"ok": asked["ok"].name} if "ok" in asked else asked
    return results


SCENARIOS = [
    ("send", scenario_send),
    ("stream", scenario_stream),
    ("multi_turn", scenario_multi_turn),
    ("cancel", scenario_cancel),
    ("get", scenario_get),
    ("list", scenario_list),
    ("subscribe", scenario_subscribe),
    ("push", scenario_push),
    ("errors", scenario_errors),
]


async def run(base, binding, webhook):
    shared = {"webhook": webhook}
    document = {}
    hooks = {"request": [trace_request], "response": [trace_response]} if TRACE else {}
    async with httpx.AsyncClient(timeout=HTTP_TIMEOUT, event_hooks=hooks) as http:
        clients = Clients(http, base, binding)
        try:
            for name, scenario in SCENARIOS:
                log(f"{binding}: {name}")
                try:
                    document[name] = await asyncio.wait_for(
                        scenario(clients, shared), SCENARIO_TIMEOUT
                    )
                except Exception as e:  # noqa: BLE001 - recorded, the next scenario runs
                    log(traceback.format_exc())
                    # The message too: this entry fails the comparison anyway.
                    document[name] = {"unexpected": {**error(e), "message": str(e)[:300]}}
        finally:
            await clients.close()
    return document


def main():
    if len(sys.argv) not in (3, 4) or sys.argv[2] not in BINDINGS:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    base = sys.argv[1].rstrip("/")
    binding = sys.argv[2]
    webhook = sys.argv[3] if len(sys.argv) == 4 else None
    document = asyncio.run(run(base, binding, webhook))
    print(json.dumps(document, indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
