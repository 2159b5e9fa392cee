//! Fixture tests: examples from the seeds and spec texts (see docs/fixtures.md).
//! `*_ok/` must decode and round-trip (read → model → write → read: same model);
//! `*_fail/<code>_*.json` must fail with that JSON-RPC code.

use std::fs;
use std::path::PathBuf;

use mesh_core::codec::{decode_reply, decode_request, encode_reply, encode_request};
use mesh_core::dialect::Dialect;

fn dir(name: &str) -> Vec<(String, Vec<u8>)> {
    let d = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let mut out: Vec<_> = fs::read_dir(&d)
        .expect("fixture dir")
        .map(|e| {
            let p = e.expect("entry").path();
            let name = p.file_name().expect("name").to_string_lossy().to_string();
            (name, fs::read(&p).expect("read"))
        })
        .collect();
    out.sort();
    assert!(!out.is_empty(), "{name} is empty");
    out
}

fn code_of(name: &str) -> i64 {
    name.split('_')
        .next()
        .and_then(|c| c.parse().ok())
        .expect("code prefix")
}

#[test]
fn requests_ok_decode_and_round_trip() {
    for (name, bytes) in dir("requests_ok") {
        let req = decode_request(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        for d in Dialect::ALL {
            let mut r = req.clone();
            r.dialect = d;
            let again = decode_request(&encode_request(&r))
                .unwrap_or_else(|e| panic!("{name} via {d}: {e}"));
            assert_eq!(again.call, req.call, "{name} via {d}");
            assert_eq!(again.method, req.method, "{name} via {d}");
            assert_eq!(again.id, req.id, "{name} via {d}");
        }
    }
}

#[test]
fn requests_fail_with_their_code() {
    for (name, bytes) in dir("requests_fail") {
        let err = decode_request(&bytes).expect_err(&name);
        assert_eq!(err.error.code(), code_of(&name), "{name}: {}", err.error);
    }
}

#[test]
fn replies_ok_decode_and_round_trip() {
    for (name, bytes) in dir("replies_ok") {
        let dialect = match &name[..4] {
            "v0_1" => Dialect::V0_1,
            "v0_3" => Dialect::V0_3,
            _ => Dialect::V1_0,
        };
        let (id, reply) = decode_reply(&bytes, dialect).unwrap_or_else(|e| panic!("{name}: {e}"));
        match reply {
            Ok(reply) => {
                for d in Dialect::ALL {
                    let (id2, again) = decode_reply(&encode_reply(d, &id, &reply), d)
                        .unwrap_or_else(|e| panic!("{name} via {d}: {e}"));
                    assert_eq!(id2, id);
                    assert_eq!(again.expect("result"), reply, "{name} via {d}");
                }
            }
            Err(err) => {
                for d in Dialect::ALL {
                    let out = mesh_core::codec::encode_error(d, Some(&id), &err);
                    let (_, again) = decode_reply(&out, d).expect("error response");
                    assert_eq!(
                        again.expect_err("error").code(),
                        err.code(),
                        "{name} via {d}"
                    );
                }
            }
        }
    }
}

#[test]
fn replies_fail_with_their_code() {
    for (name, bytes) in dir("replies_fail") {
        let err = decode_reply(&bytes, Dialect::V0_3).expect_err(&name);
        assert_eq!(err.code(), code_of(&name), "{name}: {err}");
    }
}
