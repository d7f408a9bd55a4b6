//! Canonical JSON: object keys sorted by their UTF-8 bytes, no whitespace, numbers and strings
//! as serde_json writes them. Whatever feature flags serde_json is built with, the same value
//! always gives the same bytes, so hashes over it are stable.

use serde_json::Value;

/// The canonical encoding of `v`.
pub fn to_string(v: &Value) -> String {
    let mut out = String::new();
    write(v, &mut out);
    out
}

fn write(v: &Value, out: &mut String) {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_unstable();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                if let Some(inner) = map.get(k) {
                    write(inner, out);
                }
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// blake3 of the canonical encoding.
pub fn hash(v: &Value) -> strata_journal::Hash {
    strata_journal::Hash(*blake3::hash(to_string(v).as_bytes()).as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_order_does_not_matter_and_output_is_compact() {
        let a: Value = serde_json::from_str(r#"{"b":1,"a":{"y":[1,2],"x":"é\n"}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{ "a": {"x": "é\n", "y": [1, 2]}, "b": 1 }"#).unwrap();
        assert_eq!(to_string(&a), to_string(&b));
        assert_eq!(to_string(&a), r#"{"a":{"x":"é\n","y":[1,2]},"b":1}"#);
        assert_eq!(hash(&a), hash(&b));
    }
}
