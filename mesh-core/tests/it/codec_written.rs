//! The writer's output, pinned: every fixture of `requests_ok/` and `replies_ok/` is read,
//! written in each dialect, and compared member for member with its golden file under
//! `tests/fixtures/written/` (`<fixture>.<dialect>.json`; a 1.0 task also as GetTask answers
//! it, bare: `<fixture>.bare.v1_0.json`).
//!
//! The round-trip tests show that the readers read back what the writer writes; these show
//! that it writes what each dialect spells (member names, tags, enums, the `_mesh` stash),
//! which a lenient reader would read back just the same if it were wrong. After a deliberate
//! change of the output, `MESH_BLESS_WRITTEN=1 cargo test -p mesh-core --test it
//! codec_written` writes the files anew; the diff is the change, for review.

use std::fs;
use std::path::{Path, PathBuf};

use mesh_core::codec::{
    decode_reply, decode_request, encode_error, encode_reply, encode_reply_to, encode_request,
};
use mesh_core::dialect::{Dialect, Method};
use mesh_core::rpc::Reply;
use serde_json::Value;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// The fixtures of `dir`, by file stem, in name order.
fn inputs(dir: &str) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<_> = fs::read_dir(fixtures().join(dir))
        .expect("fixture dir")
        .map(|entry| {
            let path = entry.expect("entry").path();
            let stem = path
                .file_stem()
                .expect("name")
                .to_string_lossy()
                .into_owned();
            (stem, fs::read(&path).expect("read"))
        })
        .collect();
    out.sort();
    out
}

fn tag(d: Dialect) -> &'static str {
    match d {
        Dialect::V0_1 => "v0_1",
        Dialect::V0_3 => "v0_3",
        Dialect::V1_0 => "v1_0",
    }
}

/// Replaces every `messageId` the reader generated (0.1 messages may have none) by a fixed
/// mark: one that does not occur in the fixture's own bytes.
fn mark_generated_ids(value: &mut Value, input: &str) {
    match value {
        Value::Object(object) => {
            for (key, member) in object.iter_mut() {
                match member {
                    Value::String(id) if key == "messageId" && !input.contains(id.as_str()) => {
                        *id = "<generated>".into();
                    }
                    _ => mark_generated_ids(member, input),
                }
            }
        }
        Value::Array(items) => items
            .iter_mut()
            .for_each(|item| mark_generated_ids(item, input)),
        _ => {}
    }
}

/// Compares `written` with the golden file `name`, or writes it when blessing. Returns a
/// line describing the difference, if any.
fn check(name: &str, input: &[u8], written: &[u8], bless: bool) -> Option<String> {
    let path: PathBuf = fixtures().join("written").join(name);
    let mut written: Value = serde_json::from_slice(written).expect("the writer writes JSON");
    mark_generated_ids(&mut written, &String::from_utf8_lossy(input));
    if bless {
        write_pretty(&path, &written);
        return None;
    }
    let golden: Value = match fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).expect("golden file is JSON"),
        Err(_) => return Some(format!("{name}: no golden file (bless to write it)")),
    };
    (golden != written).then(|| format!("{name}:\n  golden:  {golden}\n  written: {written}"))
}

fn write_pretty(path: &Path, value: &Value) {
    let mut text = serde_json::to_string_pretty(value).expect("serializes");
    text.push('\n');
    fs::write(path, text).expect("write golden file");
}

#[test]
fn the_writer_writes_what_the_golden_files_hold() {
    let bless = std::env::var_os("MESH_BLESS_WRITTEN").is_some();
    if bless {
        fs::create_dir_all(fixtures().join("written")).expect("mkdir");
    }
    let mut differences = Vec::new();
    let mut compared = 0;
    for (stem, bytes) in inputs("requests_ok") {
        let request = decode_request(&bytes).unwrap_or_else(|e| panic!("{stem}: {e}"));
        for d in Dialect::ALL {
            let mut request = request.clone();
            request.dialect = d;
            let name = format!("{stem}.{}.json", tag(d));
            differences.extend(check(&name, &bytes, &encode_request(&request), bless));
            compared += 1;
        }
    }
    for (stem, bytes) in inputs("replies_ok") {
        let read_in = match &stem[..4] {
            "v0_1" => Dialect::V0_1,
            "v0_3" => Dialect::V0_3,
            _ => Dialect::V1_0,
        };
        let (id, reply) = decode_reply(&bytes, read_in).unwrap_or_else(|e| panic!("{stem}: {e}"));
        for d in Dialect::ALL {
            let written = match &reply {
                Ok(reply) => encode_reply(d, &id, reply),
                Err(error) => encode_error(d, Some(&id), error),
            };
            let name = format!("{stem}.{}.json", tag(d));
            differences.extend(check(&name, &bytes, &written, bless));
            compared += 1;
        }
        if let Ok(reply @ Reply::Task(_)) = &reply {
            let bare = encode_reply_to(Method::GetTask, Dialect::V1_0, &id, reply);
            differences.extend(check(
                &format!("{stem}.bare.v1_0.json"),
                &bytes,
                &bare,
                bless,
            ));
            compared += 1;
        }
    }
    assert!(compared > 100, "only {compared} outputs compared");
    assert!(
        differences.is_empty(),
        "{} of {compared} outputs differ from their golden files:\n{}",
        differences.len(),
        differences.join("\n")
    );
}

#[test]
fn every_golden_file_belongs_to_a_fixture() {
    let mut expected = std::collections::BTreeSet::new();
    for (stem, _) in inputs("requests_ok")
        .into_iter()
        .chain(inputs("replies_ok"))
    {
        for d in Dialect::ALL {
            expected.insert(format!("{stem}.{}.json", tag(d)));
        }
        expected.insert(format!("{stem}.bare.v1_0.json"));
    }
    for entry in fs::read_dir(fixtures().join("written")).expect("written dir") {
        let name = entry
            .expect("entry")
            .file_name()
            .to_string_lossy()
            .into_owned();
        assert!(
            expected.contains(&name),
            "{name} has no fixture: remove it or bless again"
        );
    }
}
