//! The byte-level JSON writer under [`super`], the codec's writer.
//!
//! Member names are literals written as they are (they need no escaping); strings are
//! escaped exactly as `serde_json` escapes them, eight bytes at a time where nothing needs
//! escaping; JSON values (metadata, data parts) and RFC 3339 timestamps are written the same
//! way; numbers and a2a-lf's enums go through `serde_json` into the same buffer. Driving
//! `serde_json`'s `Serializer` through `SerializeMap` instead would escape every member name
//! and run the map's state machine: most of the cost of writing a task that way.

use chrono::{DateTime, Datelike, SecondsFormat, Timelike, Utc};
use serde::Serialize;
use serde_json::Value;

/// A JSON document being written.
pub(crate) struct JsonOut {
    buf: Vec<u8>,
}

impl JsonOut {
    /// An empty document with room for a typical task reply.
    #[cfg(test)]
    pub(crate) fn new() -> JsonOut {
        JsonOut::with_capacity(0)
    }

    /// An empty document with room for a typical task reply, or when `size_hint` says more
    /// for that much bulk and a typical envelope (a JSON-RPC request's `_mesh`, a task's
    /// members) beside it.
    pub(crate) fn with_capacity(size_hint: usize) -> JsonOut {
        const TYPICAL: usize = 1024;
        let capacity = if size_hint < TYPICAL {
            TYPICAL
        } else {
            size_hint.saturating_add(TYPICAL)
        };
        JsonOut {
            buf: Vec::with_capacity(capacity),
        }
    }

    /// The bytes written.
    pub(crate) fn into_bytes(self) -> Vec<u8> {
        self.buf
    }

    /// Writes `text` as it is (JSON punctuation, literals).
    #[inline]
    pub(crate) fn raw(&mut self, text: &str) {
        self.buf.extend_from_slice(text.as_bytes());
    }

    /// Writes `true` or `false`.
    pub(crate) fn bool(&mut self, b: bool) {
        self.raw(if b { "true" } else { "false" });
    }

    /// Writes `null`.
    pub(crate) fn null(&mut self) {
        self.raw("null");
    }

    /// Writes a JSON value (metadata, data parts): member for member what `serde_json`
    /// writes for it, in the map's order.
    pub(crate) fn value(&mut self, v: &Value) {
        match v {
            Value::Null => self.null(),
            Value::Bool(b) => self.bool(*b),
            Value::Number(n) => self.serde(n),
            Value::String(s) => self.str(s),
            Value::Array(items) => self.array(items, JsonOut::value),
            Value::Object(map) => self.map(map),
        }
    }

    /// Writes a map of JSON values (`serde_json::Map` or the model's `HashMap` metadata) as
    /// an object, in the map's iteration order.
    pub(crate) fn map<'a>(&mut self, entries: impl IntoIterator<Item = (&'a String, &'a Value)>) {
        self.buf.push(b'{');
        for (i, (key, v)) in entries.into_iter().enumerate() {
            if i > 0 {
                self.buf.push(b',');
            }
            self.str(key);
            self.buf.push(b':');
            self.value(v);
        }
        self.buf.push(b'}');
    }

    /// Writes a UTC timestamp as an RFC 3339 string, exactly as chrono's
    /// `to_rfc3339_opts(SecondsFormat::AutoSi, true)` writes it (no fraction, or 3, 6 or 9
    /// digits, whichever is exact; `Z`), without going through the formatter.
    pub(crate) fn timestamp(&mut self, t: &DateTime<Utc>) {
        let (year, nanos) = (t.year(), t.nanosecond());
        if !(0..=9999).contains(&year) || nanos >= 1_000_000_000 {
            // Years chrono writes with a sign, and leap seconds: its own formatter.
            return self.str(&t.to_rfc3339_opts(SecondsFormat::AutoSi, true));
        }
        let mut text = [0u8; 32];
        let mut len = 0;
        // Right to left, one division by the constant 10 a digit (a multiply).
        let mut digits = |mut n: u32, width: usize| {
            for slot in text[len..len + width].iter_mut().rev() {
                *slot = b'0' + (n % 10) as u8;
                n /= 10;
            }
            len += width;
        };
        digits(year as u32, 4);
        digits(t.month(), 2);
        digits(t.day(), 2);
        digits(t.hour(), 2);
        digits(t.minute(), 2);
        digits(t.second(), 2);
        let fraction = match nanos {
            0 => None,
            n if n % 1_000_000 == 0 => Some((n / 1_000_000, 3)),
            n if n % 1_000 == 0 => Some((n / 1_000, 6)),
            n => Some((n, 9)),
        };
        if let Some((n, width)) = fraction {
            digits(n, width);
        }
        // text: YYYYMMDDhhmmss[fraction]; punctuate it on the way out.
        let t = &text[..len];
        self.buf.push(b'"');
        self.buf.extend_from_slice(&t[0..4]);
        self.buf.push(b'-');
        self.buf.extend_from_slice(&t[4..6]);
        self.buf.push(b'-');
        self.buf.extend_from_slice(&t[6..8]);
        self.buf.push(b'T');
        self.buf.extend_from_slice(&t[8..10]);
        self.buf.push(b':');
        self.buf.extend_from_slice(&t[10..12]);
        self.buf.push(b':');
        self.buf.extend_from_slice(&t[12..14]);
        if len > 14 {
            self.buf.push(b'.');
            self.buf.extend_from_slice(&t[14..]);
        }
        self.buf.extend_from_slice(b"Z\"");
    }

    /// Writes `value` with `serde_json` (`null` if it cannot be written, which none of the
    /// model's values can fail at).
    pub(crate) fn serde<T: Serialize + ?Sized>(&mut self, value: &T) {
        let start = self.buf.len();
        if serde_json::to_writer(&mut self.buf, value).is_err() {
            self.buf.truncate(start);
            self.null();
        }
    }

    /// Starts an object; write its members with [`Obj::key`] and close it with [`Obj::end`].
    #[inline]
    pub(crate) fn obj(&mut self) -> Obj<'_> {
        self.buf.push(b'{');
        Obj {
            out: self,
            first: true,
        }
    }

    /// Writes `items` as an array, each with `write`.
    pub(crate) fn array<T>(&mut self, items: &[T], mut write: impl FnMut(&mut JsonOut, &T)) {
        self.buf.push(b'[');
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                self.buf.push(b',');
            }
            write(self, item);
        }
        self.buf.push(b']');
    }

    /// Writes `bytes` as a JSON string of their standard base64 (padded; nothing in it
    /// needs escaping), encoded straight into the document rather than into a string first.
    pub(crate) fn base64(&mut self, bytes: &[u8]) {
        use base64::Engine;
        let len = base64::encoded_len(bytes.len(), true).unwrap_or(0);
        self.buf.reserve(len + 2);
        self.buf.push(b'"');
        let start = self.buf.len();
        self.buf.resize(start + len, 0);
        let written = base64::engine::general_purpose::STANDARD
            .encode_slice(bytes, &mut self.buf[start..])
            .unwrap_or(0);
        self.buf.truncate(start + written);
        self.buf.push(b'"');
    }

    /// Writes `s` as a JSON string, escaped as `serde_json` escapes it: `"` and `\`, the
    /// short forms `\b \t \n \f \r`, other control characters as `\u00xx`; nothing else.
    pub(crate) fn str(&mut self, s: &str) {
        let bytes = s.as_bytes();
        self.buf.reserve(bytes.len() + 2);
        self.buf.push(b'"');
        let clean = clean_prefix(bytes);
        if clean == bytes.len() {
            self.buf.extend_from_slice(bytes);
        } else {
            self.escape_from(bytes, clean);
        }
        self.buf.push(b'"');
    }

    /// Writes `bytes`, the first `from` of which need no escaping, escaping the rest.
    #[cold]
    fn escape_from(&mut self, bytes: &[u8], from: usize) {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut run = 0;
        for (i, &b) in bytes.iter().enumerate().skip(from) {
            let short = match b {
                b'"' => b'"',
                b'\\' => b'\\',
                0x08 => b'b',
                0x09 => b't',
                0x0A => b'n',
                0x0C => b'f',
                0x0D => b'r',
                0x00..=0x1F => 0,
                _ => continue,
            };
            self.buf.extend_from_slice(&bytes[run..i]);
            run = i + 1;
            if short != 0 {
                self.buf.extend_from_slice(&[b'\\', short]);
            } else {
                let hex = [HEX[usize::from(b >> 4)], HEX[usize::from(b & 0xF)]];
                self.buf.extend_from_slice(b"\\u00");
                self.buf.extend_from_slice(&hex);
            }
        }
        self.buf.extend_from_slice(&bytes[run..]);
    }
}

/// How many leading bytes of `bytes` need no escaping, found eight at a time (a lower bound
/// is enough: the byte-wise escaper takes over from there).
#[inline]
fn clean_prefix(bytes: &[u8]) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let mut i = 0;
    while let Some(chunk) = bytes.get(i..i + 8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let w = u64::from_le_bytes(word);
        // A byte below 0x20, or equal to `"` or `\` (exact as a whole-word test).
        let control = w.wrapping_sub(ONES * 0x20) & !w;
        let quote =
            (w ^ (ONES * u64::from(b'"'))).wrapping_sub(ONES) & !(w ^ (ONES * u64::from(b'"')));
        let slash =
            (w ^ (ONES * u64::from(b'\\'))).wrapping_sub(ONES) & !(w ^ (ONES * u64::from(b'\\')));
        if (control | quote | slash) & HIGH != 0 {
            return i;
        }
        i += 8;
    }
    while let Some(&b) = bytes.get(i) {
        if b < 0x20 || b == b'"' || b == b'\\' {
            return i;
        }
        i += 1;
    }
    i
}

/// An object being written.
pub(crate) struct Obj<'a> {
    out: &'a mut JsonOut,
    first: bool,
}

impl Obj<'_> {
    /// Starts the member `name` (a literal that needs no escaping) and returns the writer for
    /// its value, which the caller must write next. Inlined, so that the literal's length is
    /// known and its copy needs no call.
    #[inline(always)]
    pub(crate) fn key(&mut self, name: &str) -> &mut JsonOut {
        debug_assert!(clean_prefix(name.as_bytes()) == name.len());
        let buf = &mut self.out.buf;
        if self.first {
            self.first = false;
            buf.push(b'"');
        } else {
            buf.extend_from_slice(b",\"");
        }
        buf.extend_from_slice(name.as_bytes());
        buf.extend_from_slice(b"\":");
        self.out
    }

    /// Starts the member `name` (any string: escaped as needed) and returns the writer for
    /// its value.
    pub(crate) fn entry(&mut self, name: &str) -> &mut JsonOut {
        if self.first {
            self.first = false;
        } else {
            self.out.buf.push(b',');
        }
        self.out.str(name);
        self.out.buf.push(b':');
        self.out
    }

    /// Closes the object.
    #[inline]
    pub(crate) fn end(self) {
        self.out.buf.push(b'}');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(s: &str) -> Vec<u8> {
        let mut out = JsonOut::new();
        out.str(s);
        out.into_bytes()
    }

    #[test]
    fn base64_is_written_as_the_engine_encodes_it() {
        use base64::Engine;
        for len in [0, 1, 2, 3, 4, 1000, 1001] {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 7 % 256) as u8).collect();
            let mut out = JsonOut::new();
            out.base64(&bytes);
            let expected = format!(
                "\"{}\"",
                base64::engine::general_purpose::STANDARD.encode(&bytes)
            );
            assert_eq!(out.into_bytes(), expected.as_bytes(), "{len}");
        }
    }

    #[test]
    fn entry_names_are_escaped_and_mix_with_literal_keys() {
        let mut out = JsonOut::new();
        let mut o = out.obj();
        o.entry("a\"b\n").bool(true);
        o.key("k").null();
        o.entry("é").raw("1");
        o.end();
        let text = String::from_utf8(out.into_bytes()).unwrap();
        let expected = serde_json::json!({"a\"b\n": true, "k": null, "é": 1});
        assert_eq!(
            serde_json::from_str::<Value>(&text).unwrap(),
            expected,
            "{text}"
        );
        assert_eq!(text, r#"{"a\"b\n":true,"k":null,"é":1}"#);
    }

    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them() {
        // Every ASCII character and a few multi-byte ones, at every offset of a 20-byte
        // string, so that each lands in the eight-byte scan and in the byte-wise tail.
        let mut specials: Vec<char> = (0u8..0x80).map(char::from).collect();
        specials.extend(['é', '€', '😀', '\u{2028}', '\u{7f}']);
        for c in specials {
            for at in 0..20 {
                let mut s: String = "abcdefghijklmnopqrst".chars().take(at).collect();
                s.push(c);
                s.push_str("uvwxyz0123456789");
                assert_eq!(
                    written(&s),
                    serde_json::to_vec(&s).unwrap(),
                    "{c:?} at {at}"
                );
            }
        }
        for s in ["", "\"", "\\\\", "\u{0}\u{1f}", "x\ny\"z\\"] {
            assert_eq!(written(s), serde_json::to_vec(s).unwrap(), "{s:?}");
        }
    }

    #[test]
    fn values_are_written_as_serde_json_writes_them() {
        let v = serde_json::json!({
            "a": [1, -2, 3.5, 1e300, u64::MAX, null, true, false, "x\"y\n"],
            "b": {"": {}, "c": [], "é\u{1}": "\\"},
            "n": i64::MIN,
        });
        let mut out = JsonOut::new();
        out.value(&v);
        assert_eq!(out.into_bytes(), serde_json::to_vec(&v).unwrap());
    }

    #[test]
    fn timestamps_are_written_as_chrono_writes_them() {
        use chrono::TimeZone;
        let seconds = [
            0,
            1,
            59,
            951_782_400,
            1_795_418_330,
            253_402_300_799,
            -1,
            -62_135_596_800,
        ];
        let nanos = [
            0,
            1,
            999,
            1_000,
            120_000,
            5_000_000,
            123_456_789,
            999_999_999,
            1_500_000_000,
        ];
        for s in seconds {
            for n in nanos {
                let Some(t) = Utc.timestamp_opt(s, n).single() else {
                    continue;
                };
                let mut out = JsonOut::new();
                out.timestamp(&t);
                let expected = serde_json::to_vec(&t.to_rfc3339_opts(SecondsFormat::AutoSi, true));
                assert_eq!(out.into_bytes(), expected.unwrap(), "{s} {n}");
            }
        }
        let far = Utc.with_ymd_and_hms(12_345, 1, 2, 3, 4, 5).unwrap();
        let mut out = JsonOut::new();
        out.timestamp(&far);
        let expected = serde_json::to_vec(&far.to_rfc3339_opts(SecondsFormat::AutoSi, true));
        assert_eq!(out.into_bytes(), expected.unwrap());
    }

    #[test]
    fn objects_and_arrays_are_punctuated() {
        let mut out = JsonOut::new();
        let mut o = out.obj();
        o.key("a").str("x");
        o.key("b").array(&[1, 2, 3], |w, n| w.serde(n));
        o.key("c").obj().end();
        o.key("d").array::<u8>(&[], |_, _| {});
        o.key("e").bool(false);
        o.key("f").null();
        o.end();
        assert_eq!(
            String::from_utf8(out.into_bytes()).unwrap(),
            r#"{"a":"x","b":[1,2,3],"c":{},"d":[],"e":false,"f":null}"#
        );
    }
}
