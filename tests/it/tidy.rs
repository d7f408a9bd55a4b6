//! Tidy checks: the architecture's invariants, stated as absences, checked mechanically.
//!
//! * `journal` and `engine` read no wall clock, no RNG and no environment (time and ids come from
//!   ports and are recorded in events; the same journal must replay to the same state);
//! * dependencies point one way: journal ← engine ← {adapters, simulations} ← {tests, benches};
//! * every Rust file starts with a `//!` comment saying why it exists;
//! * no test is ignored without a reason;
//! * every event type the code can emit is in the engine's catalogue (so every journal imports);
//! * no crate but the engine decides a dispatch (`strata run` and the simulation share one);
//! * the engine does no I/O of its own; the simulations read no clock, OS RNG or environment;
//! * library code returns typed errors (no `anyhow` in journal, engine or simulations' library);
//! * the code and `docs/errors.md` list the same `[STRATA-E…]` codes;
//! * thread-local state lives only in the two adapter files known to hold it (to be removed).

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

/// Event-type strings the non-test code of `text` can emit: a `const NAME: &str = "ns.name"`
/// (each domain declares its types so), or a literal where an event is built (`event_type: "…"`,
/// `new_event("…"`). Comments and `#[cfg(test)]` modules (which end a file) are skipped, and file names
/// (`config.toml`) are not event types.
fn emitted_event_types(text: &str) -> Vec<(usize, String)> {
    let shapes = [
        r#"const\s+[A-Z_0-9]+\s*:\s*&(?:'static\s+)?str\s*=\s*"([^"]*)""#,
        r#"event_type\s*:\s*"([^"]*)""#,
        r#"new_event\(\s*"([^"]*)""#,
    ];
    let shapes: Vec<regex::Regex> = shapes.iter().map(|s| regex::Regex::new(s).expect("regex")).collect();
    let event_shaped = regex::Regex::new(r"^[a-z][a-z0-9]*\.[a-z][a-z0-9-]*$").expect("regex");
    let file_suffixes =
        ["json", "jsonl", "toml", "sock", "md", "rs", "pub", "key", "tmp", "txt", "html", "note", "lock"];
    let mut out = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let next = lines.get(i + 1).map_or("", |l| l.trim_start());
        if line.trim_start().starts_with("#[cfg(test)]") && next.starts_with("mod ") {
            break;
        }
        let code = line.split(" //").next().unwrap_or("");
        if code.trim_start().starts_with("//") {
            continue;
        }
        for shape in &shapes {
            for c in shape.captures_iter(code) {
                let t = &c[1];
                let suffix = t.rsplit('.').next().unwrap_or("");
                if event_shaped.is_match(t) && !file_suffixes.contains(&suffix) {
                    out.push((i + 1, t.to_owned()));
                }
            }
        }
    }
    out
}

/// The emitted types of `text` the catalogue lacks.
fn uncatalogued(text: &str) -> Vec<String> {
    emitted_event_types(text)
        .into_iter()
        .map(|(_, t)| t)
        .filter(|t| !strata_engine::is_known_event(t, strata_engine::catalogue::SCHEMA_VERSION))
        .collect()
}

#[test]
fn the_event_type_rule_catches_an_uncatalogued_type() {
    let text = concat!(
        "pub const NEW: &str = \"ce.brand-new\";\n",
        "    let e = new_event(\"workspace.renamed\", &p)?;\n",
        "    EventData { event_type: \"bench.sample\".to_owned(), .. }\n",
        "pub const KNOWN: &'static str = \"ce.lineage-reconciled\"; // catalogued\n",
        "// pub const OLD: &str = \"ce.commented-out\";\n",
        "const CONFIG: &str = \"config.toml\";\n",
        "#[cfg(test)]\n",
        "mod tests {\n",
        "const T: &str = \"test.alpha\";\n",
    );
    assert_eq!(uncatalogued(text), ["ce.brand-new", "workspace.renamed"]);
    assert_eq!(emitted_event_types(text).len(), 4);
}

#[test]
fn every_event_type_the_code_can_emit_is_catalogued() {
    let mut files = Vec::new();
    for dir in ["journal/src", "engine/src", "adapters/src", "simulations/src", "benches/src"] {
        rust_files(&root().join(dir), &mut files);
    }
    let mut found = std::collections::BTreeSet::new();
    let mut missing = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).expect("read");
        for (line, t) in emitted_event_types(&text) {
            if !strata_engine::is_known_event(&t, strata_engine::catalogue::SCHEMA_VERSION) {
                missing.push(format!("{}:{line}: {t}", f.display()));
            }
            found.insert(t);
        }
    }
    assert!(
        missing.is_empty(),
        "event types the code can emit but the catalogue lacks (add each to its domain's list, which \
         engine/src/catalogue.rs puts together):\n{}",
        missing.join("\n")
    );
    // The scan sees how the code writes its types: it finds every catalogued one.
    let unseen: Vec<&str> = strata_engine::catalogue::event_types().filter(|t| !found.contains(*t)).collect();
    assert!(unseen.is_empty(), "catalogued types the scan did not find in the code: {unseen:?}");
}

/// Calls that make up a dispatch decision: routing, resuming a warm session, sealing a capsule,
/// recording the dispatch. Only the engine's one dispatch decision (`workgroup/dispatch.rs`,
/// with `workgroup/step.rs` and the engine's own driver tests) makes them.
const DISPATCH_PARTS: &[&str] = &[
    "decide::dispatched(",
    "step::route(",
    "step::resumed(",
    "capsule_sealed(",
    "capsule_draft(",
    "## Context capsule",
    // Judging an end: the outcome, the violation, the usage report.
    "step::close(",
    "decide::violation(",
    "decide::completed(",
    "decide::failed(",
    "Request::Usage",
];

/// Lines of `text` outside comments that decide part of a dispatch themselves.
fn dispatch_copies(text: &str) -> Vec<(usize, &'static str)> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        out.extend(DISPATCH_PARTS.iter().filter(|p| code.contains(**p)).map(|p| (i + 1, *p)));
    }
    out
}

#[test]
fn the_dispatch_rule_catches_a_copy() {
    let copy = "let routed = step::route(&t, &lineage, None, &ledger, &caps, ids, clock)?;";
    assert_eq!(dispatch_copies(copy), [(1, "step::route(")]);
    assert!(dispatch_copies("// step::route( is the engine's").is_empty());
    let judged = "let closed = step::close(g, &ledger, end, |ms| ms, ids, clock)?;";
    assert_eq!(dispatch_copies(judged), [(1, "step::close(")]);
}

/// `strata run` and the simulations decide dispatches through `workgroup::dispatch` (`route`,
/// then `Cleared::brief`) and judge ends through `workgroup::judge`: neither crate holds a copy
/// of their parts.
#[test]
fn no_crate_but_the_engine_decides_a_dispatch() {
    let mut found = Vec::new();
    for krate in ["adapters", "simulations"] {
        let mut files = Vec::new();
        rust_files(&root().join(krate), &mut files);
        for f in files {
            let text = std::fs::read_to_string(&f).expect("read");
            found.extend(dispatch_copies(&text).into_iter().map(|(n, p)| format!("{}:{n}: {p}", f.display())));
        }
    }
    assert!(found.is_empty(), "dispatch or judging decided outside the engine:\n{}", found.join("\n"));
}

/// Rust files of the given directories (relative to the workspace root), with their text.
fn sources(dirs: &[&str]) -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    for dir in dirs {
        rust_files(&root().join(dir), &mut files);
    }
    assert!(!files.is_empty(), "no Rust files under {dirs:?}");
    files.sort();
    files
        .into_iter()
        .map(|f| {
            let text = std::fs::read_to_string(&f).expect("read");
            (f, text)
        })
        .collect()
}

/// Lines of `text` (1-based) whose code, outside `//` comments, matches `re`, with the match.
fn code_matches(text: &str, re: &regex::Regex) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        out.extend(re.find_iter(code).map(|m| (i + 1, m.as_str().to_owned())));
    }
    out
}

/// What doing I/O looks like in Rust source: the standard library's file, stream, network,
/// process and thread modules, tokio, and printing.
fn io_pattern() -> regex::Regex {
    regex::Regex::new(
        r"\b(?:std::)?(?:fs|io|net|process|thread)::|\btokio\b|\bFile::|\b(?:e?print(?:ln)?|dbg)!\s*\(|use std::\{[^}]*\b(?:fs|io|net|process|thread)\b",
    )
    .expect("regex")
}

#[test]
fn the_io_rule_catches_io() {
    let re = io_pattern();
    for io in [
        "let t = std::fs::read_to_string(p)?;",
        "use std::io::Write;",
        "let c = std::process::Command::new(\"git\");",
        "use std::{collections::BTreeMap, fs};",
        "println!(\"{x}\");",
        "tokio::spawn(f);",
    ] {
        assert_eq!(code_matches(io, &re).len(), 1, "{io}");
    }
    for pure in
        ["let r = ratio::of(a, b);", "// reads no std::fs: comments are fine", "use std::collections::BTreeMap;"]
    {
        assert!(code_matches(pure, &re).is_empty(), "{pure}");
    }
}

/// The engine is pure: it reaches the journal through `strata-journal`'s API and everything else
/// through its ports, so none of its files names a file, stream, socket, process or thread API.
#[test]
fn the_engine_does_no_io() {
    let re = io_pattern();
    let mut bad = Vec::new();
    for (f, text) in sources(&["engine/src"]) {
        bad.extend(code_matches(&text, &re).into_iter().map(|(n, m)| format!("{}:{n}: `{m}`", f.display())));
    }
    assert!(bad.is_empty(), "the engine does I/O only through its ports:\n{}", bad.join("\n"));
}

/// The simulations reproduce a run from its seed: time is `SimClock`, ids are `SeededIds`, and
/// every random draw comes from a ChaCha stream the seed derives (`rand`'s traits are fine).
#[test]
fn the_simulations_read_no_clock_os_rng_or_environment() {
    let extra = ["rand::rng(", "from_os_rng", "from_entropy"];
    let mut bad = Vec::new();
    for (f, text) in sources(&["simulations/src"]) {
        for (i, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            let hits = FORBIDDEN.iter().filter(|(p, _)| *p != "rand::").map(|(p, _)| *p).chain(extra);
            bad.extend(hits.filter(|p| code.contains(p)).map(|p| format!("{}:{}: `{p}`", f.display(), i + 1)));
        }
    }
    assert!(bad.is_empty(), "simulations take time and randomness from the seed only:\n{}", bad.join("\n"));
}

/// Library crates return typed errors (thiserror enums); `anyhow` is for the binaries and tests.
#[test]
fn library_code_returns_typed_errors() {
    for manifest in ["journal/Cargo.toml", "engine/Cargo.toml", "simulations/Cargo.toml"] {
        assert!(!dependencies(manifest).contains(&"anyhow".to_owned()), "{manifest} depends on anyhow");
    }
    let re = regex::Regex::new(r"\banyhow\b").expect("regex");
    let mut bad = Vec::new();
    for (f, text) in sources(&["journal/src", "engine/src", "simulations/src"]) {
        bad.extend(code_matches(&text, &re).into_iter().map(|(n, _)| format!("{}:{n}", f.display())));
    }
    assert!(bad.is_empty(), "anyhow in library code (return a typed error enum):\n{}", bad.join("\n"));
}

/// The `STRATA-Ennnn` codes named in `text`.
fn error_codes(text: &str) -> std::collections::BTreeSet<String> {
    let re = regex::Regex::new(r"STRATA-E[0-9]{4}").expect("regex");
    re.find_iter(text).map(|m| m.as_str().to_owned()).collect()
}

/// The codes `docs/errors.md` lists: the first cell of each table row, each listed once.
fn listed_error_codes(doc: &str) -> Result<std::collections::BTreeSet<String>, String> {
    let mut listed = std::collections::BTreeSet::new();
    for line in doc.lines() {
        let Some(cell) = line.strip_prefix("| STRATA-E").and_then(|r| r.split('|').next()) else { continue };
        let code = format!("STRATA-E{}", cell.trim());
        if error_codes(&code).len() != 1 || !listed.insert(code.clone()) {
            return Err(format!("bad or repeated row for {code}"));
        }
    }
    Ok(listed)
}

#[test]
fn the_error_code_rule_reads_codes_and_rows() {
    let named = error_codes("[STRATA-E0101] bad name; codes are `STRATA-E2301..E2399`; `STRATA-Exxxx`");
    assert_eq!(named.into_iter().collect::<Vec<_>>(), ["STRATA-E0101", "STRATA-E2301"]);
    let doc = "| code | meaning |\n|---|---|\n| STRATA-E0100 | conflict |\n| STRATA-E0101 | name |\n";
    assert_eq!(listed_error_codes(doc).expect("rows").len(), 2);
    assert!(listed_error_codes("| STRATA-E0100 | a |\n| STRATA-E0100 | b |\n").is_err());
}

/// Every code the code can report is listed in `docs/errors.md`, every listed code is still
/// used by the code, and the tests and the other documents name only listed codes.
#[test]
fn the_code_and_docs_errors_md_list_the_same_error_codes() {
    let doc = std::fs::read_to_string(root().join("docs/errors.md")).expect("docs/errors.md");
    let listed = listed_error_codes(&doc).expect("docs/errors.md rows");
    assert_eq!(listed, error_codes(&doc), "docs/errors.md names a code outside its table");
    let mut used = std::collections::BTreeSet::new();
    for (_, text) in sources(&["journal/src", "engine/src", "adapters/src", "simulations/src", "benches/src"]) {
        used.extend(error_codes(&text));
    }
    let unlisted: Vec<&String> = used.difference(&listed).collect();
    assert!(unlisted.is_empty(), "codes the code uses but docs/errors.md does not list: {unlisted:?}");
    let unused: Vec<&String> = listed.difference(&used).collect();
    assert!(unused.is_empty(), "codes docs/errors.md lists but no code uses: {unused:?}");
    let mut named = Vec::new();
    for (f, text) in sources(&["tests"]) {
        named.extend(error_codes(&text).into_iter().map(|c| (f.display().to_string(), c)));
    }
    for doc in ["README.md", "ARCHITECTURE.md", "BENCHMARKS.md", "docs", "skills"] {
        let path = root().join(doc);
        let mut docs = vec![];
        if path.is_dir() {
            markdown_files(&path, &mut docs);
        } else {
            docs.push(path);
        }
        for d in docs {
            let text = std::fs::read_to_string(&d).expect("read");
            named.extend(error_codes(&text).into_iter().map(|c| (d.display().to_string(), c)));
        }
    }
    let unknown: Vec<String> =
        named.into_iter().filter(|(_, c)| !listed.contains(c)).map(|(f, c)| format!("{f}: {c}")).collect();
    assert!(unknown.is_empty(), "codes named but not listed in docs/errors.md:\n{}", unknown.join("\n"));
}

fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read dir") {
        let p = entry.expect("entry").path();
        if p.is_dir() {
            markdown_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "md") {
            out.push(p);
        }
    }
}

/// Thread-local state hides what a call depends on. A command reaches its journal, its caller's
/// working directory, its stdin and where its output goes (`output::Out`: the process's streams,
/// or the daemon client's buffers) through the `Workspace` it is given.
#[test]
fn no_thread_local_state() {
    let known: [&str; 0] = [];
    let re = regex::Regex::new(r"\bthread_local!").expect("regex");
    let mut bad = Vec::new();
    for (f, text) in sources(&["journal/src", "engine/src", "adapters/src", "simulations/src", "benches/src"]) {
        if known.iter().any(|k| f.ends_with(k)) {
            continue;
        }
        bad.extend(code_matches(&text, &re).into_iter().map(|(n, _)| format!("{}:{n}", f.display())));
    }
    assert!(bad.is_empty(), "new thread-local state (pass it as an argument instead):\n{}", bad.join("\n"));
}

/// Where the adapters append to a journal directly, and why that place cannot use
/// `app::append::decide_and_append` (everything else decides and appends through it).
const DIRECT_APPENDS: [(&str, &str); 6] = [
    ("adapters/src/app/append.rs", "the one decide-and-append itself"),
    ("adapters/src/app/workspace.rs", "`workspace.initialized`, the first event of a new journal"),
    (
        "adapters/src/coordinator/shared.rs",
        "`strata run` appends under its coordinator lease (renewal in the same batch, fenced)",
    ),
    ("adapters/src/coordinator/runner.rs", "a worker's events as they stream in, on the worker's own stream"),
    ("adapters/src/cli/hook.rs", "a write-guard decision, recorded within the hook's deadline"),
    ("adapters/src/harness.rs", "the Knowledge API's serve records, appended asynchronously"),
];

fn direct_appends(text: &str) -> Vec<(usize, String)> {
    // The journal's append methods; `.append(` with three arguments is its async single-stream
    // one (a `Vec::append` takes one).
    let re = regex::Regex::new(r"\.append_(?:multi|blocking)\w*\(|\.append\([^,)]*,[^,)]*,").expect("regex");
    code_matches(text, &re)
}

#[test]
fn the_append_rule_catches_a_direct_append() {
    assert_eq!(direct_appends("    journal.append_multi_blocking(vec![a])?;\n").len(), 1);
    assert_eq!(direct_appends("    j.append_multi(vec![a]).await\n").len(), 1);
    assert_eq!(direct_appends("    j.append(\"s\", ExpectedVersion::Any, evs).await\n").len(), 1);
    assert!(direct_appends("    // journal.append_multi_blocking(x)\n    v.append(&mut w);\n").is_empty());
    assert!(direct_appends("    decide_and_append(&journal, &mut g, |g| decide(g))\n").is_empty());
}

/// Every command decides and appends through `app::append::decide_and_append`, with its one
/// retry rule; a new direct append must say here why it cannot.
#[test]
fn commands_append_only_through_the_one_decide_and_append() {
    let mut bad = Vec::new();
    for (f, text) in sources(&["adapters/src"]) {
        if DIRECT_APPENDS.iter().any(|(k, _)| f.ends_with(k)) {
            continue;
        }
        bad.extend(direct_appends(&text).into_iter().map(|(n, m)| format!("{}:{n}: {m}", f.display())));
    }
    assert!(bad.is_empty(), "direct journal appends (decide and append through app::append):\n{}", bad.join("\n"));
}

/// A journal is opened or created in one place, `app::workspace` (its one open policy: the
/// workspace config's backend, durability, cache and lock wait); `journal verify` reads a
/// PostgreSQL store directly, without opening a journal on it.
#[test]
fn journals_are_opened_only_by_the_one_open_policy() {
    let re = regex::Regex::new(r"Journal::(?:open|create)\w*\(|\b(?:SledStore|PgStore)::(?:open|connect)\w*\(")
        .expect("regex");
    assert_eq!(
        code_matches("    Journal::open_postgres_at(&pg, &dir)?;\n    Journal::in_memory(\"x\")\n", &re).len(),
        1
    );
    let allowed = [("adapters/src/app/workspace.rs", ""), ("adapters/src/cli/journal.rs", "PgStore::connect(")];
    let mut bad = Vec::new();
    for (f, text) in sources(&["adapters/src"]) {
        for (n, m) in code_matches(&text, &re) {
            if !allowed.iter().any(|(file, what)| f.ends_with(file) && (what.is_empty() || m == *what)) {
                bad.push(format!("{}:{n}: {m}", f.display()));
            }
        }
    }
    assert!(bad.is_empty(), "journals opened outside app::workspace::open_at:\n{}", bad.join("\n"));
}

/// The typed dispatch core: every file directly in `engine/src/ce/` (router, result policy,
/// budget rules, lineage, ledger, ownership, capsule, privacy, paths, times, digests, errors).
/// JSON documents belong to the wire adapter beneath it, `engine/src/ce/wire/`.
fn dispatch_core() -> Vec<(PathBuf, String)> {
    let dir = root().join("engine/src/ce");
    let mut core: Vec<(PathBuf, String)> =
        sources(&["engine/src/ce"]).into_iter().filter(|(f, _)| f.parent() == Some(dir.as_path())).collect();
    core.sort();
    core
}

/// A JSON document in Rust source: `serde_json::Value` (or its map or module), a `Value` however
/// imported, or the `json!` macro that builds one.
fn json_value_pattern() -> regex::Regex {
    regex::Regex::new(r"\bserde_json::(?:Value|Map|value)\b|\bValue\b|\bjson!").expect("regex")
}

#[test]
fn the_json_value_rule_catches_a_use() {
    let re = json_value_pattern();
    let found = |text: &str| code_matches(text, &re);
    assert_eq!(found("use serde_json::{Value, json};"), [(1, "Value".to_owned())]);
    assert_eq!(found("fn f(v: &serde_json::Value) {}"), [(1, "serde_json::Value".to_owned())]);
    assert_eq!(found("let m: serde_json::Map<String, V> = x;"), [(1, "serde_json::Map".to_owned())]);
    assert_eq!(found("let x = 1;\nlet y = json!({});"), [(2, "json!".to_owned())]);
    assert!(found("// a Value in a comment\nlet s = serde_json::to_string(&c)?;").is_empty());
}

/// Routing, lineage, the ledger and ownership, the capsule and privacy work on typed values;
/// only the wire adapter converts requests and answers to and from JSON.
#[test]
fn no_serde_json_value_in_the_typed_dispatch_core() {
    let core = dispatch_core();
    let names: Vec<String> =
        core.iter().filter_map(|(f, _)| Some(f.file_name()?.to_string_lossy().into_owned())).collect();
    for must in
        ["router.rs", "policy.rs", "budget.rs", "lineage.rs", "ledger.rs", "ownership.rs", "capsule.rs", "privacy.rs"]
    {
        assert!(names.iter().any(|n| n == must), "{must} is not in the typed dispatch core: {names:?}");
    }
    let re = json_value_pattern();
    let mut bad = Vec::new();
    for (f, text) in &core {
        bad.extend(code_matches(text, &re).into_iter().map(|(n, m)| format!("{}:{n}: {m}", f.display())));
    }
    assert!(bad.is_empty(), "JSON in the typed dispatch core (convert in engine/src/ce/wire/):\n{}", bad.join("\n"));
}
