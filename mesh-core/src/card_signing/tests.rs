//! Sign → verify round trips, tampering, keys, and the shape of the signature.

use super::*;
use serde_json::json;

fn card() -> Value {
    json!({
        "name": "echo",
        "description": "Repeats what it is sent",
        "version": "1.2.3",
        "supportedInterfaces": [
            {"url": "http://gw/agents/echo", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": "http://gw/agents/echo", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"}
        ],
        "provider": {"url": "https://example.com", "organization": "Example"},
        "capabilities": {"streaming": true, "pushNotifications": false,
                         "extensions": [{"uri": "urn:x", "params": {"k": [1, 2.5]}}]},
        "securitySchemes": {"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}}},
        "securityRequirements": [{"schemes": {"bearer": {"list": []}}}],
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "echo", "name": "Echo", "description": "Echoes", "tags": ["echo"]}],
        "documentationUrl": "https://example.com/docs",
        "iconUrl": "https://example.com/icon.png",
        "url": "http://gw/agents/echo",
        "preferredTransport": "JSONRPC",
        "protocolVersion": "0.3.0"
    })
}

fn signed(key: &SigningKey) -> Value {
    let mut card = card();
    sign_card(key, &mut card, Some("http://gw/.well-known/jwks.json")).unwrap();
    card
}

#[test]
fn a_signed_card_verifies_with_the_signers_key() {
    let key = SigningKey::generate().unwrap();
    let card = signed(&key);
    assert_eq!(
        verify_card(&TrustedKeys::of(&[&key]), &card),
        Ok(key.kid().to_owned())
    );
    // Through a re-serialization with another member order and whitespace.
    let text = serde_json::to_string_pretty(&card).unwrap();
    let again: Value = serde_json::from_str(&text).unwrap();
    assert!(verify_card(&TrustedKeys::of(&[&key]), &again).is_ok());
}

#[test]
fn the_protected_header_and_the_signature_have_the_jws_shape() {
    let key = SigningKey::generate().unwrap();
    let card = signed(&key);
    let signatures = card["signatures"].as_array().unwrap();
    assert_eq!(signatures.len(), 1);
    let header: Value = serde_json::from_slice(
        &URL_SAFE_NO_PAD
            .decode(signatures[0]["protected"].as_str().unwrap())
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        header,
        json!({"alg": "ES256", "typ": "JOSE", "kid": key.kid(),
               "jku": "http://gw/.well-known/jwks.json"})
    );
    let signature = URL_SAFE_NO_PAD
        .decode(signatures[0]["signature"].as_str().unwrap())
        .unwrap();
    assert_eq!(signature.len(), 64, "ES256 is r || s");
}

#[test]
fn signing_again_replaces_the_signatures() {
    let (a, b) = (
        SigningKey::generate().unwrap(),
        SigningKey::generate().unwrap(),
    );
    let mut card = signed(&a);
    sign_card(&b, &mut card, None).unwrap();
    assert_eq!(card["signatures"].as_array().unwrap().len(), 1);
    assert_eq!(
        verify_card(&TrustedKeys::of(&[&b]), &card),
        Ok(b.kid().to_owned())
    );
    assert_eq!(
        verify_card(&TrustedKeys::of(&[&a]), &card),
        Err(VerifyError::UnknownKid {
            kid: b.kid().to_owned()
        })
    );
}

/// Every covered member, changed or removed, breaks the signature.
#[test]
fn tampering_with_any_covered_member_fails() {
    let key = SigningKey::generate().unwrap();
    let trusted = TrustedKeys::of(&[&key]);
    let original = signed(&key);
    type Change = (&'static str, fn(&mut Value));
    let changes: Vec<Change> = vec![
        ("name", |c| c["name"] = json!("evil")),
        ("description", |c| c["description"] = json!("")),
        ("version", |c| c["version"] = json!("9")),
        ("interface url", |c| {
            c["supportedInterfaces"][0]["url"] = json!("http://evil/")
        }),
        ("interface removed", |c| {
            c["supportedInterfaces"].as_array_mut().unwrap().pop();
        }),
        ("provider", |c| {
            c["provider"]["organization"] = json!("Evil")
        }),
        ("streaming", |c| {
            c["capabilities"]["streaming"] = json!(false)
        }),
        ("push off → absent", |c| {
            c["capabilities"]
                .as_object_mut()
                .unwrap()
                .remove("pushNotifications");
        }),
        ("extension params", |c| {
            c["capabilities"]["extensions"][0]["params"]["k"][1] = json!(2.25)
        }),
        ("scheme", |c| {
            c["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"] = json!("Basic")
        }),
        ("requirement removed", |c| {
            c.as_object_mut().unwrap().remove("securityRequirements");
        }),
        ("input modes", |c| {
            c["defaultInputModes"] = json!(["text/html"])
        }),
        ("output modes", |c| c["defaultOutputModes"] = json!([])),
        ("skill", |c| {
            c["skills"][0]["description"] = json!("does evil")
        }),
        ("skill tag", |c| c["skills"][0]["tags"] = json!(["evil"])),
        ("skills removed", |c| c["skills"] = json!([])),
        ("documentation", |c| {
            c["documentationUrl"] = json!("https://evil")
        }),
        ("icon", |c| c["iconUrl"] = json!("")),
        ("new covered member", |c| {
            c["skills"][0]["examples"] = json!(["x"])
        }),
    ];
    for (what, change) in changes {
        let mut card = original.clone();
        change(&mut card);
        assert_eq!(
            verify_card(&trusted, &card),
            Err(VerifyError::BadSignature {
                kid: key.kid().to_owned()
            }),
            "{what}"
        );
    }
    // What the signature does not cover may change: the 0.3 members, unknown members,
    // defaults written out.
    let mut card = original.clone();
    card["url"] = json!("http://elsewhere/");
    card["skills"][0]["unknownMember"] = json!(1);
    card["skills"][0]["examples"] = json!([]);
    card["documentationUrl"] = json!("https://example.com/docs");
    assert!(verify_card(&trusted, &card).is_ok());
}

#[test]
fn a_tampered_signature_or_header_fails() {
    let key = SigningKey::generate().unwrap();
    let trusted = TrustedKeys::of(&[&key]);
    let original = signed(&key);
    let mut card = original.clone();
    let signature = card["signatures"][0]["signature"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut bytes = URL_SAFE_NO_PAD.decode(signature).unwrap();
    bytes[10] ^= 1;
    card["signatures"][0]["signature"] = json!(URL_SAFE_NO_PAD.encode(&bytes));
    assert_eq!(
        verify_card(&trusted, &card).unwrap_err().reason(),
        "bad_signature"
    );

    // A header rewritten to another jku (same kid) no longer matches the signature.
    let mut card = original.clone();
    let header = json!({"alg": "ES256", "typ": "JOSE", "kid": key.kid(), "jku": "http://evil/"});
    card["signatures"][0]["protected"] = json!(URL_SAFE_NO_PAD.encode(header.to_string()));
    assert_eq!(
        verify_card(&trusted, &card).unwrap_err().reason(),
        "bad_signature"
    );

    // alg none, HS256, crit, a header that is not JSON: malformed, never verified.
    for header in [
        json!({"alg": "none", "kid": key.kid()}).to_string(),
        json!({"alg": "HS256", "kid": key.kid()}).to_string(),
        json!({"alg": "ES256", "kid": key.kid(), "crit": ["exp"]}).to_string(),
        json!({"alg": "ES256"}).to_string(),
        "[1]".to_owned(),
        "not json".to_owned(),
    ] {
        let mut card = original.clone();
        card["signatures"][0]["protected"] = json!(URL_SAFE_NO_PAD.encode(&header));
        assert_eq!(
            verify_card(&trusted, &card).unwrap_err().reason(),
            "malformed",
            "{header}"
        );
    }
}

#[test]
fn unknown_keys_unsigned_and_malformed_cards_fail_with_their_reason() {
    let (key, other) = (
        SigningKey::generate().unwrap(),
        SigningKey::generate().unwrap(),
    );
    let card = signed(&key);
    assert_eq!(
        verify_card(&TrustedKeys::of(&[&other]), &card),
        Err(VerifyError::UnknownKid {
            kid: key.kid().to_owned()
        })
    );
    assert_eq!(
        verify_card(&TrustedKeys::default(), &card)
            .unwrap_err()
            .reason(),
        "unknown_kid"
    );
    let trusted = TrustedKeys::of(&[&key]);
    assert_eq!(
        verify_card(&trusted, &self::card()),
        Err(VerifyError::Unsigned)
    );
    let mut empty = self::card();
    empty["signatures"] = json!([]);
    assert_eq!(verify_card(&trusted, &empty), Err(VerifyError::Unsigned));
    for bad in [
        json!([1]),
        json!({"signatures": "x"}),
        json!({"signatures": [{"protected": 1}]}),
    ] {
        assert_eq!(
            verify_card(&trusted, &bad).unwrap_err().reason(),
            "malformed",
            "{bad}"
        );
    }
    // A key that claims a trusted key's id is a bad signature, not a trusted one.
    let mut forged = self::card();
    let impostor_header = json!({"alg": "ES256", "typ": "JOSE", "kid": key.kid()}).to_string();
    let protected = URL_SAFE_NO_PAD.encode(impostor_header);
    let payload = URL_SAFE_NO_PAD.encode(canonical_card(&forged).unwrap());
    let signature = other
        .sign(format!("{protected}.{payload}").as_bytes())
        .unwrap();
    forged["signatures"] =
        json!([{"protected": protected, "signature": URL_SAFE_NO_PAD.encode(signature)}]);
    assert_eq!(
        verify_card(&trusted, &forged),
        Err(VerifyError::BadSignature {
            kid: key.kid().to_owned()
        })
    );
}

#[test]
fn one_good_signature_among_the_first_few_is_enough() {
    let (key, other) = (
        SigningKey::generate().unwrap(),
        SigningKey::generate().unwrap(),
    );
    let trusted = TrustedKeys::of(&[&key]);
    let good = signed(&key)["signatures"][0].clone();
    let unknown = signed(&other)["signatures"][0].clone();
    let mut card = card();
    card["signatures"] = json!([unknown.clone(), good.clone()]);
    assert_eq!(verify_card(&trusted, &card), Ok(key.kid().to_owned()));
    // Past the examined bound, a good signature is not looked at.
    let mut many = vec![unknown; MAX_SIGNATURES_EXAMINED];
    many.push(good);
    card["signatures"] = Value::Array(many);
    assert_eq!(
        verify_card(&trusted, &card).unwrap_err().reason(),
        "unknown_kid"
    );
}
