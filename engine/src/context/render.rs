//! How an artifact reads at each level of detail.
//!
//! * **L1** (full): every field and the whole body; what an implementation agent needs for the
//!   artifact it works on.
//! * **L2** (summary): title, state, its links, the fields that state what the kind is for (a
//!   design profile's brand, colours and voice; an implementation reference's sources; …), and
//!   the first paragraph of the body (at most [`L2_BODY_CHARS_MAX`] characters); enough to know
//!   what the artifact is about and where it connects.
//! * **L3** (line): one line with id, kind, state and title; enough to know it exists.
//!
//! Rendering is a pure function of the artifact's content and state, so a level's text (and its
//! token count) is determined by the content hash and the level.

use serde_json::Value;

use crate::kb::graph::Node;
use crate::kb::kind::ArtifactKind;
use crate::kb::links::links_of;

/// Levels of detail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Full.
    L1,
    /// Summary.
    L2,
    /// One line.
    L3,
}

impl Level {
    /// `L1`, `L2` or `L3`.
    pub fn name(self) -> &'static str {
        match self {
            Level::L1 => "L1",
            Level::L2 => "L2",
            Level::L3 => "L3",
        }
    }

    /// Parses a level as profiles write it: `L1`/`L1-full`/`L0-full`, `L2`/`L2-summary`,
    /// `L3`/`L3-system`/`L3-line`.
    pub fn parse(s: &str) -> Option<Level> {
        match s {
            "L1" | "L1-full" | "L0-full" | "full" => Some(Level::L1),
            "L2" | "L2-summary" | "summary" => Some(Level::L2),
            "L3" | "L3-system" | "L3-line" | "line" => Some(Level::L3),
            _ => None,
        }
    }

    /// One step less detailed, if any.
    pub fn coarser(self) -> Option<Level> {
        match self {
            Level::L1 => Some(Level::L2),
            Level::L2 => Some(Level::L3),
            Level::L3 => None,
        }
    }
}

/// Characters of body an L2 rendering keeps.
pub const L2_BODY_CHARS_MAX: usize = 600;

fn title(node: &Node) -> &str {
    node.fields.get("title").or_else(|| node.fields.get("name")).and_then(Value::as_str).unwrap_or("")
}

fn label(kind: ArtifactKind) -> &'static str {
    match kind {
        ArtifactKind::Entity => "Entity",
        ArtifactKind::Issue => "Issue",
        ArtifactKind::ChangeRequest => "Change request",
        ArtifactKind::BacklogItem => "Backlog item",
        ArtifactKind::BrdRequirement => "Requirement",
        ArtifactKind::FunctionalDomain => "Domain",
        ArtifactKind::BackendModule => "Backend module",
        ArtifactKind::UiScreen => "UI screen",
        ArtifactKind::ResearchNote => "Research note",
        ArtifactKind::Devlog => "Devlog",
        ArtifactKind::DesignProfile => "Design profile",
        ArtifactKind::StackConcern => "Stack concern",
        ArtifactKind::TechSkill => "Tech skill",
        ArtifactKind::ImplementationRef => "Implementation reference",
        ArtifactKind::ModificationRoute => "Modification route",
    }
}

/// Fields an L2 rendering keeps besides the links: what the kind is for, stated in a field rather
/// than in the body (a design profile's palette, an implementation reference's source paths).
fn l2_fields(kind: ArtifactKind) -> &'static [&'static str] {
    match kind {
        ArtifactKind::DesignProfile => &["brand", "colours", "voice"],
        ArtifactKind::StackConcern => &["stack", "severity", "concern"],
        ArtifactKind::TechSkill => &["technology", "skill"],
        ArtifactKind::ImplementationRef => &["sources"],
        ArtifactKind::ModificationRoute => &["change", "where"],
        _ => &[],
    }
}

fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(items) if items.iter().all(Value::is_string) => {
            items.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", ")
        }
        other => crate::canonical::to_string(other),
    }
}

/// The first paragraph of `body` that is not a heading, cut at a word boundary.
fn first_paragraph(body: &str) -> String {
    let para = body
        .split("\n\n")
        .map(str::trim)
        .find(|p| !p.is_empty() && !p.starts_with('#'))
        .unwrap_or("")
        .replace('\n', " ");
    if para.chars().count() <= L2_BODY_CHARS_MAX {
        return para;
    }
    let cut: String = para.chars().take(L2_BODY_CHARS_MAX).collect();
    match cut.rfind(' ') {
        Some(i) => format!("{} …", &cut[..i]),
        None => format!("{cut} …"),
    }
}

/// The artifact at `level`.
pub fn render(node: &Node, level: Level) -> String {
    let k = &node.key;
    match level {
        Level::L3 => format!("- {} ({}, {}): {}\n", k.id, k.kind.name(), node.state, title(node)),
        Level::L2 => {
            let mut out = format!("### {} {}: {} ({})\n", label(k.kind), k.id, title(node), node.state);
            for (_, spec) in links_of(k.kind) {
                if spec.field == "entity" {
                    continue;
                }
                if let Some(v) = node.fields.get(spec.field) {
                    let t = value_text(v);
                    if !t.is_empty() {
                        out.push_str(&format!("{}: {t}\n", spec.field));
                    }
                }
            }
            for f in l2_fields(k.kind) {
                if let Some(v) = node.fields.get(*f) {
                    out.push_str(&format!("{f}: {}\n", value_text(v)));
                }
            }
            let para = first_paragraph(&node.body);
            if !para.is_empty() {
                out.push_str(&para);
                out.push('\n');
            }
            out
        }
        Level::L1 => {
            let mut out = format!("### {} {}: {} ({})\n", label(k.kind), k.id, title(node), node.state);
            for (f, v) in &node.fields {
                if f == "title" || f == "name" {
                    continue;
                }
                out.push_str(&format!("{f}: {}\n", value_text(v)));
            }
            if !node.body.is_empty() {
                out.push('\n');
                push_demoted(&mut out, node.body.trim_end());
                out.push('\n');
            }
            out
        }
    }
}

/// Appends `body` with its Markdown headings moved below the artifact's own `###` (`#` becomes
/// `####`, down to `######`), outside fenced code, so a prompt keeps one `#` (the task) and one
/// `##` per section.
fn push_demoted(out: &mut String, body: &str) {
    let mut fenced = false;
    for (i, line) in body.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            fenced = !fenced;
        }
        let hashes = line.bytes().take_while(|&b| b == b'#').count();
        let heading = !fenced && (1..=6).contains(&hashes) && line[hashes..].starts_with(' ');
        if heading {
            out.push_str(&"#".repeat((hashes + 3).min(6)));
            out.push_str(&line[hashes..]);
        } else {
            out.push_str(line);
        }
    }
}
