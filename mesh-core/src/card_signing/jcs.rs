//! RFC 8785, the JSON Canonicalization Scheme: one byte string per JSON value, so that a
//! signature over it survives any re-serialization of the value.
//!
//! - Object members are sorted by their names' UTF-16 code units (RFC 8785 §3.2.3).
//! - Strings are written as UTF-8 with the minimal escaping of §3.2.2.2: `"` and `\`, the
//!   short forms `\b \t \n \f \r`, and `\u00xx` (lowercase) for the other control
//!   characters; everything else (`/`, DEL, non-ASCII) is written as it is.
//! - Numbers are IEEE 754 doubles written as ECMAScript's `Number.prototype.toString` does
//!   (§3.2.2.3): the shortest digits that read back to the same double, in plain notation
//!   from 1e-6 to 1e21 and in exponent notation (`1e+21`, `1.5e-7`) outside it; `-0` is `0`.
//!   An integer beyond 2^53 is written as the double nearest to it, as a JavaScript
//!   reader would see it.
//! - No whitespace.
//!
//! Nesting is bounded ([`MAX_DEPTH`]): the writer recurses once per level.

use serde_json::Value;
use std::fmt::Write as _;

/// The deepest nesting of arrays and objects written; deeper values are refused.
pub const MAX_DEPTH: usize = 128;

/// Why a value has no canonical form here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("JSON nested deeper than {MAX_DEPTH} levels has no canonical form here")]
pub struct TooDeep;

/// The canonical form of `value`.
pub fn canonicalize(value: &Value) -> Result<Vec<u8>, TooDeep> {
    let mut out = String::with_capacity(256);
    write_value(&mut out, value, 0)?;
    Ok(out.into_bytes())
}

fn write_value(out: &mut String, value: &Value, depth: usize) -> Result<(), TooDeep> {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => match n.as_f64() {
            Some(f) => write_number(out, f),
            None => out.push_str("null"), // not reachable without arbitrary_precision
        },
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            if depth >= MAX_DEPTH {
                return Err(TooDeep);
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item, depth + 1)?;
            }
            out.push(']');
        }
        Value::Object(members) => {
            if depth >= MAX_DEPTH {
                return Err(TooDeep);
            }
            let mut sorted: Vec<(&String, &Value)> = members.iter().collect();
            sorted.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
            out.push('{');
            for (i, (name, member)) in sorted.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, name);
                out.push(':');
                write_value(out, member, depth + 1)?;
            }
            out.push('}');
        }
    }
    Ok(())
}

fn write_string(out: &mut String, s: &str) {
    out.push('"');
    let mut plain_from = 0;
    for (i, c) in s.char_indices() {
        let escape = match c {
            '"' => "\\\"",
            '\\' => "\\\\",
            '\u{8}' => "\\b",
            '\t' => "\\t",
            '\n' => "\\n",
            '\u{c}' => "\\f",
            '\r' => "\\r",
            c if c < ' ' => "",
            _ => continue,
        };
        out.push_str(&s[plain_from..i]);
        if escape.is_empty() {
            let _ = write!(out, "\\u{:04x}", c as u32);
        } else {
            out.push_str(escape);
        }
        plain_from = i + c.len_utf8();
    }
    out.push_str(&s[plain_from..]);
    out.push('"');
}

/// ECMAScript's Number::toString for a finite double (ECMA-262 §7.1.12.1).
fn write_number(out: &mut String, value: f64) {
    if value == 0.0 || !value.is_finite() {
        // -0 is written 0; JSON has no NaN or infinity, so they cannot reach here.
        out.push('0');
        return;
    }
    if value < 0.0 {
        out.push('-');
    }
    let (digits, n) = shortest_digits(value.abs());
    let k = digits.len() as i64;
    if k <= n && n <= 21 {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n('0', (n - k) as usize));
    } else if 0 < n && n <= 21 {
        let (int, frac) = digits.split_at(n as usize);
        out.push_str(int);
        out.push('.');
        out.push_str(frac);
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', (-n) as usize));
        out.push_str(&digits);
    } else {
        let (first, rest) = digits.split_at(1);
        out.push_str(first);
        if !rest.is_empty() {
            out.push('.');
            out.push_str(rest);
        }
        let e = n - 1;
        let _ = write!(out, "e{}{}", if e < 0 { '-' } else { '+' }, e.abs());
    }
}

/// The digits `s` and the exponent `n` of ECMAScript's Number::toString (value = 0.s × 10^n):
/// the fewest digits that read back to the same double; of two such, the one nearer the
/// double; of two equally near, the one whose last digit is even.
fn shortest_digits(value: f64) -> (String, i64) {
    // Rust's `{:e}` writes the fewest digits that read back, the nearer of two, but breaks
    // an exact tie the other way: such a tie is found in the exact expansion (at most 767
    // significant digits) and broken toward the even digit.
    let (digits, exponent) = split_scientific(&format!("{value:e}"));
    let (exact, exact_exponent) = split_scientific(&format!("{value:.767e}"));
    let exact = exact.trim_end_matches('0');
    let k = digits.len();
    if exact.len() == k + 1 && exact.ends_with('5') {
        let low = &exact[..k];
        if low.as_bytes()[k - 1] % 2 == 0 {
            return (low.trim_end_matches('0').to_owned(), exact_exponent + 1);
        }
        return increment(low, exact_exponent + 1);
    }
    (digits, exponent + 1)
}

/// `d[.ddd]e<exp>` → (`dddd`, exp).
fn split_scientific(text: &str) -> (String, i64) {
    let (mantissa, exponent) = text.split_once('e').unwrap_or((text, "0"));
    let digits = mantissa.chars().filter(char::is_ascii_digit).collect();
    (digits, exponent.parse().unwrap_or(0))
}

/// The digits one unit in the last place above `digits` (0.digits × 10^n), without trailing
/// zeros, and their exponent.
fn increment(digits: &str, n: i64) -> (String, i64) {
    let mut bytes = digits.as_bytes().to_vec();
    for i in (0..bytes.len()).rev() {
        if bytes[i] == b'9' {
            bytes[i] = b'0';
        } else {
            bytes[i] += 1;
            let text = String::from_utf8(bytes).unwrap_or_default();
            return (text.trim_end_matches('0').to_owned(), n);
        }
    }
    ("1".to_owned(), n + 1) // all nines: 0.999… rounds up to 0.1 × 10^(n+1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn number(bits: u64) -> String {
        let mut out = String::new();
        write_number(&mut out, f64::from_bits(bits));
        out
    }

    /// RFC 8785, Appendix B: IEEE 754 doubles and their canonical forms.
    #[test]
    fn numbers_as_rfc_8785_appendix_b_writes_them() {
        for (bits, expected) in [
            (0x0000000000000000, "0"),
            (0x8000000000000000, "0"),
            (0x0000000000000001, "5e-324"),
            (0x8000000000000001, "-5e-324"),
            (0x7fefffffffffffff, "1.7976931348623157e+308"),
            (0xffefffffffffffff, "-1.7976931348623157e+308"),
            (0x4340000000000000, "9007199254740992"),
            (0xc340000000000000, "-9007199254740992"),
            (0x4430000000000000, "295147905179352830000"),
            (0x44b52d02c7e14af5, "9.999999999999997e+22"),
            (0x44b52d02c7e14af6, "1e+23"),
            (0x44b52d02c7e14af7, "1.0000000000000001e+23"),
            (0x444b1ae4d6e2ef4e, "999999999999999700000"),
            (0x444b1ae4d6e2ef4f, "999999999999999900000"),
            (0x444b1ae4d6e2ef50, "1e+21"),
            (0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"),
            (0x3eb0c6f7a0b5ed8d, "0.000001"),
            (0x41b3de4355555553, "333333333.3333332"),
            (0x41b3de4355555554, "333333333.33333325"),
            (0x41b3de4355555555, "333333333.3333333"),
            (0x41b3de4355555556, "333333333.3333334"),
            (0x41b3de4355555557, "333333333.33333343"),
            (0xbecbf647612f3696, "-0.0000033333333333333333"),
            (0x43143ff3c1cb0959, "1424953923781206.2"),
        ] {
            assert_eq!(number(bits), expected, "{bits:#018x}");
        }
    }

    /// RFC 8785 §3.2.2: the example of the canonical form of a whole object.
    #[test]
    fn the_rfc_8785_example() {
        let input: Value = serde_json::from_str(
            r#"{
              "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
              "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
              "literals": [null, true, false]
            }"#,
        )
        .unwrap();
        let expected = concat!(
            r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"#,
            r#""string":"€$\u000f\nA'B\"\\\\\"/"}"#
        );
        assert_eq!(
            String::from_utf8(canonicalize(&input).unwrap()).unwrap(),
            expected
        );
    }

    /// RFC 8785 §3.2.3: members sorted by UTF-16 code units, not by code points or UTF-8.
    #[test]
    fn the_rfc_8785_sorting_example() {
        let input: Value = serde_json::from_str(
            r#"{
              "\u20ac": "Euro Sign",
              "\r": "Carriage Return",
              "\ufb33": "Hebrew Letter Dalet With Dagesh",
              "1": "One",
              "\ud83d\ude00": "Emoji: Grinning Face",
              "\u0080": "Control",
              "\u00f6": "Latin Small Letter O With Diaeresis"
            }"#,
        )
        .unwrap();
        let canonical = String::from_utf8(canonicalize(&input).unwrap()).unwrap();
        let order: Vec<&str> = canonical
            .split("\":\"")
            .skip(1)
            .map(|s| s.split('"').next().unwrap())
            .collect();
        assert_eq!(
            order,
            [
                "Carriage Return",
                "One",
                "Control",
                "Latin Small Letter O With Diaeresis",
                "Euro Sign",
                "Emoji: Grinning Face",
                "Hebrew Letter Dalet With Dagesh",
            ]
        );
    }

    /// Exact ties between two shortest forms go to the even digit, as in ECMAScript.
    #[test]
    fn ties_go_to_the_even_digit() {
        let mut out = String::new();
        for (value, expected) in [
            (0.5, "0.5"),
            (2.5, "2.5"),
            // 1424953923781206.25, exactly halfway between …06.2 and …06.3.
            (f64::from_bits(0x43143ff3c1cb0959), "1424953923781206.2"),
        ] {
            out.clear();
            write_number(&mut out, value);
            assert_eq!(out, expected);
        }
        assert_eq!(increment("19", 2), ("2".to_owned(), 2));
        assert_eq!(increment("99", 2), ("1".to_owned(), 3));
    }

    #[test]
    fn integers_and_nesting() {
        let value = json!({"b": [1, -2, 0, 9007199254740993u64], "a": {"z": {}, "y": []}});
        assert_eq!(
            canonicalize(&value).unwrap(),
            br#"{"a":{"y":[],"z":{}},"b":[1,-2,0,9007199254740992]}"#
        );
        let mut deep = json!(1);
        for _ in 0..=MAX_DEPTH {
            deep = json!([deep]);
        }
        assert_eq!(canonicalize(&deep), Err(TooDeep));
    }
}
