"""The official A2A Python SDK verifies the agent card a gateway signed.

Usage: a2a_sdk_signed_card.py <gateway base URL> <agent>

The SDK's resolver fetches the card and verifies it with `a2a.utils.signing` (its own RFC
8785 canonicalization and PyJWT's ES256), given the keys the gateway serves at
/.well-known/jwks.json. A card with a member changed after signing must fail. Prints
"signed card: all checks passed" at the end; any failure raises.
"""

import asyncio
import sys

import httpx
from jwt.api_jwk import PyJWK

from a2a.client import A2ACardResolver
from a2a.client.card_resolver import parse_agent_card
from a2a.utils.signing import InvalidSignaturesError, create_signature_verifier


async def main(base: str, agent: str) -> None:
    jwks_url = f"{base}/.well-known/jwks.json"
    async with httpx.AsyncClient(timeout=30) as http:
        jwks = (await http.get(jwks_url)).raise_for_status().json()
        keys = {jwk["kid"]: PyJWK(jwk) for jwk in jwks["keys"]}
        asked = []

        def key_provider(kid, jku):
            asked.append((kid, jku))
            assert jku == jwks_url, f"the signature names {jku!r}, not {jwks_url!r}"
            return keys[kid]

        verify = create_signature_verifier(key_provider, ["ES256"])
        resolver = A2ACardResolver(http, f"{base}/agents/{agent}")
        card = await resolver.get_agent_card(signature_verifier=verify)
        assert card.name == agent, card.name
        assert asked, "no signature was examined"
        print(f"verified: card of {card.name} signed by key {asked[0][0]}")

        raw = (await http.get(f"{base}/agents/{agent}/.well-known/agent-card.json")).json()
        raw["description"] = raw["description"] + " (changed)"
        try:
            verify(parse_agent_card(raw))
        except InvalidSignaturesError:
            print("a changed card does not verify")
        else:
            raise AssertionError("a changed card verified")
    print("signed card: all checks passed")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1].rstrip("/"), sys.argv[2]))
