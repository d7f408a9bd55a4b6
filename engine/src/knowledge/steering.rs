//! Existing steering files as knowledge chunks: `AGENTS.md` (or `AGENTS.override.md`, which
//! replaces it in its directory, as Codex reads them), `CLAUDE.md` (and `.claude/CLAUDE.md`),
//! Cursor's `.cursor/rules/*.mdc` and Kiro's `.kiro/steering/*.md`, at any depth of a repository.
//!
//! Pure: the caller lists and reads the files (bounded, regular files only) and passes their
//! repository-relative paths and text; this module turns them into [`ChunkDraft`]s and the
//! vocabulary they need, and [`import`] decides the one append that declares the vocabulary and
//! puts the chunks (new versions only for text that changed; nothing when nothing changed).
//!
//! * **Concerns** come from front matter (`concerns: [a, b]`) when a file has them; otherwise a
//!   Markdown file is split at its headings (the shallowest level that occurs at least twice)
//!   and each section's concern is its heading, in kebab case; text before the first such
//!   heading is the concern `general`; a Cursor rule or Kiro steering file without `concerns`
//!   is one chunk whose concern is its file name. Every chunk also has the concern `steering`, so
//!   `get_knowledge(["steering"], project)` gives all the guidance that applies to a project.
//! * **Project scope** comes from the path: a file's directory (the one holding `AGENTS.md`, or
//!   `.cursor/`, `.kiro/`, `.claude/`) is a project named by its path in kebab case
//!   (`services/billing` is `services-billing`); a chunk applies to its directory's project and
//!   every project below it. Files at the repository's root are shared (empty scope).
//! * **The nearest file wins** (Codex and the AGENTS.md convention: guidance closer to a path
//!   overrides guidance further up): a section of a deeper file overrides the sections of
//!   ancestor files that share a concern with it (other than `steering`), for the deeper
//!   directory's subtree. The overridden chunk's scope lists the projects it still applies to; a
//!   root chunk overridden somewhere is scoped to [`ROOT_PROJECT`] and those projects instead of
//!   being shared.

use std::collections::{BTreeMap, BTreeSet};

use super::chunk::ChunkDraft;
use super::decide::{PutPlan, declare, version_drafts};
use super::state::Knowledge;
use super::{CONTENT_BYTES_MAX, NAME_BYTES_MAX, TITLE_BYTES_MAX, valid_name};
use crate::kb::intake::{IntakeProblem, problem};
use crate::ports::{Clock, Ids};

/// The concern every imported chunk has.
pub const STEERING_CONCERN: &str = "steering";
/// The concern of the text before a file's first section heading.
pub const GENERAL_CONCERN: &str = "general";
/// The project a repository-root chunk is scoped to once a deeper file overrides it somewhere.
pub const ROOT_PROJECT: &str = "repo-root";
/// Largest steering file read.
pub const FILE_BYTES_MAX: usize = 256 * 1024;
/// Most steering files in one import.
pub const FILES_MAX: usize = 512;

/// What kind of steering file a path is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum SteeringKind {
    /// `AGENTS.md` or `AGENTS.override.md`.
    AgentsMd,
    /// `CLAUDE.md` or `.claude/CLAUDE.md`.
    ClaudeMd,
    /// `.cursor/rules/*.mdc`.
    CursorRule,
    /// `.kiro/steering/*.md`.
    KiroSteering,
}

impl SteeringKind {
    /// The kind's name in messages.
    pub fn name(self) -> &'static str {
        match self {
            SteeringKind::AgentsMd => "AGENTS.md",
            SteeringKind::ClaudeMd => "CLAUDE.md",
            SteeringKind::CursorRule => "Cursor rule",
            SteeringKind::KiroSteering => "Kiro steering",
        }
    }
}

/// What a repository-relative path (`/`-separated) is, and the directory it steers (`""`: the
/// root); `None` for any other file.
pub fn classify(rel: &str) -> Option<(SteeringKind, String)> {
    let parts: Vec<&str> = rel.split('/').collect();
    let (name, dirs) = parts.split_last()?;
    let dir = |n: usize| dirs[..dirs.len() - n].join("/");
    match (*name, dirs) {
        ("AGENTS.md" | "AGENTS.override.md", _) => Some((SteeringKind::AgentsMd, dir(0))),
        ("CLAUDE.md", [.., ".claude"]) => Some((SteeringKind::ClaudeMd, dir(1))),
        ("CLAUDE.md", _) => Some((SteeringKind::ClaudeMd, dir(0))),
        (n, [.., ".cursor", "rules"]) if n.ends_with(".mdc") && n.len() > 4 => Some((SteeringKind::CursorRule, dir(2))),
        (n, [.., ".kiro", "steering"]) if n.ends_with(".md") && n.len() > 3 => {
            Some((SteeringKind::KiroSteering, dir(2)))
        }
        _ => None,
    }
}

/// One steering file as read.
#[derive(Clone, Debug)]
pub struct SteeringFile {
    /// Repository-relative path, `/`-separated.
    pub path: String,
    /// Its text.
    pub text: String,
}

/// The chunks a set of steering files makes, with the vocabulary they use.
#[derive(Clone, Debug, Default)]
pub struct Imported {
    /// The chunks, by slug.
    pub drafts: Vec<ChunkDraft>,
    /// Every concern used.
    pub concerns: BTreeSet<String>,
    /// Every project used.
    pub projects: BTreeSet<String>,
    /// Files that made no chunk (empty), by path.
    pub empty: Vec<String>,
}

/// `s` in kebab case: lower-case ASCII letters and digits, runs of anything else one `-`.
pub fn kebab(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    while out.ends_with('-') {
        out.pop();
    }
    out
}

/// A name of at most `max` bytes: `s` itself, or its head and eight hex digits of its hash.
fn bounded_name(s: &str, max: usize) -> String {
    if s.len() <= max && !s.is_empty() {
        return s.to_owned();
    }
    let hash = blake3::hash(s.as_bytes()).to_hex();
    let head: String = s.chars().take(max.saturating_sub(9)).collect();
    let head = head.trim_end_matches('-');
    if head.is_empty() { format!("h{}", &hash[..8]) } else { format!("{head}-{}", &hash[..8]) }
}

/// The project a directory is (`None`: the root, shared).
pub fn project_of(dir: &str) -> Option<String> {
    (!dir.is_empty()).then(|| bounded_name(&kebab(dir), NAME_BYTES_MAX))
}

/// Front matter: `---` lines around `key: value` lines, read leniently (Cursor's `globs: *.ts`
/// is not valid YAML). Returns the fields and the body.
fn front_matter(text: &str) -> (BTreeMap<String, String>, &str) {
    let mut fields = BTreeMap::new();
    let Some(rest) = text.strip_prefix("---\n").or_else(|| text.strip_prefix("---\r\n")) else {
        return (fields, text);
    };
    let mut offset = 0;
    for line in rest.split_inclusive('\n') {
        offset += line.len();
        let l = line.trim_end();
        if l == "---" || l == "..." {
            return (fields, &rest[offset..]);
        }
        if let Some((k, v)) = l.split_once(':')
            && !k.starts_with([' ', '\t', '-', '#'])
        {
            fields.insert(k.trim().to_owned(), v.trim().to_owned());
        }
    }
    (BTreeMap::new(), text)
}

/// A front-matter list: `[a, "b"]`, `a, b` or one value.
fn list(v: &str) -> Vec<String> {
    let v = v.trim().trim_start_matches('[').trim_end_matches(']');
    v.split(',').map(|s| s.trim().trim_matches(['"', '\'']).to_owned()).filter(|s| !s.is_empty()).collect()
}

/// A heading line's level and text (ATX: `#`…`######` then a space).
fn heading(line: &str) -> Option<(usize, &str)> {
    let level = line.bytes().take_while(|b| *b == b'#').count();
    let rest = &line[level..];
    ((1..=6).contains(&level) && (rest.is_empty() || rest.starts_with([' ', '\t'])))
        .then(|| (level, rest.trim().trim_end_matches('#').trim()))
}

/// A section of a Markdown body: its heading (`None`: the text before the first) and text.
struct Section<'a> {
    heading: Option<&'a str>,
    text: String,
}

/// Splits `body` at the shallowest heading level that occurs at least twice (outside fenced
/// code); one section when none does.
fn sections(body: &str) -> Vec<Section<'_>> {
    let mut fenced = false;
    let mut heads: Vec<(usize, usize, &str)> = Vec::new(); // (line index, level, text)
    let lines: Vec<&str> = body.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim_start();
        if t.starts_with("```") || t.starts_with("~~~") {
            fenced = !fenced;
        } else if !fenced && let Some((level, text)) = heading(line) {
            heads.push((i, level, text));
        }
    }
    let level = (1..=6).find(|l| heads.iter().filter(|h| h.1 == *l).count() >= 2);
    let Some(level) = level else {
        return vec![Section { heading: None, text: body.trim().to_owned() }];
    };
    let cuts: Vec<(usize, &str)> = heads.iter().filter(|h| h.1 == level).map(|h| (h.0, h.2)).collect();
    let mut out = vec![Section { heading: None, text: lines[..cuts[0].0].join("\n").trim().to_owned() }];
    for (n, (at, text)) in cuts.iter().enumerate() {
        let end = cuts.get(n + 1).map_or(lines.len(), |c| c.0);
        out.push(Section { heading: Some(text), text: lines[*at..end].join("\n").trim().to_owned() });
    }
    out
}

/// Whether the preamble holds more than a title heading.
fn only_headings(text: &str) -> bool {
    text.lines().all(|l| l.trim().is_empty() || heading(l).is_some())
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max.saturating_sub(3);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// One chunk before the scopes are known.
struct Pending {
    draft: ChunkDraft,
    /// The directory it steers.
    dir: String,
}

/// Whether `dir` lies strictly below `anc` (`""` is the root, an ancestor of every other).
fn below(dir: &str, anc: &str) -> bool {
    dir != anc && (anc.is_empty() || dir.strip_prefix(anc).is_some_and(|r| r.starts_with('/')))
}

/// The chunks `files` make (see the module doc); every problem at once.
pub fn chunks(files: &[SteeringFile]) -> Result<Imported, Vec<IntakeProblem>> {
    let mut problems = Vec::new();
    if files.len() > FILES_MAX {
        problems.push(problem(
            "",
            "",
            "size",
            format!("{} steering files; one import takes at most {FILES_MAX}", files.len()),
            "import a smaller directory with --root",
        ));
        return Err(problems);
    }
    let mut files: Vec<&SteeringFile> = files.iter().collect();
    files.sort_by(|a, b| a.path.cmp(&b.path));
    // AGENTS.override.md replaces AGENTS.md in its directory (one per directory, as Codex).
    let overrides: BTreeSet<String> =
        files.iter().filter_map(|f| f.path.strip_suffix("AGENTS.override.md").map(str::to_owned)).collect();
    let mut pending: Vec<Pending> = Vec::new();
    let mut out = Imported::default();
    let mut slugs: BTreeMap<String, String> = BTreeMap::new();
    let mut project_dirs: BTreeMap<String, String> = BTreeMap::new();
    for f in files {
        let Some((kind, dir)) = classify(&f.path) else {
            problems.push(problem(
                &f.path,
                "",
                "steering",
                "not a steering file",
                "import reads AGENTS.md, CLAUDE.md, .cursor/rules/*.mdc and .kiro/steering/*.md",
            ));
            continue;
        };
        if f.path.strip_suffix("AGENTS.md").is_some_and(|d| overrides.contains(d)) {
            continue;
        }
        if f.text.len() > FILE_BYTES_MAX {
            problems.push(problem(
                &f.path,
                "",
                "size",
                format!("{} bytes; a steering file is at most {FILE_BYTES_MAX}", f.text.len()),
                "split the file",
            ));
            continue;
        }
        if let Some(p) = project_of(&dir) {
            match project_dirs.get(&p) {
                Some(other) if *other != dir => problems.push(problem(
                    &f.path,
                    "",
                    "project",
                    format!("directories {other:?} and {dir:?} both make the project name {p:?}"),
                    "rename one of the directories",
                )),
                _ => {
                    project_dirs.insert(p, dir.clone());
                }
            }
        }
        let (fields, body) = front_matter(&f.text);
        let fm_concerns: Vec<String> = fields.get("concerns").map(|v| list(v)).unwrap_or_default();
        let stem = f.path.rsplit('/').next().unwrap_or(&f.path);
        let stem = stem.rsplit_once('.').map_or(stem, |s| s.0);
        let whole = !fm_concerns.is_empty() || matches!(kind, SteeringKind::CursorRule | SteeringKind::KiroSteering);
        let parts: Vec<(Option<String>, Vec<String>, String)> = if whole {
            let named = fields.get("title").or(fields.get("name")).or(fields.get("description")).cloned();
            let concerns = if fm_concerns.is_empty() { vec![kebab(stem)] } else { fm_concerns.clone() };
            vec![(named, concerns, body.trim().to_owned())]
        } else {
            sections(body)
                .into_iter()
                .filter(|s| !(s.heading.is_none() && only_headings(&s.text)))
                .map(|s| {
                    let concern = match s.heading {
                        Some(h) => bounded_name(&kebab(h), 48),
                        None => GENERAL_CONCERN.to_owned(),
                    };
                    (s.heading.map(str::to_owned), vec![concern], s.text)
                })
                .collect()
        };
        if parts.iter().all(|p| p.2.is_empty()) {
            out.empty.push(f.path.clone());
            continue;
        }
        let file_slug = kebab(&f.path);
        for (n, (head, concerns, text)) in parts.into_iter().enumerate() {
            if text.is_empty() {
                continue;
            }
            let pointer = format!("/sections/{n}");
            if text.len() > CONTENT_BYTES_MAX {
                problems.push(problem(
                    &f.path,
                    &pointer,
                    "size",
                    format!(
                        "section {:?} is {} bytes; a chunk is at most {CONTENT_BYTES_MAX}",
                        head.as_deref().unwrap_or("(before the first heading)"),
                        text.len()
                    ),
                    "split the section with headings",
                ));
                continue;
            }
            let mut concerns: Vec<String> = concerns.into_iter().filter(|c| !c.is_empty()).collect();
            for c in &concerns {
                if !valid_name(c) {
                    problems.push(problem(
                        &f.path,
                        "/concerns",
                        "name",
                        format!("concern {c:?} is not valid"),
                        super::NAME_RULE,
                    ));
                }
            }
            if concerns.is_empty() {
                concerns.push(format!("section-{n}"));
            }
            concerns.push(STEERING_CONCERN.to_owned());
            concerns.sort();
            concerns.dedup();
            let key = concerns.iter().find(|c| *c != STEERING_CONCERN).cloned().unwrap_or_default();
            let base = bounded_name(&format!("{file_slug}-{key}"), NAME_BYTES_MAX - 4);
            let mut slug = base.clone();
            let mut i = 2;
            while slugs.contains_key(&slug) {
                slug = format!("{base}-{i}");
                i += 1;
            }
            slugs.insert(slug.clone(), f.path.clone());
            let place = if dir.is_empty() { String::new() } else { format!(" ({dir})") };
            let title =
                truncate(&format!("{}{place}: {}", kind.name(), head.as_deref().unwrap_or(stem)), TITLE_BYTES_MAX);
            out.concerns.extend(concerns.iter().cloned());
            pending.push(Pending {
                draft: ChunkDraft {
                    slug,
                    title,
                    concerns,
                    project_scope: Vec::new(),
                    content: text,
                    source: f.path.clone(),
                },
                dir: dir.clone(),
            });
        }
    }
    if !problems.is_empty() {
        problems.sort();
        return Err(problems);
    }
    // Scopes: a chunk applies to its directory and every steered directory below it, except
    // where a deeper chunk shares a concern with it (the nearest file wins).
    let specific = |d: &ChunkDraft| -> BTreeSet<String> {
        d.concerns.iter().filter(|c| *c != STEERING_CONCERN).cloned().collect()
    };
    let mut scoped = Vec::with_capacity(pending.len());
    for p in &pending {
        let mine = specific(&p.draft);
        let overriders: Vec<&str> = pending
            .iter()
            .filter(|q| below(&q.dir, &p.dir) && !specific(&q.draft).is_disjoint(&mine))
            .map(|q| q.dir.as_str())
            .collect();
        let scope: BTreeSet<String> = if overriders.is_empty() {
            if p.dir.is_empty() {
                BTreeSet::new()
            } else {
                project_dirs.iter().filter(|(_, d)| **d == p.dir || below(d, &p.dir)).map(|(n, _)| n.clone()).collect()
            }
        } else {
            let mut s: BTreeSet<String> = project_dirs
                .iter()
                .filter(|(_, d)| {
                    (**d == p.dir || below(d, &p.dir)) && !overriders.iter().any(|o| **d == **o || below(d, o))
                })
                .map(|(n, _)| n.clone())
                .collect();
            if p.dir.is_empty() {
                s.insert(ROOT_PROJECT.to_owned());
            }
            s
        };
        out.projects.extend(scope.iter().cloned());
        let mut d = p.draft.clone();
        d.project_scope = scope.into_iter().collect();
        scoped.push(d);
    }
    scoped.sort_by(|a, b| a.slug.cmp(&b.slug));
    out.drafts = scoped;
    Ok(out)
}

/// What an import appends and reports.
#[derive(Clone, Debug, Default)]
pub struct ImportPlan {
    /// The chunks' versions (its `appends` include the vocabulary's, first, when any is new).
    pub put: PutPlan,
    /// Concerns and projects declared by this import.
    pub declared: (Vec<String>, Vec<String>),
    /// Files that made no chunk.
    pub empty: Vec<String>,
    /// Steering chunks this import no longer makes (their file or section is gone): retired in
    /// the same append, so they are never served again.
    pub retired: Vec<String>,
}

/// Declares the vocabulary the files need and puts their chunks, in one decision: nothing when
/// nothing changed.
pub fn import(
    k: &Knowledge,
    files: &[SteeringFile],
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<ImportPlan, Vec<IntakeProblem>> {
    let imported = chunks(files)?;
    let making: BTreeSet<&str> = imported.drafts.iter().map(|d| d.slug.as_str()).collect();
    // The import is the workspace's whole steering: a live chunk it put before that it no longer
    // makes is retired. Chunks are the import's by the steering concern every one of them has.
    let gone: Vec<String> = k
        .chunks()
        .filter(|c| !c.retired && c.concerns.iter().any(|x| x == STEERING_CONCERN) && !making.contains(c.slug.as_str()))
        .map(|c| c.slug.clone())
        .collect();
    if imported.drafts.len() + gone.len() >= super::decide::PUT_FILES_MAX {
        return Err(vec![problem(
            "",
            "",
            "size",
            format!(
                "the files make {} chunks and retire {}; one import appends at most {}",
                imported.drafts.len(),
                gone.len(),
                super::decide::PUT_FILES_MAX - 1
            ),
            "import a smaller directory with --root",
        )]);
    }
    let internal = |e: super::KnowledgeError| vec![problem("", "", "vocabulary", e.to_string(), "import fewer files")];
    let concerns: Vec<String> = imported.concerns.iter().cloned().collect();
    let projects: Vec<String> = imported.projects.iter().cloned().collect();
    let vocabulary = declare(k, &concerns, &projects, ids, clock).map_err(internal)?;
    let mut put = version_drafts(k, imported.drafts, ids, clock)?;
    let declared = (
        concerns.into_iter().filter(|c| !k.has_concern(c)).collect(),
        projects.into_iter().filter(|p| !k.has_project(p)).collect(),
    );
    for slug in &gone {
        let reason = "its steering file or section is gone from the import";
        put.appends.push(super::decide::retire(k, slug, Some(reason), ids, clock).map_err(internal)?);
    }
    if let Some(v) = vocabulary {
        put.appends.insert(0, v);
    }
    Ok(ImportPlan { put, declared, empty: imported.empty, retired: gone })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, text: &str) -> SteeringFile {
        SteeringFile { path: path.to_owned(), text: text.to_owned() }
    }

    #[test]
    fn paths_are_classified_with_the_directory_they_steer() {
        assert_eq!(classify("AGENTS.md"), Some((SteeringKind::AgentsMd, String::new())));
        assert_eq!(classify("a/b/AGENTS.override.md"), Some((SteeringKind::AgentsMd, "a/b".into())));
        assert_eq!(classify("a/.claude/CLAUDE.md"), Some((SteeringKind::ClaudeMd, "a".into())));
        assert_eq!(classify(".cursor/rules/testing.mdc"), Some((SteeringKind::CursorRule, String::new())));
        assert_eq!(classify("x/.kiro/steering/tech.md"), Some((SteeringKind::KiroSteering, "x".into())));
        assert_eq!(classify("README.md"), None);
        assert_eq!(classify(".cursor/rules/.mdc"), None);
        assert_eq!(kebab("Code style & `lint`"), "code-style-lint");
        assert_eq!(project_of("services/billing_api"), Some("services-billing-api".into()));
    }

    #[test]
    fn sections_split_at_the_repeated_level_and_the_nearest_file_wins() {
        let root = "# Project\n\nIntro line.\n\n## Testing\n\nRun cargo test.\n\n```sh\n# not a heading\n```\n\n## Style\n\nfmt.\n";
        let nested = "## Testing\n\nRun make test here.\n\n## Deploy\n\nNever on Fridays.\n";
        let got = chunks(&[file("AGENTS.md", root), file("svc/AGENTS.md", nested)]).unwrap();
        let by: BTreeMap<&str, &ChunkDraft> = got.drafts.iter().map(|d| (d.slug.as_str(), d)).collect();
        assert_eq!(by.len(), 5, "{:?}", by.keys());
        assert_eq!(by["agents-md-general"].content, "# Project\n\nIntro line.");
        assert!(by["agents-md-testing"].content.contains("# not a heading"));
        // Overridden in svc/: scoped to the root project (and nothing else, no other project).
        assert_eq!(by["agents-md-testing"].project_scope, vec![ROOT_PROJECT.to_owned()]);
        assert!(by["agents-md-style"].project_scope.is_empty());
        assert_eq!(by["svc-agents-md-testing"].project_scope, vec!["svc".to_owned()]);
        assert_eq!(by["svc-agents-md-deploy"].concerns, vec!["deploy".to_owned(), "steering".to_owned()]);
    }

    #[test]
    fn front_matter_names_concerns_and_an_override_file_replaces_agents_md() {
        let mdc = "---\ndescription: Tests\nglobs: *.ts\nalwaysApply: false\n---\nUse vitest.\n";
        let kiro = "---\ninclusion: always\nconcerns: [security, api]\n---\n# Security\nNo secrets.\n";
        let got = chunks(&[
            file(".cursor/rules/testing.mdc", mdc),
            file(".kiro/steering/sec.md", kiro),
            file("a/AGENTS.md", "old"),
            file("a/AGENTS.override.md", "new"),
            file("CLAUDE.md", "\n\n"),
        ])
        .unwrap();
        let slugs: Vec<&str> = got.drafts.iter().map(|d| d.slug.as_str()).collect();
        assert_eq!(
            slugs,
            ["a-agents-override-md-general", "cursor-rules-testing-mdc-testing", "kiro-steering-sec-md-api"]
        );
        assert_eq!(got.drafts[0].content, "new");
        assert_eq!(got.drafts[1].content, "Use vitest.");
        assert_eq!(got.drafts[1].title, "Cursor rule: Tests");
        assert_eq!(got.drafts[2].concerns, ["api", "security", "steering"]);
        assert_eq!(got.empty, ["CLAUDE.md"]);
    }
}
