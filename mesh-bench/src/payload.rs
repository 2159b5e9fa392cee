//! The one payload every case sends: a 306-byte A2A 0.3 `message/send` JSON-RPC request (the
//! size of the baselines' payload), its text padded to the exact length. The HTTP cases give
//! each request its own `messageId` and JSON-RPC id without changing the length.

/// The payload length, in bytes.
pub const PAYLOAD_LEN: usize = 306;

/// The request with `n` (ten digits) as JSON-RPC (string) id and in the `messageId`, padded to
/// [`PAYLOAD_LEN`] bytes. `n` above 9,999,999,999 would lengthen it.
pub fn request(method: &str, text_prefix: &str, n: u64) -> String {
    let build = |pad: usize| {
        format!(
            r#"{{"jsonrpc":"2.0","id":"{n:010}","method":"{method}","params":{{"message":{{"kind":"message","role":"user","messageId":"bench-{n:010}","parts":[{{"kind":"text","text":"{text_prefix}{}"}}]}},"configuration":{{"blocking":true}}}}}}"#,
            "x".repeat(pad)
        )
    };
    let base = build(0).len();
    build(PAYLOAD_LEN.saturating_sub(base))
}

/// The `message/send` payload: what the raw MQTT cases publish and the HTTP cases POST.
pub fn send(n: u64) -> String {
    request("message/send", "bench ", n)
}

/// The same request as a Lua `string.format` template (`%010d` for the string id and the
/// message id), for wrk.
pub fn send_lua_template() -> String {
    let sample = send(1_000_000_000);
    sample
        .replacen("\"id\":\"1000000000\"", "\"id\":\"%010d\"", 1)
        .replacen("bench-1000000000", "bench-%010d", 1)
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
        }
        assert!(send_lua_template().contains("\"id\":\"%010d\""));
        assert!(send_lua_template().contains("bench-%010d"));
    }
}
