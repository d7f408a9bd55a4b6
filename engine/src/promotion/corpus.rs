//! The paired evaluation corpus (`strata.eval-corpus/v1`): self-contained tasks in the five
//! strata, each with the routing facts it is dispatched with and an oracle (the mode and reason
//! codes routing must give, and for recovery tasks the lineage state and invalidations).
//!
//! [`check`] validates a corpus: its shape, at least [`PAIRS_MIN`] tasks and [`STRATUM_MIN`]
//! per stratum, unique anonymous ids whose stratum prefix agrees, and every oracle replayed
//! against the real router and lineage evaluator at the corpus's `as_of` time. A corpus says
//! whether it is synthetic; pairs measured on a synthetic corpus never promote.
//!
//! The corpus digest is `sha256:` over the corpus document's canonical JSON ([`json`]), so a
//! pairs file, an envelope and an evaluation can name exactly which corpus they came from.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::gates::{PAIRS_MIN, STRATA, STRATUM_MIN};
use crate::ce::paths::Workspace;
use crate::ce::router::{self, Mode, Reason, RouteFacts};
use crate::ce::wire::rollout;
use crate::ce::{self, Context, json, time};

/// The corpus schema id.
pub const SCHEMA: &str = "strata.eval-corpus/v1";
/// Most tasks one corpus holds.
pub const TASKS_MAX: usize = 10_000;
/// Longest title, characters.
pub const TITLE_CHARS_MAX: usize = 200;
/// Longest objective, characters.
pub const OBJECTIVE_CHARS_MAX: usize = 8_000;
/// Most input files of one task.
pub const FILES_MAX: usize = 64;
/// Largest input file, bytes.
pub const FILE_BYTES_MAX: usize = 64 * 1024;
/// Largest input files of one task together, bytes.
pub const FILES_BYTES_MAX: usize = 1024 * 1024;
/// Longest input file path, bytes.
pub const PATH_BYTES_MAX: usize = 255;

/// A corpus document.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Corpus {
    /// [`SCHEMA`].
    pub schema: String,
    /// Name (a version-like token).
    pub name: String,
    /// Version, bound into measurement envelopes as `corpus_version`.
    pub version: String,
    /// Whether the tasks and any pairs measured on them are synthetic.
    pub synthetic: bool,
    /// The time oracles are evaluated at (lineage leases depend on it), RFC 3339.
    pub as_of: String,
    /// The tasks.
    pub tasks: Vec<Task>,
}

/// One self-contained task.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Task {
    /// Anonymous corpus id: `<stratum>-NN` or `anon-<hex>`.
    pub id: String,
    /// One of the five strata.
    pub stratum: String,
    /// One line.
    pub title: String,
    /// What the worker is asked to do, complete in itself.
    pub objective: String,
    /// The routing facts (`strata ce route` input).
    pub routing: Value,
    /// The task's input files (repository-relative path → text) the measured repository starts
    /// from, so the task is self-contained.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub files: BTreeMap<String, String>,
    /// The commands that prove the task's criterion, run in the worker's worktree (a plan
    /// task's `verify`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verify: Vec<String>,
    /// For recovery tasks: a worker lineage record and the current facts it is checked against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lineage: Option<LineageCase>,
    /// What dispatch must decide.
    pub oracle: Oracle,
}

/// A lineage to evaluate before routing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LineageCase {
    /// A `knowzcode.agent-lineage/v1` record.
    pub record: Value,
    /// The current facts.
    pub current: Value,
}

/// The expected decision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Oracle {
    /// Routing mode.
    pub mode: String,
    /// Reason codes, canonical order.
    pub reason_codes: Vec<String>,
    /// Lineage state (tasks with a lineage only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lineage_state: Option<String>,
    /// Lineage invalidation codes (tasks with a lineage only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalidations: Option<Vec<String>>,
}

/// A corpus that cannot be read at all.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("corpus: {0}")]
pub struct CorpusError(pub String);

/// Something wrong with a readable corpus.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// The task, if the problem is one task's.
    pub task: Option<String>,
    /// The rule broken.
    pub rule: &'static str,
    /// Details: what was found and what is expected.
    pub detail: String,
}

/// What [`check`] found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Corpus name.
    pub name: String,
    /// Corpus version.
    pub version: String,
    /// Synthetic corpus.
    pub synthetic: bool,
    /// `sha256:` of the canonical document.
    pub digest: String,
    /// Tasks.
    pub n_tasks: usize,
    /// Tasks per stratum (the five always listed).
    pub strata: BTreeMap<String, usize>,
    /// Oracles that agree with the router.
    pub oracles_agreeing: usize,
    /// Every problem, tasks in corpus order.
    pub problems: Vec<Problem>,
    /// No problems.
    pub ok: bool,
}

/// Whether `s` is a version-like token (`^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$`).
pub fn is_version(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && b[0].is_ascii_alphanumeric()
        && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'+' | b'-'))
}

/// The `corpus_version` a measurement envelope carries for a corpus: its version, `+` and the
/// hex of its digest. Binding the digest into the signed claim ties the signature to the exact
/// corpus document, its `synthetic` flag and its oracles included, within the reference's version
/// pattern (so corpus versions used with envelopes are at most 63 characters).
pub fn envelope_version(version: &str, digest: &str) -> String {
    format!("{version}+{}", digest.strip_prefix("sha256:").unwrap_or(digest))
}

/// `sha256:` over the canonical JSON of `doc`.
pub fn digest(doc: &Value) -> String {
    json::sha256_tagged(json::to_string(doc).as_bytes())
}

/// Reads a corpus document (shape only; [`check`] validates the content).
pub fn parse(doc: &Value) -> Result<Corpus, CorpusError> {
    let corpus: Corpus = serde_json::from_value(doc.clone()).map_err(|e| CorpusError(e.to_string()))?;
    if corpus.schema != SCHEMA {
        return Err(CorpusError(format!("schema is {:?}; expected {SCHEMA:?}", corpus.schema)));
    }
    if corpus.tasks.len() > TASKS_MAX {
        return Err(CorpusError(format!("{} tasks; at most {TASKS_MAX}", corpus.tasks.len())));
    }
    Ok(corpus)
}

/// Validates a corpus document and replays every oracle.
pub fn check(doc: &Value) -> Result<Report, CorpusError> {
    let corpus = parse(doc)?;
    let mut problems = Vec::new();
    let mut problem = |task: Option<&str>, rule: &'static str, detail: String| {
        problems.push(Problem { task: task.map(str::to_owned), rule, detail });
    };
    for (field, value) in [("name", &corpus.name), ("version", &corpus.version)] {
        if !is_version(value) {
            problem(None, "version-token", format!("{field} {value:?}: letters, digits and . _ + -, at most 128"));
        }
    }
    let now_ns = match time::parse_rfc3339(&corpus.as_of, "as_of") {
        Ok(ns) => Some(ns),
        Err(_) => {
            problem(None, "as-of", format!("as_of {:?}: strict RFC 3339 date-time", corpus.as_of));
            None
        }
    };
    let mut strata: BTreeMap<String, usize> = STRATA.iter().map(|s| ((*s).to_owned(), 0)).collect();
    let mut seen = BTreeSet::new();
    let mut agreeing = 0;
    for t in &corpus.tasks {
        let id = Some(t.id.as_str());
        if !rollout::is_corpus_id(&t.id) {
            problem(id, "anonymous-id", "ids are `<stratum>-NN` or `anon-` and 16–64 hex digits".to_owned());
        }
        if !seen.insert(t.id.as_str()) {
            problem(id, "unique-id", "the id is used by an earlier task".to_owned());
        }
        if !STRATA.contains(&t.stratum.as_str()) {
            problem(id, "stratum", format!("{:?} is not one of {}", t.stratum, STRATA.join(", ")));
        } else {
            *strata.entry(t.stratum.clone()).or_default() += 1;
            if let Some(prefix) = STRATA.iter().find(|s| t.id.starts_with(&format!("{s}-")))
                && *prefix != t.stratum
            {
                problem(id, "stratum", format!("the id names stratum {prefix} but the task is in {}", t.stratum));
            }
        }
        for (field, text, max) in
            [("title", &t.title, TITLE_CHARS_MAX), ("objective", &t.objective, OBJECTIVE_CHARS_MAX)]
        {
            let n = text.chars().count();
            if text.trim().is_empty() || n > max {
                problem(id, "text", format!("{field}: 1 to {max} characters, not blank ({n} given)"));
            }
        }
        for detail in input_problems(t) {
            problem(id, "inputs", detail);
        }
        if let Some(now_ns) = now_ns {
            match replay(t, now_ns) {
                Ok(got) if got == t.oracle => agreeing += 1,
                Ok(got) => problem(
                    id,
                    "oracle",
                    format!(
                        "expected {}, dispatch decided {}",
                        serde_json::to_string(&t.oracle).unwrap_or_default(),
                        serde_json::to_string(&got).unwrap_or_default()
                    ),
                ),
                Err(e) => problem(id, "oracle", format!("dispatch refused the task: {e}")),
            }
        }
        if Mode::parse(&t.oracle.mode).is_none() {
            problem(id, "oracle", format!("mode {:?} is not a routing mode", t.oracle.mode));
        }
        if let Some(bad) = t.oracle.reason_codes.iter().find(|r| Reason::parse(r).is_none()) {
            problem(id, "oracle", format!("reason code {bad:?} is not one of the twelve"));
        }
        if t.lineage.is_some() != t.oracle.lineage_state.is_some() {
            problem(id, "oracle", "lineage_state is given exactly when the task has a lineage".to_owned());
        }
    }
    let n = corpus.tasks.len();
    if n < PAIRS_MIN {
        problem(None, "size", format!("{n} tasks; a corpus needs at least {PAIRS_MIN}"));
    }
    for (s, count) in &strata {
        if *count < STRATUM_MIN {
            problem(None, "size", format!("stratum {s}: {count} tasks; at least {STRATUM_MIN} each"));
        }
    }
    let ok = problems.is_empty();
    Ok(Report {
        name: corpus.name,
        version: corpus.version,
        synthetic: corpus.synthetic,
        digest: digest(doc),
        n_tasks: n,
        strata,
        oracles_agreeing: agreeing,
        problems,
        ok,
    })
}

/// Whether `p` is a plain repository-relative path: 1–[`PATH_BYTES_MAX`] bytes, no leading `/`,
/// no empty, `.` or `..` component, nothing under `.git`, no control character.
pub fn is_input_path(p: &str) -> bool {
    !p.is_empty()
        && p.len() <= PATH_BYTES_MAX
        && !p.starts_with('/')
        && !p.chars().any(char::is_control)
        && p.split('/').all(|c| !c.is_empty() && c != "." && c != "..")
        && p.split('/').next() != Some(".git")
}

/// What is wrong with `t`'s input files and checks.
fn input_problems(t: &Task) -> Vec<String> {
    let mut out = Vec::new();
    if t.files.len() > FILES_MAX {
        out.push(format!("files: {} files; at most {FILES_MAX}", t.files.len()));
    }
    if let Some(p) = t.files.keys().find(|p| !is_input_path(p)) {
        out.push(format!("files: {p:?} is not a plain relative path (no /, ., .. or .git at its start, no control characters, at most {PATH_BYTES_MAX} bytes)"));
    }
    if let Some((p, _)) = t.files.iter().find(|(_, text)| text.len() > FILE_BYTES_MAX) {
        out.push(format!("files: {p} is above {FILE_BYTES_MAX} bytes"));
    }
    let total: usize = t.files.values().map(String::len).sum();
    if total > FILES_BYTES_MAX {
        out.push(format!("files: {total} bytes together; at most {FILES_BYTES_MAX}"));
    }
    let all: Vec<&String> = t.files.keys().collect();
    if let Some((a, b)) =
        all.iter().flat_map(|a| all.iter().map(move |b| (a, b))).find(|(a, b)| b.starts_with(&format!("{a}/")))
    {
        out.push(format!("files: {a} is a file and the directory of {b}"));
    }
    out.extend(
        crate::workgroup::verify::problems("verify", &t.verify).into_iter().map(|(f, rule)| format!("{f}: {rule}")),
    );
    out
}

/// What dispatch decides for `task` at `now_ns`, in oracle form.
pub fn replay(task: &Task, now_ns: i128) -> Result<Oracle, ce::CeError> {
    let ctx = Context { now_ns, workspace: Workspace::default(), warm_lease_minutes: 20 };
    let strings = |v: &Value| -> Vec<String> {
        v.as_array().map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_owned)).collect()).unwrap_or_default()
    };
    let Some(l) = &task.lineage else {
        let route = router::route(&RouteFacts::from_json(&task.routing, &ctx.workspace)?)?;
        return Ok(Oracle {
            mode: route.mode.as_str().to_owned(),
            reason_codes: route.reason_names(),
            lineage_state: None,
            invalidations: None,
        });
    };
    let request = json!({
        "routing": {"input": task.routing},
        "lineage": {"lineage": l.record, "current": l.current},
        "rollout": {"input": {"rollout": "off"}},
    });
    let out = ce::run("dispatch", &request, &ctx)?;
    Ok(Oracle {
        mode: out["routing"]["mode"].as_str().unwrap_or_default().to_owned(),
        reason_codes: strings(&out["routing"]["reason_codes"]),
        lineage_state: out["lineage"]["state"].as_str().map(str::to_owned),
        invalidations: Some(strings(&out["lineage"]["invalidations"])),
    })
}
