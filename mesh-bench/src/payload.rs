//! The one payload every case sends: a 306-byte A2A 0.3 `message/send` JSON-RPC request (the
//! size of the baselines' payload), its text padded to the exact length. The HTTP cases give
//! each request its own `messageId` and JSON-RPC id without changing the length. The
//! HTTP+JSON and gRPC cases send the same text (the same number of bytes) in an A2A 1.0
//! `SendMessageRequest`, each with its own `messageId` too.

/// The payload length, in bytes.
pub const PAYLOAD_LEN: usize = 306;

/// The JSON-RPC request with `text` as its message's text and `n` (ten digits) as JSON-RPC
/// (string) id and in the `messageId`.
fn jsonrpc(method: &str, text: &str, n: u64) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":"{n:010}","method":"{method}","params":{{"message":{{"kind":"message","role":"user","messageId":"bench-{n:010}","parts":[{{"kind":"text","text":"{text}"}}]}},"configuration":{{"blocking":true}}}}}}"#
    )
}

/// The text of [`request`]: `text_prefix` padded with `x` until the request is
/// [`PAYLOAD_LEN`] bytes long.
fn padded_text(method: &str, text_prefix: &str) -> String {
    let base = jsonrpc(method, text_prefix, 0).len();
    format!(
        "{text_prefix}{}",
        "x".repeat(PAYLOAD_LEN.saturating_sub(base))
    )
}

/// The request with `n` (ten digits) as JSON-RPC (string) id and in the `messageId`, padded to
/// [`PAYLOAD_LEN`] bytes. `n` above 9,999,999,999 would lengthen it.
pub fn request(method: &str, text_prefix: &str, n: u64) -> String {
    jsonrpc(method, &padded_text(method, text_prefix), n)
}

/// The `message/send` payload: what the raw MQTT cases publish and the HTTP cases POST.
pub fn send(n: u64) -> String {
    request("message/send", "bench ", n)
}

/// The text of the `message/send` payload's message (what every binding's case sends).
pub fn send_text() -> String {
    padded_text("message/send", "bench ")
}

/// The same request as a Lua `string.format` template (`%010d` for the string id and the
/// message id), for wrk.
pub fn send_lua_template() -> String {
    let sample = send(1_000_000_000);
    sample
        .replacen("\"id\":\"1000000000\"", "\"id\":\"%010d\"", 1)
        .replacen("bench-1000000000", "bench-%010d", 1)
}

/// The `messageId` of request `n`, as every binding's case writes it.
pub fn message_id(n: u64) -> String {
    format!("bench-{n:010}")
}

/// The HTTP+JSON binding's body (A2A 1.0 `SendMessageRequest`, blocking by default) with
/// [`send_text`] as its text and `n` (ten digits) in the `messageId`.
pub fn rest_send(n: u64) -> String {
    format!(
        r#"{{"message":{{"role":"ROLE_USER","messageId":"{}","parts":[{{"text":"{}"}}]}}}}"#,
        message_id(n),
        send_text()
    )
}

/// [`rest_send`] as a Lua `string.format` template (`%010d` for the message id), for wrk.
pub fn rest_send_lua_template() -> String {
    rest_send(1_000_000_000).replacen("bench-1000000000", "bench-%010d", 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_payload_has_the_baseline_size_and_is_json() {
        for n in [1, 42, 1_000_000_000] {
            let p = send(n);
            assert_eq!(p.len(), PAYLOAD_LEN, "{p}");
            let v: serde_json::Value = serde_json::from_str(&p).unwrap();
            assert_eq!(v["method"], "message/send");
            assert_eq!(v["params"]["message"]["parts"][0]["text"], send_text());
        }
        assert!(send_lua_template().contains("\"id\":\"%010d\""));
        assert!(send_lua_template().contains("bench-%010d"));
    }

    #[test]
    fn the_rest_body_carries_the_same_text_and_its_own_message_id() {
        let body = rest_send(42);
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let message = &v["message"];
        assert_eq!(message["role"], "ROLE_USER");
        assert_eq!(message["messageId"], "bench-0000000042");
        assert_eq!(message["parts"][0]["text"], send_text());
        assert!(send_text().starts_with("bench x"));
        let template = rest_send_lua_template();
        assert_eq!(template.matches("%010d").count(), 1);
        assert_eq!(
            template.matches('%').count(),
            1,
            "no other format directive"
        );
        assert_eq!(template.len(), rest_send(1).len() - 10 + 5);
    }
}
