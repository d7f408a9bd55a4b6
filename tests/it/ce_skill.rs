//! The coordinator skill shipped in `skills/strata/`: startup loads only the skill body (the
//! critical path), and platform, role, relay, schema and quality guidance sit in references read
//! only when the chosen path needs them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use strata_engine::ce::OPERATIONS;
use strata_engine::ce::wire::journaled::LEDGER_OPERATIONS;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned()
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// (front matter, body) of SKILL.md.
fn skill() -> (String, String) {
    let text = read(&root().join("skills/strata/SKILL.md"));
    let rest = text.strip_prefix("---\n").expect("SKILL.md starts with front matter");
    let (front, body) = rest.split_once("\n---\n").expect("front matter is closed");
    (front.to_owned(), body.to_owned())
}

fn references() -> Vec<(String, String)> {
    let dir = root().join("skills/strata/references");
    let mut v: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            (format!("references/{}", p.file_name().unwrap().to_string_lossy()), read(&p))
        })
        .collect();
    v.sort();
    v
}

/// Markdown link targets under `references/` in `text`, with the line each is on.
fn links(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut rest = line;
        while let Some(i) = rest.find("](references/") {
            let tail = &rest[i + 2..];
            let end = tail.find(')').expect("link closes");
            out.push((tail[..end].to_owned(), line.to_owned()));
            rest = &tail[end..];
        }
    }
    out
}

#[test]
fn ceo_08_skill_startup_uses_progressive_references() {
    let (front, body) = skill();
    assert!(front.lines().any(|l| l.trim() == "name: strata"), "{front}");
    let description: String =
        front.split_once("description:").unwrap().1.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(description.contains("Use when") && description.len() <= 1024, "{description}");

    // Every reference is reachable from the body, every link resolves, and each link is a row
    // of the "read only when" table whose first cell is the condition.
    let refs = references();
    let linked: BTreeSet<String> = links(&body).into_iter().map(|(t, _)| t).collect();
    let present: BTreeSet<String> = refs.iter().map(|(n, _)| n.clone()).collect();
    assert_eq!(linked, present, "linked references and files differ");
    let table = body.split_once("## Read a reference only when").expect("the conditional table").1;
    for (target, line) in links(&body) {
        assert!(table.contains(&line), "{target} is linked outside the conditional table");
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        assert!(cells.len() >= 4 && !cells[1].is_empty() && cells[2].contains(&target), "{line}");
    }
    assert_eq!(links(&body).len(), present.len(), "each reference is linked once, under one condition");

    // Startup loads only the body: smaller than the references together, and not duplicating
    // any of their lines (one canonical owner for each block).
    let body_tokens = strata_engine::tokens::count(&body);
    let refs_tokens: usize = refs.iter().map(|(_, t)| strata_engine::tokens::count(t)).sum();
    assert!(body_tokens <= 900, "the skill body is {body_tokens} tokens");
    assert!(body_tokens < refs_tokens, "body {body_tokens} tokens, references {refs_tokens}");
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    for (name, text) in &refs {
        assert!(!text.contains("](references/") && !text.contains("SKILL.md"), "{name} chains to other documents");
        for line in text.lines().map(str::trim).filter(|l| l.len() >= 30) {
            assert!(!body.contains(line), "{name} duplicates the body: {line}");
            assert!(seen.insert(line), "{name} repeats a line another reference owns: {line}");
        }
    }

    // A Claude Code path never needs the Codex document and the other way round.
    let text_of = |n: &str| refs.iter().find(|(name, _)| name == n).unwrap().1.to_lowercase();
    assert!(!text_of("references/claude.md").contains("codex"));
    assert!(!text_of("references/codex.md").contains("claude"));
}

#[test]
fn the_skill_names_only_operations_and_files_that_exist() {
    let (_, body) = skill();
    let mut all = body.clone();
    for (_, t) in references() {
        all.push_str(&t);
    }
    let mut ops = BTreeSet::new();
    for part in all.split("`strata ce ").skip(1) {
        ops.insert(part.split([' ', '`']).next().unwrap().to_owned());
    }
    assert!(ops.len() >= 5, "{ops:?}");
    for op in &ops {
        assert!(OPERATIONS.contains(&op.as_str()) || LEDGER_OPERATIONS.contains(&op.as_str()), "strata ce {op}");
    }
    for part in all.split('`').skip(1).step_by(2) {
        if (part.starts_with("schemas/") || part.starts_with("docs/")) && !part.contains(' ') {
            assert!(root().join(part).is_file(), "{part} does not exist");
        }
    }
    let out = std::process::Command::new(strata_tests::strata_bin!()).args(["mcp", "--help"]).output().unwrap();
    assert!(out.status.success(), "strata mcp exists");
}
