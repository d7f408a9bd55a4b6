//! Tidy checks: the architecture's invariants, stated as absences, checked mechanically.
//!
//! * `journal` and `engine` read no wall clock, no RNG and no environment (time and ids come from
//!   ports and are recorded in events; the same journal must replay to the same state);
//! * dependencies point one way: journal ← engine ← {adapters, simulations} ← {tests, benches};
//! * every Rust file starts with a `//!` comment saying why it exists;
//! * no test is ignored without a reason.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_owned()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read dir") {
        let p = entry.expect("entry").path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n == "target") {
                continue;
            }
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// Patterns that read the clock, an RNG or the environment.
const FORBIDDEN: &[(&str, &str)] = &[
    ("SystemTime", "wall clock"),
    ("Instant::now", "monotonic clock"),
    ("now_utc", "wall clock"),
    ("now_local", "wall clock"),
    ("now_v7", "clock-derived id"),
    ("new_v4", "random id"),
    ("thread_rng", "global RNG"),
    ("rand::", "RNG"),
    ("OsRng", "RNG"),
    ("getrandom", "RNG"),
    ("std::env", "environment"),
    ("env::var", "environment"),
    ("env!(", "build environment"),
];

/// Lines of `text` (with 1-based numbers) that use a forbidden pattern outside comments.
fn violations(text: &str) -> Vec<(usize, &'static str, &'static str)> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        for (pat, what) in FORBIDDEN {
            if code.contains(pat) {
                out.push((i + 1, *pat, *what));
            }
        }
    }
    out
}

#[test]
fn the_checker_catches_what_it_should() {
    assert_eq!(violations("let t = std::time::SystemTime::now();").len(), 1);
    assert_eq!(violations("let v = std::env::var(\"X\");").len(), 2);
    assert!(violations("// reads no SystemTime: comments are fine").is_empty());
    assert!(violations("let id = ids.next_id();").is_empty());
}

#[test]
fn journal_and_engine_read_no_clock_rng_or_environment() {
    let mut bad = Vec::new();
    for krate in ["journal", "engine"] {
        let mut files = Vec::new();
        rust_files(&root().join(krate).join("src"), &mut files);
        assert!(!files.is_empty());
        for f in files {
            let text = std::fs::read_to_string(&f).expect("read");
            for (line, pat, what) in violations(&text) {
                bad.push(format!("{}:{line}: `{pat}` ({what})", f.display()));
            }
        }
    }
    assert!(bad.is_empty(), "journal/engine must get time, ids and randomness through ports:\n{}", bad.join("\n"));
}

fn dependencies(manifest: &str) -> Vec<String> {
    let text = std::fs::read_to_string(root().join(manifest)).expect("manifest");
    let mut deps = Vec::new();
    let mut in_deps = false;
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            in_deps = t == "[dependencies]";
            continue;
        }
        if in_deps && let Some((name, _)) = t.split_once(['=', '.']) {
            let name = name.trim();
            if !name.is_empty() && !name.starts_with('#') {
                deps.push(name.to_owned());
            }
        }
    }
    deps
}

#[test]
fn dependencies_point_one_way() {
    let journal = dependencies("journal/Cargo.toml");
    assert!(!journal.iter().any(|d| d.starts_with("strata-")), "journal depends on {journal:?}");
    for forbidden in ["rand", "rand_chacha", "getrandom"] {
        assert!(!journal.contains(&forbidden.to_owned()), "journal depends on {forbidden}");
    }
    let engine = dependencies("engine/Cargo.toml");
    assert!(engine.contains(&"strata-journal".to_owned()));
    for forbidden in ["strata-adapters", "strata-simulations", "rand", "getrandom", "tokio"] {
        assert!(!engine.contains(&forbidden.to_owned()), "engine depends on {forbidden}");
    }
    for upper in ["adapters/Cargo.toml", "simulations/Cargo.toml"] {
        let deps = dependencies(upper);
        assert!(!deps.contains(&"strata-tests".to_owned()) && !deps.contains(&"strata-benches".to_owned()), "{upper}");
    }
    assert!(!dependencies("simulations/Cargo.toml").contains(&"strata-adapters".to_owned()));
}

#[test]
fn every_rust_file_says_why_it_exists() {
    let mut files = Vec::new();
    for krate in ["journal", "engine", "adapters", "simulations", "tests", "benches"] {
        rust_files(&root().join(krate), &mut files);
    }
    let missing: Vec<String> = files
        .iter()
        .filter(|f| !std::fs::read_to_string(f).expect("read").starts_with("//!"))
        .map(|f| f.display().to_string())
        .collect();
    assert!(missing.is_empty(), "files without a leading //! comment:\n{}", missing.join("\n"));
}

#[test]
fn no_test_is_ignored_without_a_reason() {
    let mut files = Vec::new();
    for krate in ["journal", "engine", "adapters", "simulations", "tests", "benches"] {
        rust_files(&root().join(krate), &mut files);
    }
    let needle = ["#[ig", "nore]"].concat();
    let bad: Vec<String> = files
        .iter()
        .filter(|f| std::fs::read_to_string(f).expect("read").contains(&needle))
        .map(|f| f.display().to_string())
        .collect();
    assert!(
        bad.is_empty(),
        "bare ignore attributes (give a reason: `ignore = \"needs …; CI runs them\"`):\n{}",
        bad.join("\n")
    );
}
