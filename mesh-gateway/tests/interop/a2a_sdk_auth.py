"""The official A2A Python SDK (a2a-sdk) against a gateway with API keys, over every binding.

Usage: python a2a_sdk_auth.py BASE_URL KEY PRINCIPAL

The mesh behind BASE_URL runs `echo`, and the gateway accepts KEY for PRINCIPAL. Checks
that the SDK reads the card with its security schemes and requirements, then, for each
protocol binding the card lists (JSONRPC, HTTP+JSON and GRPC, protocol 1.0), with the SDK's
ClientFactory allowed that binding alone:

  - without a key a send is refused, and the SDK's error says so (401 over HTTP,
    UNAUTHENTICATED over gRPC);
  - with the key as a bearer token, and with it as an X-API-Key, a send is answered and the
    extended card names PRINCIPAL;

and, over JSON-RPC in protocol 0.3 (the SDK's compat transport), that a send with the bearer
key is answered and the extended card names PRINCIPAL.

The key reaches the gateway the way the SDK offers it to users: its AuthInterceptor, given a
CredentialService (the SDK's InMemoryContextCredentialStore, keyed by a session id in the
call's ClientCallContext), reads the card's securityRequirements and securitySchemes and puts
the credential in the call's service parameters, which the HTTP transports send as headers
and the gRPC transport as call metadata. Which header or metadata key each call carried is
recorded (an httpx request hook; a gRPC client interceptor on the channel) and checked.

Exits non-zero with a message on the first failure; every call is bounded.
"""

import asyncio
import re
import sys
import uuid

import grpc
import httpx
from a2a.client import A2ACardResolver, ClientCallContext, ClientConfig, ClientFactory
from a2a.client.auth import AuthInterceptor, InMemoryContextCredentialStore
from a2a.helpers.proto_helpers import get_artifact_text, new_text_message
from a2a.types import GetExtendedAgentCardRequest, Role, SendMessageRequest

BINDINGS = ("JSONRPC", "HTTP+JSON", "GRPC")
HTTP_TIMEOUT = 20
CALL_TIMEOUT = 30
# The card's scheme names (mesh-gateway/src/auth.rs) and the header each one puts the key in.
SCHEMES = {"bearer": "authorization", "apiKey": "x-api-key"}


def check(condition, what):
    if not condition:
        raise AssertionError(what)
    print(f"  ok: {what}", flush=True)


def user(text):
    message = new_text_message(text, role=Role.ROLE_USER)
    message.message_id = str(uuid.uuid4())
    return SendMessageRequest(message=message)


def for_version(card, version):
    """A copy of `card` listing only the interfaces of protocol `version`."""
    keep = [i for i in card.supported_interfaces if i.protocol_version.startswith(version)]
    copy = type(card)()
    copy.CopyFrom(card)
    del copy.supported_interfaces[:]
    copy.supported_interfaces.extend(keep)
    return copy


class Seen:
    """The credential-carrying header names (lower case) of the last call, per transport."""

    def __init__(self):
        self.names = set()

    def record(self, keys):
        self.names |= {k.lower() for k in keys if k.lower() in SCHEMES.values()}

    def take(self):
        names, self.names = self.names, set()
        return names


class MetadataRecorder(
    grpc.aio.UnaryUnaryClientInterceptor, grpc.aio.UnaryStreamClientInterceptor
):
    """Records the metadata keys of every gRPC call on the channel it is given to."""

    def __init__(self, seen):
        self.seen = seen

    def _record(self, details):
        self.seen.record(key for key, _ in (details.metadata or ()))

    async def intercept_unary_unary(self, continuation, details, request):
        self._record(details)
        return await continuation(details, request)

    async def intercept_unary_stream(self, continuation, details, request):
        self._record(details)
        return await continuation(details, request)


def channel_factory(seen):
    """The SDK's grpc_channel_factory: an h2c channel to the `host:port` of a GRPC URL."""

    def make(url):
        target = re.sub(r"^[a-z][a-z0-9+.-]*://", "", url).split("/", 1)[0]
        interceptors = [MetadataRecorder(seen)]
        if url.startswith(("grpcs://", "https://")):
            credentials = grpc.ssl_channel_credentials()
            return grpc.aio.secure_channel(target, credentials, interceptors=interceptors)
        return grpc.aio.insecure_channel(target, interceptors=interceptors)

    return make


def refusal(error, binding):
    """Whether `error` (raised by the SDK) says the gateway refused for want of a key: the
    SDK's message names the status, and the transport error it wraps carries it."""
    cause = error.__cause__
    if binding == "GRPC":
        return (
            str(error).startswith("gRPC Error UNAUTHENTICATED")
            and isinstance(cause, grpc.aio.AioRpcError)
            and cause.code() == grpc.StatusCode.UNAUTHENTICATED
        )
    return (
        str(error).startswith("HTTP Error 401")
        and isinstance(cause, httpx.HTTPStatusError)
        and cause.response.status_code == 401
    )


async def bounded(call):
    return await asyncio.wait_for(call, CALL_TIMEOUT)


async def answered(client, text, context):
    """The text of the first artifact of a blocking send's task."""
    events = [e async for e in client.send_message(user(text), context=context)]
    if len(events) != 1 or not events[0].HasField("task"):
        raise AssertionError(f"a blocking send answers one task, not {events}")
    return get_artifact_text(events[0].task.artifacts[0])


async def principals(client, context):
    """The principals the extended card names."""
    extended = await client.get_extended_agent_card(
        GetExtendedAgentCardRequest(), context=context
    )
    return [
        e.params["principal"]
        for e in extended.capabilities.extensions
        if "principal" in e.params
    ]


def transport_name(client):
    transport = client._transport
    return type(getattr(transport, "_base", transport)).__name__


async def main(base, key, principal):
    seen = Seen()

    async def on_request(request):
        seen.record(request.headers.keys())

    store = InMemoryContextCredentialStore()
    sessions = {}
    for scheme in SCHEMES:
        sessions[scheme] = ClientCallContext(state={"sessionId": f"session-{scheme}"})
        await store.set_credentials(f"session-{scheme}", scheme, key)
    auth = [AuthInterceptor(store)]
    made = []

    async with httpx.AsyncClient(
        timeout=HTTP_TIMEOUT, event_hooks={"request": [on_request]}
    ) as http:
        try:
            for binding in BINDINGS:
                print(f"{binding}:", flush=True)
                # The factory sets A2A-Version on `http` first: the resolver reads the 1.0 card.
                factory = ClientFactory(
                    ClientConfig(
                        streaming=False,
                        httpx_client=http,
                        supported_protocol_bindings=[binding],
                        grpc_channel_factory=channel_factory(seen),
                    )
                )
                card = await A2ACardResolver(http, f"{base}/agents/echo").get_agent_card()
                seen.take()
                if binding == BINDINGS[0]:
                    check(
                        set(card.security_schemes) == set(SCHEMES),
                        "the card declares both schemes",
                    )
                    required = [list(r.schemes) for r in card.security_requirements]
                    check(
                        sorted(required) == sorted([s] for s in SCHEMES),
                        "the card requires either scheme",
                    )
                    check(
                        card.capabilities.extended_agent_card,
                        "the card declares the extended card",
                    )

                anonymous = factory.create(card)
                made.append(anonymous)
                name = transport_name(anonymous)
                check(not name.startswith("Compat"), f"{binding}: the SDK chose {name} (1.0)")
                try:
                    await bounded(answered(anonymous, "no key", None))
                    check(False, f"{binding}: a send without a key is refused")
                except AssertionError:
                    raise
                except Exception as error:  # A2AClientError, wrapping the transport's error
                    print(f"    {type(error).__name__}: {error}", flush=True)
                    check(
                        refusal(error, binding),
                        f"{binding}: a send without a key is refused, and the SDK's error"
                        f" says so ({type(error).__name__})",
                    )
                check(seen.take() == set(), f"{binding}: that call carried no credential")

                client = factory.create(card, interceptors=auth)
                made.append(client)
                for scheme, header in SCHEMES.items():
                    context = sessions[scheme]
                    text = f"hello {binding} with {scheme}"
                    check(
                        await bounded(answered(client, text, context)) == text,
                        f"{binding}: a send with the key as {scheme} is answered",
                    )
                    check(seen.take() == {header}, f"{binding}: the key went as {header}")
                    check(
                        await bounded(principals(client, context)) == [principal],
                        f"{binding}: with {scheme} the extended card names {principal}",
                    )
                    check(seen.take() == {header}, f"{binding}: the key went as {header}")

            print("JSONRPC 0.3:", flush=True)
            client = ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create(
                for_version(card, "0.3"), interceptors=auth
            )
            made.append(client)
            name = transport_name(client)
            check(name.startswith("Compat"), f"0.3: the SDK chose {name}")
            context = sessions["bearer"]
            check(
                await bounded(answered(client, "hello 0.3", context)) == "hello 0.3",
                "0.3: a send with the bearer key is answered",
            )
            check(
                await bounded(principals(client, context)) == [principal],
                f"0.3: the extended card names {principal}",
            )
        finally:
            for client in made:
                try:
                    await client.close()
                except Exception as error:  # noqa: BLE001 - closing is best effort
                    print(f"  close: {type(error).__name__}: {error}", file=sys.stderr)
    print("interop auth: all checks passed")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    asyncio.run(main(sys.argv[1].rstrip("/"), sys.argv[2], sys.argv[3]))
