//! Robustness: no input makes a decoder panic (arbitrary bytes, arbitrary JSON in the
//! params/result of every method and dialect, arbitrary agent cards).

use mesh_core::codec::card::read_card;
use mesh_core::codec::{decode, decode_reply, decode_reply_and_mesh, decode_request};
use mesh_core::dialect::{Dialect, Method, method_name};
use proptest::prelude::*;
use serde_json::{Value, json};

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        prop_oneof![
            Just("text".to_string()),
            Just("file".to_string()),
            Just("data".to_string()),
            Just("user".to_string()),
            Just("working".to_string()),
            Just("task".to_string()),
            Just("status-update".to_string()),
            "[a-zA-Z0-9_=-]{0,8}",
        ]
        .prop_map(Value::from),
    ];
    let keys = prop_oneof![
        Just("message"),
        Just("parts"),
        Just("role"),
        Just("text"),
        Just("file"),
        Just("data"),
        Just("bytes"),
        Just("uri"),
        Just("raw"),
        Just("url"),
        Just("kind"),
        Just("type"),
        Just("messageId"),
        Just("id"),
        Just("taskId"),
        Just("contextId"),
        Just("status"),
        Just("state"),
        Just("artifact"),
        Just("artifacts"),
        Just("history"),
        Just("metadata"),
        Just("_mesh"),
        Just("final"),
        Just("configuration"),
        Just("pushNotificationConfig"),
        Just("authentication"),
        Just("schemes"),
        Just("index"),
        Just("tasks"),
        Just("configs"),
        Just("name"),
        Just("capabilities"),
        Just("supportedInterfaces"),
        Just("timestamp"),
        Just("task"),
        Just("statusUpdate"),
        Just("historyLength"),
        Just("artifactId"),
    ];
    leaf.prop_recursive(5, 64, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((keys.clone(), inner), 0..6).prop_map(|kv| {
                Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
            }),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        let _ = decode(&bytes);
        for d in Dialect::ALL {
            let _ = decode_reply(&bytes, d);
            let _ = decode_reply_and_mesh(&bytes, d);
        }
    }

    #[test]
    fn arbitrary_params_and_results(params in arb_json(), m in 0usize..11, d in 0usize..3) {
        let dialect = Dialect::ALL[d];
        let method = Method::ALL[m];
        let req = json!({"jsonrpc":"2.0","id":1,"method":method_name(method, dialect),"params":params.clone()});
        let _ = decode_request(&serde_json::to_vec(&req).unwrap_or_default());
        let resp = json!({"jsonrpc":"2.0","id":1,"result":params.clone()});
        let _ = decode_reply(&serde_json::to_vec(&resp).unwrap_or_default(), dialect);
        let _ = decode_reply_and_mesh(&serde_json::to_vec(&resp).unwrap_or_default(), dialect);
        let resp = json!({"jsonrpc":"2.0","id":1,"error":params.clone()});
        let _ = decode_reply(&serde_json::to_vec(&resp).unwrap_or_default(), dialect);
        let _ = read_card(params);
    }
}
