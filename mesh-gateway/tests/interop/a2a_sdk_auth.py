"""The official A2A Python SDK (a2a-sdk) against a gateway with API keys.

Usage: python a2a_sdk_auth.py BASE_URL KEY PRINCIPAL

The mesh behind BASE_URL runs `echo`, and the gateway accepts KEY for PRINCIPAL. Checks
that the SDK reads the card with its securitySchemes, refuses to work without the key
(401), and with the key as a bearer token sends in 1.0 and 0.3 and reads the extended card
with the caller's principal. Exits non-zero with a message on the first failure.
"""

import asyncio
import sys
import uuid

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.helpers.proto_helpers import get_artifact_text, new_text_message
from a2a.types import GetExtendedAgentCardRequest, Role, SendMessageRequest


def check(condition, what):
    if not condition:
        raise AssertionError(what)
    print(f"  ok: {what}")


def user(text):
    message = new_text_message(text, role=Role.ROLE_USER)
    message.message_id = str(uuid.uuid4())
    return SendMessageRequest(message=message)


def for_version(card, version):
    keep = [i for i in card.supported_interfaces if i.protocol_version.startswith(version)]
    copy = type(card)()
    copy.CopyFrom(card)
    del copy.supported_interfaces[:]
    copy.supported_interfaces.extend(keep)
    return copy


async def main(base, key, principal):
    async with httpx.AsyncClient(timeout=20) as anonymous:
        card = await A2ACardResolver(anonymous, f"{base}/agents/echo").get_agent_card()
        check(set(card.security_schemes) == {"bearer", "apiKey"}, "the card declares both schemes")
        check(card.capabilities.extended_agent_card, "the card declares the extended card")
        client = ClientFactory(ClientConfig(streaming=False, httpx_client=anonymous)).create(
            for_version(card, "1.0")
        )
        try:
            async for _ in client.send_message(user("no key")):
                pass
            check(False, "a send without a key is refused")
        except Exception as error:  # the SDK's own error type differs between versions
            check("401" in str(error), f"a send without a key is refused ({type(error).__name__})")
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(timeout=20, headers=headers) as http:
        for version in ["1.0", "0.3"]:
            client = ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create(
                for_version(card, version)
            )
            events = [e async for e in client.send_message(user(f"hello {version}"))]
            check(
                get_artifact_text(events[0].task.artifacts[0]) == f"hello {version}",
                f"{version}: a send with the key is answered",
            )
            extended = await client.get_extended_agent_card(GetExtendedAgentCardRequest())
            principals = [
                e.params["principal"]
                for e in extended.capabilities.extensions
                if "principal" in e.params
            ]
            check(principals == [principal], f"{version}: the extended card names {principal}")
    print("interop auth: all checks passed")


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
