"""Holds N items at a gateway for scripts/heap-profile, then touches a file and waits.

    hold.py tasks PORT N _ FLAG      N non-blocking message/send to `waiter`, until the
                                     last is working
    hold.py streams PORT N h1 FLAG   a ticker task, then N - 1 more SSE subscribers to it
    hold.py streams PORT N h2 FLAG   the same over HTTP/2 connections, 200 streams each
"""
import asyncio
import http.client
import json
import sys
import time

WHAT, PORT, N, HTTP, FLAG = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
# A chunk at once, then none for a minute: the streams are idle while they are measured.
TICKER = "ticks: 3 every: 60000"


def message(i, text, method="message/stream", configuration=None):
    params = {"message": {"kind": "message", "messageId": f"m{i}-{time.time()}",
                          "role": "user", "parts": [{"kind": "text", "text": text}]}}
    if configuration:
        params["configuration"] = configuration
    return {"jsonrpc": "2.0", "id": i, "method": method, "params": params}


def resubscribe(i, task_id):
    return {"jsonrpc": "2.0", "id": i, "method": "tasks/resubscribe", "params": {"id": task_id}}


def task_of(events):
    """The task id of a stream's first event (the Task)."""
    return json.loads(events.split("data:")[1].split("\n")[0])["result"]["id"]


def held():
    open(FLAG, "w").write("held")


async def tasks():
    def call(conn, body):
        conn.request("POST", "/agents/waiter", body=json.dumps(body),
                     headers={"content-type": "application/json"})
        return json.loads(conn.getresponse().read())

    def start(conn, i):
        answer = call(conn, message(i, "wait", "message/send", {"blocking": False}))
        if "result" not in answer:
            raise SystemExit(f"message/send failed: {answer}")
        return answer["result"]["id"]

    def batch(indices):
        conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=60)
        return [start(conn, i) for i in indices]

    # The agent's card may be listed a moment before its presence says it is online.
    conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=60)
    for _ in range(100):
        answer = call(conn, message(-1, "wait", "message/send", {"blocking": False}))
        if "result" in answer:
            break
        time.sleep(0.1)
    if "result" not in answer:
        raise SystemExit(f"message/send failed: {answer}")
    first = answer["result"]["id"]
    loop = asyncio.get_running_loop()
    parts = [range(k, N - 1, 32) for k in range(32)]
    ids = sum(await asyncio.gather(*[loop.run_in_executor(None, batch, p) for p in parts]), [])
    conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=60)
    deadline = time.monotonic() + 120
    for task_id in [first] + ids:  # the agent takes them in order, but check every one
        while call(conn, {"jsonrpc": "2.0", "id": 0, "method": "tasks/get",
                          "params": {"id": task_id}})["result"]["status"]["state"] != "working":
            if time.monotonic() > deadline:
                raise SystemExit(f"task {task_id} is not working after 120 s")
            time.sleep(0.05)


async def streams_h1():
    held_open = []
    gate = asyncio.Semaphore(128)

    async def open_one(body, until):
        async with gate:
            reader, writer = await asyncio.open_connection("127.0.0.1", PORT)
            raw = json.dumps(body).encode()
            writer.write(b"POST /agents/ticker HTTP/1.1\r\nHost: gateway\r\n"
                         b"Content-Type: application/json\r\nAccept: text/event-stream\r\n"
                         + f"Content-Length: {len(raw)}\r\n\r\n".encode() + raw)
            seen = b""
            while until not in seen:
                data = await reader.read(65536)
                if not data:
                    raise SystemExit("a stream closed: " + seen.decode()[:300])
                seen += data
            held_open.append(writer)
            return seen

    first = await open_one(message(0, TICKER), b'"artifact-update"')
    task_id = task_of(first.decode())
    await asyncio.gather(*[open_one(resubscribe(i, task_id), b"data:") for i in range(1, N)])
    return held_open


async def streams_h2():
    import httpx
    clients = [httpx.AsyncClient(http1=False, http2=True, timeout=120)
               for _ in range((N + 199) // 200)]
    opened = asyncio.Queue()
    forever = asyncio.Event()

    async def open_one(client, body, until):
        async with client.stream("POST", f"http://127.0.0.1:{PORT}/agents/ticker", json=body,
                                 headers={"accept": "text/event-stream"}) as answer:
            seen = ""
            async for text in answer.aiter_text():
                seen += text
                if until in seen:
                    break
            await opened.put(seen)
            await forever.wait()

    holders = [asyncio.create_task(open_one(clients[0], message(0, TICKER), '"artifact-update"'))]
    first = await opened.get()
    task_id = task_of(first)
    holders += [asyncio.create_task(open_one(clients[i // 200], resubscribe(i, task_id), "data:"))
                for i in range(1, N)]
    for _ in range(1, N):
        await opened.get()
    return holders


async def main():
    # Holding them takes seconds: a client that waits longer than this has hung.
    if WHAT == "tasks":
        await asyncio.wait_for(tasks(), 300)
        kept = None
    elif HTTP == "h2":
        kept = await asyncio.wait_for(streams_h2(), 300)
    else:
        kept = await asyncio.wait_for(streams_h1(), 300)
    held()
    await asyncio.sleep(3600)
    return kept


asyncio.run(main())
