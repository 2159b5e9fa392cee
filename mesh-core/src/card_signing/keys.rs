//! The keys of card signing: a [`SigningKey`] (an ECDSA P-256 private key, kept as a PKCS#8
//! PEM file) and [`TrustedKeys`] (the public keys a verifier accepts, kept as a JWKS file).
//!
//! A key's id (`kid`) is its RFC 7638 JWK thumbprint: the SHA-256 of
//! `{"crv":"P-256","kty":"EC","x":…,"y":…}`, base64url. It is derived from the key, so a key
//! file needs no separate id and two parties derive the same one.

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use ring::rand::SystemRandom;
use ring::signature::{
    ECDSA_P256_SHA256_FIXED, ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair,
    UnparsedPublicKey,
};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// The one algorithm: ECDSA with P-256 and SHA-256 (JWS `ES256`).
pub const ALGORITHM: &str = "ES256";

/// The largest key file read (PEM or JWKS), in bytes.
pub const MAX_KEY_FILE_BYTES: usize = 256 * 1024;

/// The most keys a trust store holds.
pub const MAX_TRUSTED_KEYS: usize = 256;

/// The longest key id accepted, in bytes.
pub const MAX_KID_BYTES: usize = 256;

const PEM_BEGIN: &str = "-----BEGIN PRIVATE KEY-----";
const PEM_END: &str = "-----END PRIVATE KEY-----";

/// Why a key could not be made, read or used. Never carries key material.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The key file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file is larger than [`MAX_KEY_FILE_BYTES`].
    #[error("{0} is larger than {MAX_KEY_FILE_BYTES} bytes: not a key file")]
    TooLarge(String),
    /// Not a PKCS#8 PEM P-256 private key.
    #[error("not an ECDSA P-256 private key in PKCS#8 PEM (\"BEGIN PRIVATE KEY\"): {0}")]
    BadPrivateKey(&'static str),
    /// A JWKS that is not one, or a key in it that is not a P-256 ES256 public key.
    #[error("key set: {0}")]
    BadKeySet(String),
    /// The system's random generator failed.
    #[error("no randomness from the system")]
    Random,
}

/// An ECDSA P-256 private key that signs agent cards (ES256). Cheap to clone; its `Debug`
/// shows the key id only.
#[derive(Clone)]
pub struct SigningKey {
    inner: Arc<SigningInner>,
}

struct SigningInner {
    pair: EcdsaKeyPair,
    pkcs8: Vec<u8>,
    kid: String,
    rng: SystemRandom,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("kid", &self.inner.kid)
            .finish_non_exhaustive()
    }
}

impl SigningKey {
    /// A new random key.
    pub fn generate() -> Result<SigningKey, KeyError> {
        let rng = SystemRandom::new();
        let document = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .map_err(|_| KeyError::Random)?;
        SigningKey::from_pkcs8(document.as_ref().to_vec())
    }

    /// Reads a PKCS#8 PEM private key (`-----BEGIN PRIVATE KEY-----`, as `to_pem` writes and
    /// `openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256` makes).
    pub fn from_pem(pem: &str) -> Result<SigningKey, KeyError> {
        if pem.len() > MAX_KEY_FILE_BYTES {
            return Err(KeyError::BadPrivateKey("larger than a key file"));
        }
        let start = pem
            .find(PEM_BEGIN)
            .ok_or(KeyError::BadPrivateKey("no BEGIN PRIVATE KEY line"))?
            + PEM_BEGIN.len();
        let end = pem[start..]
            .find(PEM_END)
            .ok_or(KeyError::BadPrivateKey("no END PRIVATE KEY line"))?
            + start;
        let body: String = pem[start..end]
            .chars()
            .filter(|c| !c.is_ascii_whitespace())
            .collect();
        let der = STANDARD
            .decode(body)
            .map_err(|_| KeyError::BadPrivateKey("the PEM body is not base64"))?;
        SigningKey::from_pkcs8(der)
    }

    /// Reads a key file (see [`SigningKey::from_pem`]).
    pub fn load(path: &Path) -> Result<SigningKey, KeyError> {
        SigningKey::from_pem(&read_bounded(path)?)
    }

    fn from_pkcs8(pkcs8: Vec<u8>) -> Result<SigningKey, KeyError> {
        let rng = SystemRandom::new();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &pkcs8, &rng)
            .map_err(|_| KeyError::BadPrivateKey("not a PKCS#8 P-256 key with its public key"))?;
        let (x, y) = coordinates(pair.public_key().as_ref())
            .ok_or(KeyError::BadPrivateKey("unexpected public key form"))?;
        let kid = thumbprint(&x, &y);
        Ok(SigningKey {
            inner: Arc::new(SigningInner {
                pair,
                pkcs8,
                kid,
                rng,
            }),
        })
    }

    /// The key as a PKCS#8 PEM document (secret: write it to a file only the signer reads).
    pub fn to_pem(&self) -> String {
        let body = STANDARD.encode(&self.inner.pkcs8);
        let mut pem = String::with_capacity(body.len() + 80);
        pem.push_str(PEM_BEGIN);
        pem.push('\n');
        for line in body.as_bytes().chunks(64) {
            pem.push_str(std::str::from_utf8(line).unwrap_or_default());
            pem.push('\n');
        }
        pem.push_str(PEM_END);
        pem.push('\n');
        pem
    }

    /// The key's id: its RFC 7638 JWK thumbprint (base64url of a SHA-256).
    pub fn kid(&self) -> &str {
        &self.inner.kid
    }

    /// The public key as a JWK: `{kty, crv, x, y, kid, alg, use}`.
    pub fn public_jwk(&self) -> Value {
        let (x, y) = coordinates(self.inner.pair.public_key().as_ref()).unwrap_or_default();
        json!({
            "kty": "EC",
            "crv": "P-256",
            "x": x,
            "y": y,
            "kid": self.inner.kid,
            "alg": ALGORITHM,
            "use": "sig",
        })
    }

    /// The 64-byte `r || s` signature of `message`.
    pub(crate) fn sign(&self, message: &[u8]) -> Result<Vec<u8>, KeyError> {
        self.inner
            .pair
            .sign(&self.inner.rng, message)
            .map(|s| s.as_ref().to_vec())
            .map_err(|_| KeyError::Random)
    }
}

/// The base64url `x` and `y` of an uncompressed P-256 point (`04 || x || y`).
fn coordinates(point: &[u8]) -> Option<(String, String)> {
    match point {
        [4, rest @ ..] if rest.len() == 64 => Some((
            URL_SAFE_NO_PAD.encode(&rest[..32]),
            URL_SAFE_NO_PAD.encode(&rest[32..]),
        )),
        _ => None,
    }
}

/// RFC 7638: the SHA-256 of the required members in lexicographic order, no whitespace.
fn thumbprint(x: &str, y: &str) -> String {
    let members = format!(r#"{{"crv":"P-256","kty":"EC","x":"{x}","y":"{y}"}}"#);
    URL_SAFE_NO_PAD.encode(ring::digest::digest(
        &ring::digest::SHA256,
        members.as_bytes(),
    ))
}

fn read_bounded(path: &Path) -> Result<String, KeyError> {
    let shown = path.display().to_string();
    let io = |source| KeyError::Io {
        path: shown.clone(),
        source,
    };
    let size = std::fs::metadata(path).map_err(io)?.len();
    if size > MAX_KEY_FILE_BYTES as u64 {
        return Err(KeyError::TooLarge(shown));
    }
    std::fs::read_to_string(path).map_err(io)
}

/// One trusted public key.
pub(crate) struct TrustedKey {
    pub(crate) key: UnparsedPublicKey<Vec<u8>>,
    jwk: Value,
}

/// The public keys a verifier trusts, by key id: read from a JWKS (`{"keys":[…]}`) of
/// P-256 ES256 public keys. Cheap to clone.
///
/// Each key must be `{"kty":"EC","crv":"P-256","x":…,"y":…}` with 32-byte coordinates, no
/// private part (`d`), `alg` (when given) `ES256` and `use` (when given) `sig`; its `kid`
/// is the one given, else its thumbprint. A set with any other key, a repeated id, more
/// than [`MAX_TRUSTED_KEYS`] keys or more than [`MAX_KEY_FILE_BYTES`] bytes is refused
/// whole: a trust store that is not what its author meant should stop the start.
#[derive(Clone, Default)]
pub struct TrustedKeys {
    keys: Arc<HashMap<String, TrustedKey>>,
}

impl std::fmt::Debug for TrustedKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut kids: Vec<&String> = self.keys.keys().collect();
        kids.sort();
        f.debug_struct("TrustedKeys").field("kids", &kids).finish()
    }
}

impl TrustedKeys {
    /// Reads a JWKS document.
    pub fn from_jwks(text: &str) -> Result<TrustedKeys, KeyError> {
        if text.len() > MAX_KEY_FILE_BYTES {
            return Err(KeyError::BadKeySet(format!(
                "larger than {MAX_KEY_FILE_BYTES} bytes"
            )));
        }
        let document: Value = serde_json::from_str(text)
            .map_err(|e| KeyError::BadKeySet(format!("not JSON: {e}")))?;
        let Some(Value::Array(keys)) = document.get("keys") else {
            return Err(KeyError::BadKeySet(
                "not a JWKS: no \"keys\" array".to_owned(),
            ));
        };
        if keys.len() > MAX_TRUSTED_KEYS {
            return Err(KeyError::BadKeySet(format!(
                "{} keys, more than {MAX_TRUSTED_KEYS}",
                keys.len()
            )));
        }
        let mut set = HashMap::with_capacity(keys.len());
        for (i, jwk) in keys.iter().enumerate() {
            let (kid, key) =
                trusted_key(jwk).map_err(|e| KeyError::BadKeySet(format!("key {i}: {e}")))?;
            if set.insert(kid.clone(), key).is_some() {
                return Err(KeyError::BadKeySet(format!(
                    "key {i}: the key id {kid:?} is taken by an earlier key"
                )));
            }
        }
        Ok(TrustedKeys {
            keys: Arc::new(set),
        })
    }

    /// Reads a JWKS file (see [`TrustedKeys::from_jwks`]).
    pub fn load(path: &Path) -> Result<TrustedKeys, KeyError> {
        TrustedKeys::from_jwks(&read_bounded(path)?)
    }

    /// A trust store of these signing keys' public halves.
    pub fn of(keys: &[&SigningKey]) -> TrustedKeys {
        let jwks = jwks(keys.iter().map(|k| k.public_jwk()));
        TrustedKeys::from_jwks(&jwks.to_string()).unwrap_or_default()
    }

    /// The key with this id.
    pub(crate) fn get(&self, kid: &str) -> Option<&TrustedKey> {
        self.keys.get(kid)
    }

    /// How many keys the store holds.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// True when it holds none.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The store as a JWKS document (public keys only), sorted by key id.
    pub fn to_jwks(&self) -> Value {
        let mut kids: Vec<&String> = self.keys.keys().collect();
        kids.sort();
        jwks(kids.into_iter().map(|kid| self.keys[kid].jwk.clone()))
    }
}

/// A JWKS document of these JWKs: `{"keys":[…]}`.
pub fn jwks(keys: impl IntoIterator<Item = Value>) -> Value {
    json!({ "keys": keys.into_iter().collect::<Vec<Value>>() })
}

fn trusted_key(jwk: &Value) -> Result<(String, TrustedKey), String> {
    let Value::Object(members) = jwk else {
        return Err("not a JSON object".to_owned());
    };
    let text = |name: &str| members.get(name).and_then(Value::as_str);
    if text("kty") != Some("EC") || text("crv") != Some("P-256") {
        return Err("not an EC P-256 key (kty \"EC\", crv \"P-256\")".to_owned());
    }
    if members.contains_key("d") {
        return Err(
            "a private key (it has \"d\"): a trust store holds public keys only".to_owned(),
        );
    }
    if members
        .get("alg")
        .is_some_and(|a| a.as_str() != Some(ALGORITHM))
    {
        return Err(format!("alg is not {ALGORITHM}"));
    }
    if members
        .get("use")
        .is_some_and(|u| u.as_str() != Some("sig"))
    {
        return Err("use is not \"sig\"".to_owned());
    }
    let coordinate = |name: &str| {
        text(name)
            .and_then(|c| URL_SAFE_NO_PAD.decode(c).ok())
            .filter(|bytes| bytes.len() == 32)
            .ok_or_else(|| format!("{name} is not 32 bytes of base64url"))
    };
    let (x, y) = (coordinate("x")?, coordinate("y")?);
    let kid = match members.get("kid") {
        None => thumbprint(&URL_SAFE_NO_PAD.encode(&x), &URL_SAFE_NO_PAD.encode(&y)),
        Some(Value::String(kid)) if !kid.is_empty() && kid.len() <= MAX_KID_BYTES => kid.clone(),
        Some(_) => return Err(format!("kid is not a string of 1 to {MAX_KID_BYTES} bytes")),
    };
    let mut point = Vec::with_capacity(65);
    point.push(4);
    point.extend_from_slice(&x);
    point.extend_from_slice(&y);
    let public = json!({
        "kty": "EC",
        "crv": "P-256",
        "x": URL_SAFE_NO_PAD.encode(&x),
        "y": URL_SAFE_NO_PAD.encode(&y),
        "kid": kid,
        "alg": ALGORITHM,
        "use": "sig",
    });
    Ok((
        kid,
        TrustedKey {
            key: UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, point),
            jwk: public,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_survives_its_pem_and_names_itself() {
        let key = SigningKey::generate().unwrap();
        let pem = key.to_pem();
        assert!(pem.starts_with(PEM_BEGIN) && pem.trim_end().ends_with(PEM_END));
        let again = SigningKey::from_pem(&pem).unwrap();
        assert_eq!(again.kid(), key.kid());
        assert_eq!(again.public_jwk(), key.public_jwk());
        assert_eq!(key.kid().len(), 43, "a base64url SHA-256");
        assert!(!format!("{key:?}").contains(&pem[PEM_BEGIN.len() + 1..PEM_BEGIN.len() + 20]));
        for bad in [
            "",
            "-----BEGIN PRIVATE KEY-----\n!!\n-----END PRIVATE KEY-----",
            "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----",
        ] {
            assert!(SigningKey::from_pem(bad).is_err(), "{bad:?}");
        }
    }

    /// RFC 7638 §3.1's example is an RSA key; this checks the EC form the same way, against
    /// a thumbprint computed by hand from the members string.
    #[test]
    fn the_kid_is_the_rfc_7638_thumbprint() {
        let key = SigningKey::generate().unwrap();
        let jwk = key.public_jwk();
        let members = format!(
            r#"{{"crv":"P-256","kty":"EC","x":"{}","y":"{}"}}"#,
            jwk["x"].as_str().unwrap(),
            jwk["y"].as_str().unwrap()
        );
        let digest = ring::digest::digest(&ring::digest::SHA256, members.as_bytes());
        assert_eq!(key.kid(), URL_SAFE_NO_PAD.encode(digest));
        assert_eq!(jwk["kid"], key.kid());
    }

    #[test]
    fn a_trust_store_takes_public_p256_keys_only() {
        let (a, b) = (
            SigningKey::generate().unwrap(),
            SigningKey::generate().unwrap(),
        );
        let store =
            TrustedKeys::from_jwks(&jwks([a.public_jwk(), b.public_jwk()]).to_string()).unwrap();
        assert_eq!(store.len(), 2);
        assert!(store.get(a.kid()).is_some() && store.get(b.kid()).is_some());
        assert_eq!(
            TrustedKeys::from_jwks(&store.to_jwks().to_string())
                .unwrap()
                .len(),
            2
        );

        let mut no_kid = a.public_jwk();
        no_kid.as_object_mut().unwrap().remove("kid");
        let store = TrustedKeys::from_jwks(&jwks([no_kid]).to_string()).unwrap();
        assert!(store.get(a.kid()).is_some(), "the thumbprint is the id");

        let with = |name: &str, value: Value| {
            let mut jwk = a.public_jwk();
            jwk[name] = value;
            jwks([jwk]).to_string()
        };
        for bad in [
            with("d", json!("AAAA")),
            with("crv", json!("P-384")),
            with("kty", json!("RSA")),
            with("alg", json!("RS256")),
            with("use", json!("enc")),
            with("x", json!("AAAA")),
            with("kid", json!(7)),
            jwks([a.public_jwk(), a.public_jwk()]).to_string(),
            "{}".to_owned(),
            "not json".to_owned(),
            jwks(std::iter::repeat_n(a.public_jwk(), MAX_TRUSTED_KEYS + 1)).to_string(),
        ] {
            assert!(TrustedKeys::from_jwks(&bad).is_err(), "{bad}");
        }
    }
}
