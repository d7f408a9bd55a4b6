//! Typed reading of request facts. The reference runtime reads facts with JavaScript
//! truthiness and silently treats a wrong type as absent; strata accepts a fact's own type or
//! `null` (= absent) and rejects anything else with a specific code, naming the field.

use serde_json::{Map, Value};

use crate::ce::error::{CeError, Code, fail};

/// One object of the request, with its dotted location for error details.
#[derive(Clone, Copy)]
pub struct Obj<'a> {
    map: &'a Map<String, Value>,
    /// Where the object is; a nested object adds its key (allocated only for an error detail).
    at: &'a str,
    sub: Option<&'a str>,
}

/// A location `at.key`, for details.
fn path(at: &str, key: &str) -> String {
    if at.is_empty() { key.to_owned() } else { format!("{at}.{key}") }
}

impl<'a> Obj<'a> {
    /// `v` as an object, or `code` naming `at`.
    pub fn of(v: &'a Value, at: &'a str, code: Code) -> Result<Obj<'a>, CeError> {
        match v {
            Value::Object(map) => Ok(Obj { map, at, sub: None }),
            _ => fail(code, format!("{}: must be an object", if at.is_empty() { "request" } else { at })),
        }
    }

    /// The raw value of `key`, `None` when absent or null.
    pub fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    /// Whether `key` is present at all (even as null).
    pub fn has(&self, key: &str) -> bool {
        self.map.contains_key(key)
    }

    /// The underlying map.
    pub fn map(&self) -> &'a Map<String, Value> {
        self.map
    }

    /// Where this object is, for details.
    pub fn at(&self) -> String {
        match self.sub {
            None => self.at.to_owned(),
            Some(sub) => path(self.at, sub),
        }
    }

    /// The location of `key` in this object.
    pub fn path(&self, key: &str) -> String {
        path(&self.at(), key)
    }

    /// A boolean fact; absent or null is `None`.
    pub fn flag(&self, key: &str) -> Result<Option<bool>, CeError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(_) => fail(Code::InvalidFact, format!("{}: must be true, false or null", self.path(key))),
        }
    }

    /// `flag(key) == Some(true)`.
    pub fn is_true(&self, key: &str) -> Result<bool, CeError> {
        Ok(self.flag(key)? == Some(true))
    }

    /// A string fact; absent or null is `None`.
    pub fn string(&self, key: &str) -> Result<Option<&'a str>, CeError> {
        self.string_or(key, Code::InvalidFact)
    }

    /// A string fact whose wrong type is `code`.
    pub fn string_or(&self, key: &str, code: Code) -> Result<Option<&'a str>, CeError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => fail(code, format!("{}: must be a string or null", self.path(key))),
        }
    }

    /// A whole, non-negative count (`2.0` counts, as in JavaScript); absent or null is `None`.
    pub fn count(&self, key: &str, code: Code) -> Result<Option<u64>, CeError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Number(n)) => {
                if let Some(u) = n.as_u64() {
                    return Ok(Some(u));
                }
                match n.as_f64() {
                    Some(f) if f >= 0.0 && f.fract() == 0.0 && f < 9.007_199_254_740_992e15 => Ok(Some(f as u64)),
                    _ => fail(code, format!("{}: must be a whole number ≥ 0", self.path(key))),
                }
            }
            Some(_) => fail(code, format!("{}: must be a whole number ≥ 0", self.path(key))),
        }
    }

    /// A finite number; absent or null is `None`.
    pub fn number(&self, key: &str, code: Code) -> Result<Option<f64>, CeError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Number(n)) => Ok(n.as_f64()),
            Some(_) => fail(code, format!("{}: must be a number or null", self.path(key))),
        }
    }

    /// A nested object; absent or null is `None`.
    pub fn object(&self, key: &str) -> Result<Option<Obj<'a>>, CeError> {
        self.object_or(key, Code::InvalidFact)
    }

    /// A nested object whose wrong type is `code`.
    pub fn object_or(&self, key: &str, code: Code) -> Result<Option<Obj<'a>>, CeError> {
        match self.map.get_key_value(key) {
            None | Some((_, Value::Null)) => Ok(None),
            // One level of nesting is named exactly; deeper levels keep the innermost key.
            Some((k, Value::Object(map))) => Ok(Some(Obj { map, at: self.sub.unwrap_or(self.at), sub: Some(k) })),
            Some(_) => fail(code, format!("{}: must be an object or null", self.path(key))),
        }
    }

    /// An array; absent or null is empty; another type is `code`.
    pub fn array(&self, key: &str, code: Code) -> Result<&'a [Value], CeError> {
        match self.get(key) {
            None => Ok(&[]),
            Some(Value::Array(items)) => Ok(items),
            Some(_) => fail(code, format!("{}: must be an array", self.path(key))),
        }
    }

    /// An array of strings; absent or null is empty; another type is `code`.
    pub fn strings(&self, key: &str, code: Code) -> Result<Vec<&'a str>, CeError> {
        let mut out = Vec::new();
        self.each_string(key, code, |s| {
            out.push(s);
            Ok(())
        })?;
        Ok(out)
    }

    /// Calls `f` on each string of the array `key` (absent or null is empty; another type, or a
    /// non-string item, is `code`), without collecting them.
    pub fn each_string(
        &self,
        key: &str,
        code: Code,
        mut f: impl FnMut(&'a str) -> Result<(), CeError>,
    ) -> Result<(), CeError> {
        for v in self.array(key, code)? {
            match v {
                Value::String(s) => f(s)?,
                _ => return fail(code, format!("{}: every item must be a string", self.path(key))),
            }
        }
        Ok(())
    }
}
