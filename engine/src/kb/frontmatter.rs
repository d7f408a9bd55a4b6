//! Markdown with YAML front matter, and the YAML subset strata accepts.
//!
//! A file starts with a `---` line, then YAML, then a `---` (or `...`) line; everything after is
//! the body. The YAML must be one mapping with string keys; values may be strings, integers,
//! finite floats, booleans, null, lists and mappings, nested at most [`DEPTH_MAX`] deep. Anchors,
//! aliases, tags that change a scalar's type and several documents are refused: front matter is
//! data, not a program.

use serde_json::{Map, Number, Value};
use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::Marker;
use yaml_rust2::{Yaml, YamlLoader};

/// Records the line of the first anchor or alias (0-based, relative to the front matter).
struct NoAnchors(Option<usize>);

impl MarkedEventReceiver for NoAnchors {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        let anchored = match ev {
            Event::Alias(_) => true,
            Event::Scalar(_, _, anchor, _) | Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                anchor != 0
            }
            _ => false,
        };
        if anchored && self.0.is_none() {
            self.0 = Some(mark.line());
        }
    }
}

/// Largest front matter block, in bytes.
pub const FRONT_MATTER_BYTES_MAX: usize = 64 * 1024;
/// Deepest nesting of lists and mappings.
pub const DEPTH_MAX: usize = 16;

/// A front matter problem, with a 1-based line when known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrontMatterError {
    /// 1-based line in the file, when known.
    pub line: Option<usize>,
    /// What is wrong.
    pub detail: String,
    /// What to do.
    pub hint: &'static str,
}

/// Splits a Markdown file into its front matter (as JSON) and its body.
pub fn split(text: &str) -> Result<(Map<String, Value>, String), FrontMatterError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split_inclusive('\n');
    let first = lines.next().unwrap_or("");
    if first.trim_end() != "---" {
        return Err(FrontMatterError {
            line: Some(1),
            detail: "the file does not start with a `---` front matter line".into(),
            hint: "start the file with `---`, the artifact's fields in YAML, then `---`",
        });
    }
    let mut yaml_len = 0usize;
    let mut end = None;
    let mut line_no = 1usize;
    let mut offset = first.len();
    for line in lines {
        line_no += 1;
        let t = line.trim_end();
        if t == "---" || t == "..." {
            end = Some((offset, offset + line.len()));
            break;
        }
        yaml_len += line.len();
        offset += line.len();
    }
    let Some((yaml_end, body_start)) = end else {
        return Err(FrontMatterError {
            line: Some(line_no),
            detail: "the front matter has no closing `---` line".into(),
            hint: "end the front matter with a line containing only `---`",
        });
    };
    if yaml_len > FRONT_MATTER_BYTES_MAX {
        return Err(FrontMatterError {
            line: Some(1),
            detail: format!("front matter is {yaml_len} bytes; at most {FRONT_MATTER_BYTES_MAX}"),
            hint: "keep large content in the body, not the front matter",
        });
    }
    let yaml = &text[first.len()..yaml_end];
    // The loader resolves aliases silently, so look for anchors and aliases in the event stream
    // first: front matter is plain data.
    let mut guard = NoAnchors(None);
    let mut parser = Parser::new_from_str(yaml);
    if parser.load(&mut guard, true).is_ok()
        && let Some(line) = guard.0
    {
        return Err(FrontMatterError {
            line: Some(line + 1),
            detail: "YAML anchors and aliases are not accepted in front matter".into(),
            hint: YAML_HINT,
        });
    }
    let docs = YamlLoader::load_from_str(yaml).map_err(|e| FrontMatterError {
        line: Some(e.marker().line() + 1),
        detail: format!("YAML does not parse: {}", e.info()),
        hint: "check indentation, quoting and `key: value` pairs",
    })?;
    let doc = match docs.as_slice() {
        [] => Yaml::Hash(Default::default()),
        [d] => d.clone(),
        _ => {
            return Err(FrontMatterError {
                line: None,
                detail: "the front matter holds several YAML documents".into(),
                hint: "use one mapping between the `---` lines",
            });
        }
    };
    let value = to_json(&doc, 0).map_err(|detail| FrontMatterError { line: None, detail, hint: YAML_HINT })?;
    let Value::Object(map) = value else {
        return Err(FrontMatterError {
            line: Some(2),
            detail: "the front matter is not a mapping of `key: value` pairs".into(),
            hint: "write the fields as `key: value` lines",
        });
    };
    let body = text[body_start..].strip_prefix('\n').unwrap_or(&text[body_start..]);
    Ok((map, body.to_owned()))
}

const YAML_HINT: &str = "use plain YAML scalars, lists and mappings";

fn to_json(y: &Yaml, depth: usize) -> Result<Value, String> {
    if depth > DEPTH_MAX {
        return Err(format!("YAML is nested more than {DEPTH_MAX} levels deep"));
    }
    Ok(match y {
        Yaml::String(s) => Value::String(s.clone()),
        Yaml::Integer(i) => Value::Number(Number::from(*i)),
        Yaml::Real(r) => {
            let f: f64 = r.parse().map_err(|_| format!("{r:?} is not a number"))?;
            Value::Number(Number::from_f64(f).ok_or_else(|| format!("{r:?} is not a finite number"))?)
        }
        Yaml::Boolean(b) => Value::Bool(*b),
        Yaml::Null => Value::Null,
        Yaml::Array(items) => Value::Array(items.iter().map(|i| to_json(i, depth + 1)).collect::<Result<_, _>>()?),
        Yaml::Hash(h) => {
            let mut m = Map::new();
            for (k, v) in h {
                let Yaml::String(key) = k else {
                    return Err(format!("mapping key {k:?} is not a string"));
                };
                if m.insert(key.clone(), to_json(v, depth + 1)?).is_some() {
                    return Err(format!("key {key:?} appears twice"));
                }
            }
            Value::Object(m)
        }
        Yaml::Alias(_) => return Err("YAML aliases are not accepted in front matter".into()),
        Yaml::BadValue => return Err("a YAML value could not be read".into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_front_matter_and_body() {
        let (m, body) =
            split("---\nkind: issue\nid: ISS-1\nlist: [a, b]\nn: 3\nf: 1.5\n---\n# Title\n\nText\n").unwrap();
        assert_eq!(m["kind"], "issue");
        assert_eq!(m["list"], serde_json::json!(["a", "b"]));
        assert_eq!(m["n"], 3);
        assert_eq!(m["f"], 1.5);
        assert_eq!(body, "# Title\n\nText\n");
    }

    #[test]
    fn refuses_what_is_not_plain_data() {
        assert!(split("no front matter").is_err());
        assert!(split("---\nkind: issue\n").is_err());
        assert!(split("---\nkind: [unclosed\n---\n").is_err());
        assert!(split("---\na: &x 1\nb: *x\n---\n").is_err());
        assert!(split("---\n- a\n- b\n---\n").is_err());
        assert!(split("---\n1: a\n---\n").is_err());
        assert!(split("---\nf: .nan\n---\n").is_err());
        let deep = format!("---\nv: {}1{}\n---\n", "[".repeat(20), "]".repeat(20));
        assert!(split(&deep).is_err());
    }
}
