//! Signed agent cards (A2A v1.0 §8.4): an agent, or the gateway, signs the card it
//! publishes with an ES256 key; a reader with a trust store verifies it.
//!
//! - **What is signed** ([`canonical_card`]): the card's 1.0 members, without `signatures`,
//!   with default values removed as protocol-buffer field presence says (§8.4.1), in RFC
//!   8785 form ([`jcs`]). The 0.3 members of the combined card are not covered: a verifier
//!   trusts only [`signed_members`].
//! - **The signature** ([`sign_card`]): a JWS with the detached canonical card as payload,
//!   written as an `AgentCardSignature` `{protected, signature}` in the card's `signatures`;
//!   the protected header is `{"alg":"ES256","typ":"JOSE","kid":…}`, plus `jku` when the
//!   signer publishes its key set at a URL. `sign_card` *replaces* the card's signatures:
//!   whoever signs a card vouches for it as it is now, and a signature made over an earlier
//!   form of the card (the agent's, on a card the gateway rewrote) would not verify.
//! - **Verification** ([`verify_card`]): valid when one of the first
//!   [`MAX_SIGNATURES_EXAMINED`] signatures is an ES256 signature, by a key of the
//!   [`TrustedKeys`] whose id is its `kid`, over the card as it is. `jku` is never fetched:
//!   trust comes from the store only. The error says why a card fails ([`VerifyError`]).
//!
//! Keys are in [`keys`]: a [`SigningKey`] per signer (a PKCS#8 PEM file), a JWKS of public
//! keys for the verifier; a key's id is its RFC 7638 thumbprint.

pub mod canonical;
pub mod jcs;
pub mod keys;

pub use canonical::{canonical_card, signed_members};
pub use keys::{KeyError, MAX_TRUSTED_KEYS, SigningKey, TrustedKeys, jwks};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Map, Value, json};

/// How many of a card's signatures a verifier looks at; later ones are ignored.
pub const MAX_SIGNATURES_EXAMINED: usize = 8;

/// The longest protected header read, in bytes of base64url.
const MAX_PROTECTED_BYTES: usize = 4096;

/// The longest `jku` a signer writes, in bytes.
const MAX_JKU_BYTES: usize = 2048;

/// Why a card could not be signed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignError {
    /// The card is not a JSON object.
    #[error("an agent card is a JSON object")]
    NotAnObject,
    /// The card nests deeper than canonicalization goes.
    #[error(transparent)]
    TooDeep(#[from] jcs::TooDeep),
    /// The `jku` is longer than [`MAX_JKU_BYTES`].
    #[error("the jku URL is longer than {MAX_JKU_BYTES} bytes")]
    JkuTooLong,
    /// The system's random generator failed.
    #[error("no randomness from the system")]
    Random,
}

/// Why a card does not verify. The key ids carried come from the card: show them with
/// `{:?}` (escaped), they are bounded to [`keys::MAX_KID_BYTES`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// The card has no signature.
    #[error("the card is not signed")]
    Unsigned,
    /// No signature is by a trusted key (the first key id seen is named).
    #[error("the card is signed by key {kid:?}, which is not trusted")]
    UnknownKid {
        /// The key id of the signature.
        kid: String,
    },
    /// A signature by a trusted key does not match the card (it was changed after signing,
    /// or signed by another key that claims this id).
    #[error("the signature by key {kid:?} does not match the card")]
    BadSignature {
        /// The key id of the signature.
        kid: String,
    },
    /// The card or its signatures are not what §8.4 describes.
    #[error("malformed signed card: {0}")]
    Malformed(String),
}

impl VerifyError {
    /// A short label for metrics: `unsigned`, `unknown_kid`, `bad_signature`, `malformed`.
    pub fn reason(&self) -> &'static str {
        match self {
            VerifyError::Unsigned => "unsigned",
            VerifyError::UnknownKid { .. } => "unknown_kid",
            VerifyError::BadSignature { .. } => "bad_signature",
            VerifyError::Malformed(_) => "malformed",
        }
    }

    /// The key id the failing signature named, when it named one.
    pub fn kid(&self) -> Option<&str> {
        match self {
            VerifyError::UnknownKid { kid } | VerifyError::BadSignature { kid } => Some(kid),
            _ => None,
        }
    }

    /// How telling an error is when several signatures fail: the most telling one is
    /// reported.
    fn rank(&self) -> u8 {
        match self {
            VerifyError::Unsigned => 0,
            VerifyError::Malformed(_) => 1,
            VerifyError::UnknownKid { .. } => 2,
            VerifyError::BadSignature { .. } => 3,
        }
    }
}

/// Signs `card` with `key`: its `signatures` become this one signature. `jku`, when given,
/// is written into the protected header (where the signer's JWKS is served).
pub fn sign_card(key: &SigningKey, card: &mut Value, jku: Option<&str>) -> Result<(), SignError> {
    let signature = card_signature(key, card, jku)?;
    let Value::Object(members) = card else {
        return Err(SignError::NotAnObject);
    };
    members.insert("signatures".to_owned(), Value::Array(vec![signature]));
    Ok(())
}

/// The `AgentCardSignature` of `card` by `key` (`{protected, signature}`), for a caller that
/// keeps other signatures beside it.
pub fn card_signature(
    key: &SigningKey,
    card: &Value,
    jku: Option<&str>,
) -> Result<Value, SignError> {
    if !card.is_object() {
        return Err(SignError::NotAnObject);
    }
    if jku.is_some_and(|u| u.len() > MAX_JKU_BYTES) {
        return Err(SignError::JkuTooLong);
    }
    let mut header = Map::new();
    header.insert("alg".into(), keys::ALGORITHM.into());
    header.insert("typ".into(), "JOSE".into());
    header.insert("kid".into(), key.kid().into());
    if let Some(jku) = jku {
        header.insert("jku".into(), jku.into());
    }
    let protected = URL_SAFE_NO_PAD.encode(Value::Object(header).to_string());
    let payload = URL_SAFE_NO_PAD.encode(canonical_card(card)?);
    let input = signing_input(&protected, &payload);
    let signature = key.sign(input.as_bytes()).map_err(|_| SignError::Random)?;
    Ok(json!({
        "protected": protected,
        "signature": URL_SAFE_NO_PAD.encode(signature),
    }))
}

/// Verifies `card` against `trusted`: the id of the key whose signature verifies, or why
/// none does (see the module docs).
pub fn verify_card(trusted: &TrustedKeys, card: &Value) -> Result<String, VerifyError> {
    let Value::Object(members) = card else {
        return Err(VerifyError::Malformed(
            "the card is not a JSON object".into(),
        ));
    };
    let signatures = match members.get("signatures") {
        None | Some(Value::Null) => return Err(VerifyError::Unsigned),
        Some(Value::Array(signatures)) if signatures.is_empty() => {
            return Err(VerifyError::Unsigned);
        }
        Some(Value::Array(signatures)) => signatures,
        Some(_) => return Err(VerifyError::Malformed("signatures is not an array".into())),
    };
    let payload = canonical_card(card).map_err(|e| VerifyError::Malformed(e.to_string()))?;
    let payload = URL_SAFE_NO_PAD.encode(payload);
    let mut worst: Option<VerifyError> = None;
    for signature in signatures.iter().take(MAX_SIGNATURES_EXAMINED) {
        match verify_one(trusted, signature, &payload) {
            Ok(kid) => return Ok(kid),
            Err(e) => {
                if worst.as_ref().is_none_or(|w| e.rank() > w.rank()) {
                    worst = Some(e);
                }
            }
        }
    }
    Err(worst.unwrap_or(VerifyError::Unsigned))
}

fn verify_one(
    trusted: &TrustedKeys,
    signature: &Value,
    payload: &str,
) -> Result<String, VerifyError> {
    let malformed = |why: &str| VerifyError::Malformed(why.to_owned());
    let text = |name: &str| signature.get(name).and_then(Value::as_str);
    let (Some(protected), Some(value)) = (text("protected"), text("signature")) else {
        return Err(malformed(
            "a signature without protected and signature strings",
        ));
    };
    if protected.len() > MAX_PROTECTED_BYTES {
        return Err(malformed("a protected header longer than 4096 bytes"));
    }
    let header: Value = URL_SAFE_NO_PAD
        .decode(protected)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .filter(Value::is_object)
        .ok_or_else(|| malformed("a protected header that is not base64url JSON"))?;
    let kid = match header.get("kid") {
        Some(Value::String(kid)) if !kid.is_empty() && kid.len() <= keys::MAX_KID_BYTES => kid,
        _ => return Err(malformed("a protected header without a kid")),
    };
    if header.get("alg").and_then(Value::as_str) != Some(keys::ALGORITHM) {
        return Err(malformed("a signature whose alg is not ES256"));
    }
    if header.get("crit").is_some() {
        return Err(malformed("a protected header with crit extensions"));
    }
    let Some(key) = trusted.get(kid) else {
        return Err(VerifyError::UnknownKid { kid: kid.clone() });
    };
    let bad = || VerifyError::BadSignature { kid: kid.clone() };
    let value = URL_SAFE_NO_PAD.decode(value).map_err(|_| bad())?;
    key.key
        .verify(signing_input(protected, payload).as_bytes(), &value)
        .map_err(|_| bad())?;
    Ok(kid.clone())
}

/// The JWS signing input: `protected || '.' || payload`, both base64url (RFC 7515 §5.1).
fn signing_input(protected: &str, payload: &str) -> String {
    let mut input = String::with_capacity(protected.len() + 1 + payload.len());
    input.push_str(protected);
    input.push('.');
    input.push_str(payload);
    input
}

#[cfg(test)]
mod tests;
