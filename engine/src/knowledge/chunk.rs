//! Chunk files: Markdown with YAML front matter (`slug`, `title`, `concerns`, `project_scope`; the
//! body is the content) or JSON (the same fields plus `content`). A `token_estimate` in a file is
//! accepted and ignored: strata computes the estimate itself and never trusts the input's.

use serde_json::{Map, Value};

use super::state::Knowledge;
use super::{CONCERNS_MAX, CONTENT_BYTES_MAX, NAME_RULE, SCOPE_MAX, TITLE_BYTES_MAX, closest, valid_name};
use crate::kb::intake::{IntakeProblem, SourceFile, problem};

/// A parsed, checked chunk (not yet versioned).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkDraft {
    /// Slug.
    pub slug: String,
    /// Title.
    pub title: String,
    /// Concerns, sorted, no duplicates.
    pub concerns: Vec<String>,
    /// Project scope, sorted, no duplicates; empty: shared.
    pub project_scope: Vec<String>,
    /// Content.
    pub content: String,
    /// The file it came from.
    pub source: String,
}

impl ChunkDraft {
    /// blake3 over the canonical JSON of everything but the source (hex).
    pub fn hash(&self) -> String {
        let doc = serde_json::json!({
            "slug": self.slug, "title": self.title, "concerns": self.concerns,
            "project_scope": self.project_scope, "content": self.content,
        });
        crate::canonical::hash(&doc).to_hex()
    }
}

const FIELDS: [&str; 6] = ["slug", "title", "concerns", "project_scope", "content", "token_estimate"];

fn strings(v: Option<&Value>, file: &str, field: &str, out: &mut Vec<IntakeProblem>) -> Vec<String> {
    match v {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => {
            let mut list = Vec::new();
            for (i, item) in items.iter().enumerate() {
                match item.as_str() {
                    Some(s) => list.push(s.to_owned()),
                    None => out.push(problem(
                        file,
                        &format!("/{field}/{i}"),
                        "type",
                        format!("{field}[{i}] is {item}, not a string"),
                        "write names as strings",
                    )),
                }
            }
            list.sort();
            list.dedup();
            list
        }
        Some(other) => {
            out.push(problem(
                file,
                &format!("/{field}"),
                "type",
                format!("{field} is {other}, not a list of names"),
                format!("write {field}: [name, …]"),
            ));
            Vec::new()
        }
    }
}

/// Parses and checks one chunk file against the vocabulary.
pub fn parse(f: &SourceFile, k: &Knowledge) -> Result<ChunkDraft, Vec<IntakeProblem>> {
    let file = f.path.as_str();
    let text = match std::str::from_utf8(&f.bytes) {
        Ok(t) if !t.contains('\0') => t,
        _ => {
            return Err(vec![problem(
                file,
                "",
                "encoding",
                "the file is not UTF-8 text",
                "chunk files are Markdown or JSON text",
            )]);
        }
    };
    let (mut fields, body): (Map<String, Value>, Option<String>) = if file.ends_with(".json") {
        match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(m)) => (m, None),
            Ok(_) => {
                return Err(vec![problem(
                    file,
                    "",
                    "type",
                    "the JSON document is not an object",
                    "write {\"slug\": …, \"content\": …}",
                )]);
            }
            Err(e) => return Err(vec![problem(file, "", "json", format!("not JSON: {e}"), "fix the JSON syntax")]),
        }
    } else {
        match crate::kb::frontmatter::split(text) {
            Ok((m, b)) => (m, Some(b)),
            Err(e) => {
                let at = e.line.map(|l| format!(" (line {l})")).unwrap_or_default();
                return Err(vec![problem(file, "", "front-matter", format!("{}{at}", e.detail), e.hint)]);
            }
        }
    };
    let mut out = Vec::new();
    for key in fields.keys() {
        if !FIELDS.contains(&key.as_str()) {
            out.push(problem(
                file,
                &format!("/{key}"),
                "unknown-field",
                format!("unknown field {key:?}"),
                format!("chunk fields are {}", FIELDS.join(", ")),
            ));
        }
    }
    let content = match (body, fields.remove("content")) {
        (Some(b), None) => b.trim().to_owned(),
        (None, Some(Value::String(c))) => c.trim().to_owned(),
        (Some(_), Some(_)) => {
            out.push(problem(
                file,
                "/content",
                "content",
                "content is given both in front matter and as the body",
                "keep the content in the body",
            ));
            String::new()
        }
        (None, _) => {
            out.push(problem(
                file,
                "/content",
                "required",
                "content is missing (or not a string)",
                "add \"content\": \"…\"",
            ));
            String::new()
        }
    };
    if content.is_empty() && out.is_empty() {
        out.push(problem(file, "/content", "required", "the content is empty", "write the chunk's rules as the body"));
    }
    if content.len() > CONTENT_BYTES_MAX {
        out.push(problem(
            file,
            "/content",
            "size",
            format!("the content is {} bytes; the limit is {CONTENT_BYTES_MAX}", content.len()),
            "split it into chunks by concern; chunks are meant to be a few hundred tokens",
        ));
    }
    let slug = match fields.get("slug") {
        Some(Value::String(s)) if valid_name(s) => s.clone(),
        Some(Value::String(s)) => {
            out.push(problem(file, "/slug", "name", format!("slug {s:?} is not valid"), NAME_RULE));
            String::new()
        }
        _ => {
            out.push(problem(file, "/slug", "required", "slug is missing (or not a string)", "add slug: my-chunk"));
            String::new()
        }
    };
    let title = match fields.get("title") {
        Some(Value::String(s)) if !s.trim().is_empty() && s.len() <= TITLE_BYTES_MAX => s.trim().to_owned(),
        Some(Value::String(s)) if s.len() > TITLE_BYTES_MAX => {
            out.push(problem(
                file,
                "/title",
                "size",
                format!("the title is {} bytes; the limit is {TITLE_BYTES_MAX}", s.len()),
                "shorten it",
            ));
            String::new()
        }
        _ => {
            out.push(problem(
                file,
                "/title",
                "required",
                "title is missing or empty",
                "add title: Human-readable title",
            ));
            String::new()
        }
    };
    let concerns = strings(fields.get("concerns"), file, "concerns", &mut out);
    if concerns.is_empty() && !fields.get("concerns").is_some_and(Value::is_array) {
        out.push(problem(
            file,
            "/concerns",
            "required",
            "concerns are missing",
            "add concerns: [testing, …] from the declared vocabulary",
        ));
    } else if concerns.is_empty() {
        out.push(problem(
            file,
            "/concerns",
            "required",
            "concerns are empty: the chunk could never be served",
            "name at least one concern",
        ));
    }
    if concerns.len() > CONCERNS_MAX {
        out.push(problem(
            file,
            "/concerns",
            "size",
            format!("{} concerns; at most {CONCERNS_MAX}", concerns.len()),
            "split the chunk",
        ));
    }
    for (i, c) in concerns.iter().enumerate() {
        if !k.has_concern(c) {
            let near = closest(c, k.concerns());
            let hint = if near.is_empty() {
                format!("declare it first: strata knowledge declare --concern {c}")
            } else {
                format!("did you mean {}? (or declare it: strata knowledge declare --concern {c})", near.join(" or "))
            };
            out.push(problem(file, &format!("/concerns/{i}"), "vocabulary", format!("unknown concern {c:?}"), hint));
        }
    }
    let project_scope = strings(fields.get("project_scope"), file, "project_scope", &mut out);
    if project_scope.len() > SCOPE_MAX {
        out.push(problem(
            file,
            "/project_scope",
            "size",
            format!("{} projects; at most {SCOPE_MAX}", project_scope.len()),
            "leave the scope empty to share the chunk",
        ));
    }
    for (i, p) in project_scope.iter().enumerate() {
        if !k.has_project(p) {
            let near = closest(p, k.projects());
            let hint = if near.is_empty() {
                format!("declare it first: strata knowledge declare --project {p}")
            } else {
                format!("did you mean {}? (or declare it: strata knowledge declare --project {p})", near.join(" or "))
            };
            out.push(problem(
                file,
                &format!("/project_scope/{i}"),
                "vocabulary",
                format!("unknown project {p:?}"),
                hint,
            ));
        }
    }
    if fields.get("token_estimate").is_some_and(|v| !v.is_u64() && !v.is_null()) {
        out.push(problem(
            file,
            "/token_estimate",
            "type",
            "token_estimate is not a whole number",
            "remove it: strata computes the estimate",
        ));
    }
    if out.is_empty() {
        Ok(ChunkDraft { slug, title, concerns, project_scope, content, source: file.to_owned() })
    } else {
        Err(out)
    }
}
