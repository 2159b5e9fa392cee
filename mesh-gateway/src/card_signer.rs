//! The gateway's signature on the cards it serves. The gateway rewrites every card (its own
//! URL, its security schemes, the members of both protocol generations), so an agent's
//! signature cannot cover what a client reads: with a signing key
//! ([`GatewayConfig::signing_key`](crate::GatewayConfig::signing_key)) each served card
//! carries the gateway's signature instead, whose protected header names the gateway's key
//! set (`jku`: `<base URL>/.well-known/jwks.json`, served with the cards).
//!
//! Signing is done once per card version and URL: a signature is kept by the digest of what
//! it covers (the canonical card), and used again while that is unchanged. At most
//! [`MAX_SIGNED_CARDS`] are kept; past it the cache starts over.

use mesh_core::card_signing::{self, SigningKey};
use mesh_core::sync::MutexExt;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Mutex;

/// The most signatures kept.
pub const MAX_SIGNED_CARDS: usize = 1024;

/// The path of the gateway's key set.
pub const JWKS_PATH: &str = "/.well-known/jwks.json";

/// The gateway's key and the signatures it made.
pub(crate) struct CardSigner {
    key: SigningKey,
    jku: String,
    signatures: Mutex<HashMap<[u8; 32], Value>>,
}

impl CardSigner {
    /// A signer whose key set is served under `base_url`.
    pub(crate) fn new(key: SigningKey, base_url: &str) -> CardSigner {
        CardSigner {
            key,
            jku: format!("{base_url}{JWKS_PATH}"),
            signatures: Mutex::default(),
        }
    }

    /// Replaces `card`'s signatures with the gateway's. A card that cannot be signed (not
    /// an object, nested too deep) is left without signatures, and that is logged.
    pub(crate) fn sign(&self, card: &mut Value) {
        if let Value::Object(members) = card {
            members.remove("signatures");
        }
        let canonical = match card_signing::canonical_card(card) {
            Ok(canonical) => canonical,
            Err(error) => {
                tracing::warn!(%error, "a card the gateway serves cannot be signed: served unsigned");
                return;
            }
        };
        let digest: [u8; 32] = ring_digest(&canonical);
        let kept = self.lock().get(&digest).cloned();
        let signature = match kept {
            Some(signature) => signature,
            None => match card_signing::card_signature(&self.key, card, Some(&self.jku)) {
                Ok(signature) => {
                    let mut signatures = self.lock();
                    if signatures.len() >= MAX_SIGNED_CARDS {
                        signatures.clear();
                    }
                    signatures.insert(digest, signature.clone());
                    signature
                }
                Err(error) => {
                    tracing::warn!(%error, "a card the gateway serves cannot be signed: served unsigned");
                    return;
                }
            },
        };
        if let Value::Object(members) = card {
            members.insert("signatures".into(), Value::Array(vec![signature]));
        }
    }

    /// The gateway's public key set.
    pub(crate) fn jwks(&self) -> Value {
        card_signing::jwks([self.key.public_jwk()])
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Value>> {
        self.signatures.locked()
    }
}

fn ring_digest(bytes: &[u8]) -> [u8; 32] {
    let mut out = [0; 32];
    out.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, bytes).as_ref());
    out
}
