//! The reference runtime's canonical JSON, byte for byte: object keys sorted by UTF-16 code
//! units, compact output, strings and numbers exactly as JavaScript's `JSON.stringify` writes
//! them. The capsule hash (`sha256:` over these bytes) must match what the reference computes,
//! so this is not [`crate::canonical`] (which sorts by UTF-8 bytes and formats numbers as
//! serde_json does).

use std::cmp::Ordering;
use std::fmt::Write as _;

use serde_json::{Number, Value};

pub use crate::ce::digest::{sha256_hex, sha256_tagged};

/// The canonical encoding of `v`.
pub fn to_string(v: &Value) -> String {
    let mut out = String::with_capacity(4096);
    write(v, None, &mut out);
    out
}

/// The canonical encoding of `v` with every object key `skip` left out, at any depth.
pub fn to_string_without(v: &Value, skip: &str) -> String {
    let mut out = String::with_capacity(4096);
    write(v, Some(skip), &mut out);
    out
}

/// JavaScript's default string sort: by UTF-16 code units.
pub fn utf16_cmp(a: &str, b: &str) -> Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

fn write(v: &Value, skip: Option<&str>, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(n, out),
        Value::String(s) => write_str(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(item, skip, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let entries = map.iter().filter(|(k, _)| Some(k.as_str()) != skip);
            // The map iterates in code point order, which is UTF-16 order unless a key holds a
            // character from U+E000 up (a supplementary character sorts below those in UTF-16).
            let plain = map.keys().all(|k| k.is_ascii() || k.chars().all(|c| c < '\u{E000}'));
            out.push('{');
            let mut first = true;
            let mut put = |(k, inner): (&String, &Value), out: &mut String| {
                if !std::mem::take(&mut first) {
                    out.push(',');
                }
                write_str(k, out);
                out.push(':');
                write(inner, skip, out);
            };
            if plain {
                entries.for_each(|e| put(e, out));
            } else {
                let mut sorted: Vec<(&String, &Value)> = entries.collect();
                sorted.sort_by(|a, b| utf16_cmp(a.0, b.0));
                sorted.into_iter().for_each(|e| put(e, out));
            }
            out.push('}');
        }
    }
}

/// `JSON.stringify` of a string: `"` and `\` escaped, the five short escapes, other control
/// characters below U+0020 as `\u00xx`; everything else (DEL, U+2028, non-ASCII) raw.
fn write_str(s: &str, out: &mut String) {
    out.reserve(s.len() + 2);
    out.push('"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0..0x20 => "",
            _ => continue,
        };
        out.push_str(&s[start..i]);
        if escape.is_empty() {
            let _ = write!(out, "\\u{:04x}", b);
        } else {
            out.push_str(escape);
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

/// Integers up to 2^53 print as themselves; anything else goes through an f64 as JavaScript
/// would have parsed it.
fn write_number(n: &Number, out: &mut String) {
    const SAFE: u64 = 1 << 53;
    if let Some(u) = n.as_u64()
        && u <= SAFE
    {
        let _ = write!(out, "{u}");
    } else if let Some(i) = n.as_i64()
        && i.unsigned_abs() <= SAFE
    {
        let _ = write!(out, "{i}");
    } else {
        write_f64(n.as_f64().unwrap_or(0.0), out);
    }
}

/// ECMAScript `Number::toString` for a finite double.
pub fn write_f64(x: f64, out: &mut String) {
    if x == 0.0 || !x.is_finite() {
        // -0 prints as 0; JSON has no NaN or infinity (JSON.stringify writes null).
        out.push_str(if x.is_finite() { "0" } else { "null" });
        return;
    }
    if x < 0.0 {
        out.push('-');
    }
    // Rust's `{:e}` is the shortest round-trip form: "d.ddde±x".
    let sci = format!("{:e}", x.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let k = digits.len() as i64;
    let n = exp.parse::<i64>().unwrap_or(0) + 1;
    if k <= n && n <= 21 {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n('0', (n - k) as usize));
    } else if 0 < n && n <= 21 {
        out.push_str(&digits[..n as usize]);
        out.push('.');
        out.push_str(&digits[n as usize..]);
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', (-n) as usize));
        out.push_str(&digits);
    } else {
        out.push_str(&digits[..1]);
        if k > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let e = n - 1;
        let _ = write!(out, "e{}{}", if e < 0 { '-' } else { '+' }, e.abs());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn js(x: f64) -> String {
        let mut s = String::new();
        write_f64(x, &mut s);
        s
    }

    #[test]
    fn numbers_print_as_javascript_prints_them() {
        // Expected values are what `String(x)` gives in Node 20.
        let cases = [
            (1.0, "1"),
            (-0.0, "0"),
            (1e21, "1e+21"),
            (1e20, "100000000000000000000"),
            (123.456, "123.456"),
            (0.000001, "0.000001"),
            (1.5e-7, "1.5e-7"),
            (0.1 + 0.2, "0.30000000000000004"),
            (-2.5e-10, "-2.5e-10"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (5e-324, "5e-324"),
            (12345678901234567890.0, "12345678901234567000"),
        ];
        for (x, want) in cases {
            assert_eq!(js(x), want, "{x:e}");
        }
    }

    #[test]
    fn keys_sort_by_utf16_and_strings_escape_as_json_stringify() {
        // U+1F600 sorts after U+FF5E in UTF-8 order but before it in UTF-16 (surrogate D83D);
        // the expected bytes are Node 20's.
        let v: Value =
            serde_json::from_str(r#"{"😀":1,"～":2,"b":[1.0,-0.0,"\u0001\u007f\u2028é"],"a":null}"#).unwrap();
        assert_eq!(to_string(&v), "{\"a\":null,\"b\":[1,0,\"\\u0001\u{7f}\u{2028}é\"],\"😀\":1,\"～\":2}");
    }

    #[test]
    fn skipping_a_key_drops_it_at_every_depth() {
        let v: Value = serde_json::from_str(r#"{"capsule_hash":"x","a":{"capsule_hash":1,"b":2}}"#).unwrap();
        assert_eq!(to_string_without(&v, "capsule_hash"), r#"{"a":{"b":2}}"#);
        assert_eq!(sha256_tagged(b"abc"), "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }
}
