//! A failed command as `--json` reports it: one JSON object on stdout,
//! `{"code", "message", "input", "rule", "hint"}`, with the same exit code as the text form (1
//! for an error, 2 for a usage error). Scripts read the code and the hint without parsing prose.
//!
//! Errors made as a [`Diagnostic`] carry the three parts as they were written. Every other error
//! is read from its text, which by convention is `[STRATA-Exxxx] <input>: <rule>; <hint>`: the
//! code from the brackets, the hint after the last `; `, the input when the text opens with one
//! word and a colon. A part the text does not give is `null`, never guessed further.

use serde_json::json;

pub use crate::diagnostic::Diagnostic;

/// The code of an error that carries none of its own (an I/O failure passed up as it is).
pub const UNCODED: &str = "STRATA-E2451";

/// The code of a usage error (bad arguments), which clap reports before any command runs.
pub const USAGE: &str = "STRATA-E2450";

/// The JSON error object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// `STRATA-Exxxx`.
    pub code: String,
    /// The whole message, as the text form prints it after `error: `.
    pub message: String,
    /// The input at fault, when known.
    pub input: Option<String>,
    /// The rule broken, when known.
    pub rule: Option<String>,
    /// What to do, when known.
    pub hint: Option<String>,
}

impl Failure {
    /// The failure `e` describes.
    pub fn of(e: &anyhow::Error) -> Failure {
        let message = format!("{e:#}");
        if let Some(d) = e.chain().find_map(|c| c.downcast_ref::<Diagnostic>()) {
            return Failure {
                code: d.code.to_owned(),
                message,
                input: Some(d.input.clone()),
                rule: Some(d.rule.clone()),
                hint: Some(d.hint.clone()),
            };
        }
        Failure::from_text(&message)
    }

    /// The failure a message in the `[STRATA-Exxxx] <input>: <rule>; <hint>` convention says.
    pub fn from_text(message: &str) -> Failure {
        let (code, rest) = split_code(message);
        let (body, hint) = match rest.rsplit_once("; ") {
            Some((b, h)) if !h.trim().is_empty() => (b, Some(h.trim().to_owned())),
            _ => (rest, None),
        };
        let (input, rule) = match body.split_once(": ") {
            Some((i, r)) if !i.is_empty() && !i.contains(char::is_whitespace) => (Some(i.to_owned()), r),
            _ => (None, body),
        };
        Failure {
            code: code.unwrap_or(UNCODED).to_owned(),
            message: message.to_owned(),
            input,
            rule: (!rule.trim().is_empty()).then(|| rule.trim().to_owned()),
            hint,
        }
    }

    /// A usage error clap found: the argument at fault, what is wrong with it, and clap's tip (or
    /// where the help is).
    pub fn usage(e: &clap::Error) -> Failure {
        use clap::error::{ContextKind, ContextValue};
        let rendered = e.render().to_string();
        let message = rendered.lines().next().unwrap_or_default().trim_start_matches("error: ").trim().to_owned();
        let text = |k: ContextKind| match e.get(k) {
            Some(ContextValue::String(s)) => Some(s.clone()),
            Some(ContextValue::Strings(v)) if !v.is_empty() => Some(v.join(", ")),
            _ => None,
        };
        let input = text(ContextKind::InvalidArg)
            .or_else(|| text(ContextKind::InvalidSubcommand))
            .or_else(|| text(ContextKind::InvalidValue));
        let tip = rendered.lines().find_map(|l| l.trim().strip_prefix("tip: ").map(str::to_owned));
        Failure {
            code: USAGE.to_owned(),
            message,
            input,
            rule: Some(e.kind().as_str().unwrap_or("invalid usage").to_owned()),
            hint: Some(tip.unwrap_or_else(|| "see `strata --help`, or `strata COMMAND --help`".to_owned())),
        }
    }

    /// One line of JSON.
    pub fn to_json(&self) -> String {
        self.merged(serde_json::Value::Object(serde_json::Map::new()))
    }

    /// A refusal whose details are a document of their own (every problem of an intake or a
    /// plan): that document with the five keys added, still one object on one line.
    pub fn merged(&self, doc: serde_json::Value) -> String {
        let mut doc = match doc {
            serde_json::Value::Object(o) => o,
            other => serde_json::Map::from_iter([("details".to_owned(), other)]),
        };
        let parts = json!({"code": self.code, "message": self.message, "input": self.input, "rule": self.rule, "hint": self.hint});
        if let serde_json::Value::Object(p) = parts {
            doc.extend(p);
        }
        serde_json::Value::Object(doc).to_string()
    }
}

/// `(code, rest)`: the `[STRATA-Exxxx]` the message opens with (after an `error: `), if any.
fn split_code(message: &str) -> (Option<&str>, &str) {
    let m = message.trim_start_matches("error: ").trim_start();
    let Some(after) = m.strip_prefix('[') else { return (None, m) };
    match after.split_once(']') {
        Some((code, rest))
            if code.len() == 12 && code.starts_with("STRATA-E") && code[8..].bytes().all(|b| b.is_ascii_digit()) =>
        {
            (Some(code), rest.trim_start())
        }
        _ => (None, m),
    }
}

/// Reports `e` for a command that failed: one JSON object on stdout with `--json`, else
/// `error: …` on stderr.
pub fn report(o: &crate::output::Out, e: &anyhow::Error, json: bool) {
    tracing::debug!(error = ?e, "command failed");
    let plan = e.chain().find_map(|c| match c.downcast_ref::<strata_engine::workgroup::WorkgroupError>() {
        Some(strata_engine::workgroup::WorkgroupError::Plan(problems)) => Some(problems),
        _ => None,
    });
    match (plan, json) {
        (Some(problems), true) => {
            let listed: Vec<String> = problems.iter().map(ToString::to_string).collect();
            outln!(o, "{}", Failure::of(e).merged(json!({ "problems": listed })));
        }
        (None, true) => outln!(o, "{}", Failure::of(e).to_json()),
        (Some(problems), false) => errln!(o, "error: {}", plan_problems(problems)),
        (None, false) => errln!(o, "error: {e:#}"),
    }
}

/// A plan's problems as a list, one per line (the engine's message joins them on one line).
fn plan_problems(problems: &[strata_engine::workgroup::plan::Problem]) -> String {
    let mut text =
        format!("[STRATA-E1701] the plan has {}:", crate::plural::count(problems.len() as u64, "problem", "problems"));
    for p in problems {
        text.push_str(&format!("\n  - {p}"));
    }
    text
}

/// Whether the raw arguments ask for `--json` (read before they are parsed, so that a usage
/// error can be reported in JSON too); nothing after a `--` counts.
pub fn wants_json<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> bool {
    args.iter().map(AsRef::as_ref).take_while(|a| *a != "--").any(|a| a == "--json")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_coded_message_is_read_into_its_parts() {
        let f = Failure::from_text("[STRATA-E0601] --durability: must be power or process; pass --durability power");
        assert_eq!(f.code, "STRATA-E0601");
        assert_eq!(f.input.as_deref(), Some("--durability"));
        assert_eq!(f.rule.as_deref(), Some("must be power or process"));
        assert_eq!(f.hint.as_deref(), Some("pass --durability power"));
    }

    #[test]
    fn a_part_the_text_does_not_give_is_null_and_an_uncoded_error_gets_the_uncoded_code() {
        let f = Failure::from_text("cannot create /x: permission denied");
        assert_eq!((f.code.as_str(), f.input.as_deref(), f.hint.as_deref()), (UNCODED, None, None));
        assert_eq!(f.rule.as_deref(), Some("cannot create /x: permission denied"));
        let f = Failure::from_text("[STRATA-E12] odd");
        assert_eq!(f.code, UNCODED, "a malformed code is not taken for one");
    }

    #[test]
    fn a_diagnostic_keeps_its_parts_through_context() {
        let d = Diagnostic { code: "STRATA-E2452", input: "x".into(), rule: "r".into(), hint: "h".into() };
        let e = anyhow::Error::from(d).context("while listing");
        let f = Failure::of(&e);
        assert_eq!((f.code.as_str(), f.input.as_deref(), f.rule.as_deref()), ("STRATA-E2452", Some("x"), Some("r")));
        let v: serde_json::Value = serde_json::from_str(&f.to_json()).expect("json");
        let keys: Vec<&str> = v.as_object().expect("object").keys().map(String::as_str).collect();
        assert_eq!(keys, ["code", "hint", "input", "message", "rule"]);
    }

    #[test]
    fn plan_problems_are_a_list_one_per_line() {
        use strata_engine::workgroup::plan::Problem;
        let p = |task: &str, field: &str| Problem { task: Some(task.into()), field: field.into(), rule: "r".into() };
        assert_eq!(
            plan_problems(&[p("a", "role"), p("b", "after")]),
            "[STRATA-E1701] the plan has 2 problems:\n  - task a: role: r\n  - task b: after: r"
        );
        assert!(plan_problems(&[p("a", "id")]).starts_with("[STRATA-E1701] the plan has 1 problem:"));
    }

    #[test]
    fn json_is_wanted_only_before_a_double_dash() {
        assert!(wants_json(&["strata", "graph", "--json"]));
        assert!(!wants_json(&["strata", "ce", "--", "--json"]));
    }
}
