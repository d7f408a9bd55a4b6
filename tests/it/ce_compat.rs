//! `strata ce` where it now answers as the reference runtime does (issue 26), driven through
//! the real binary: a capsule's given hash is replaced by the seal (a strata `verify` flag
//! checks it instead), privacy comes before every other refusal, a malformed hash is a schema
//! violation, exact-content vault duplicates are skipped, a real workspace's symbolic links are
//! discovered at the edge and decided on as link facts (recorded with `--journal`); and what the
//! `externalized` record strata keeps costs against `max_bytes`.

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};
use strata_engine::ce::ledger;
use strata_journal::Journal;

/// The seal of `tests/fixtures/ce/capsule-draft.json` (Node 20, see `ce_capsule`).
const DRAFT_HASH: &str = "sha256:cc5ed0b71f6e4b716615636969feac803e69a1e0f4245b59dfd6201a818fa357";

fn draft() -> Value {
    serde_json::from_str(include_str!("../fixtures/ce/capsule-draft.json")).unwrap()
}

fn with(mut v: Value, k: &str, x: Value) -> Value {
    v[k] = x;
    v
}

/// Runs `strata ce OP [--journal J]` in `dir` on `request`: exit code and the one output line.
fn ce(dir: &Path, op: &str, journal: Option<&Path>, request: &Value) -> (i32, Value) {
    let mut cmd = Command::new(strata_tests::strata_bin!());
    cmd.current_dir(dir).args(["ce", op]);
    if let Some(j) = journal {
        cmd.arg("--journal").arg(j);
    }
    let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(request.to_string().as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(stdout.lines().count(), 1, "exactly one line: {stdout:?}");
    assert!(out.stderr.is_empty(), "nothing on stderr: {}", String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), serde_json::from_str(stdout.trim()).unwrap())
}

/// The code of a rejection (exit 1), or "ok" with exit 0.
fn code(out: (i32, Value)) -> String {
    match out {
        (0, v) if v["ok"] == true => "ok".to_owned(),
        (1, v) if v["ok"] == false => v["code"].as_str().unwrap().to_owned(),
        other => panic!("not a wire answer: {other:?}"),
    }
}

/// Every event of the journal at `dir`, as (type, payload).
fn events(dir: &Path) -> Vec<(String, Value)> {
    let j = Journal::open(dir, &strata_tests::options(strata_journal::Durability::Process)).unwrap();
    let mut out = Vec::new();
    j.scan(1, j.head().seq, |r, _| {
        out.push((r.event_type.to_owned(), serde_json::from_slice(r.payload).unwrap()));
        Ok::<bool, String>(true)
    })
    .unwrap()
    .unwrap();
    j.close_blocking().unwrap();
    out
}

#[test]
fn a_placeholder_or_stale_hash_is_replaced_by_the_seal_and_verify_checks_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // The reference's fixtures send 64 zeros and expect the sealed capsule back.
    let placeholder = with(draft(), "capsule_hash", json!(format!("sha256:{}", "0".repeat(64))));
    let (status, out) = ce(dir, "capsule", None, &json!({"capsule": placeholder}));
    assert_eq!((status, &out["result"]["capsule_hash"]), (0, &json!(DRAFT_HASH)), "{out}");
    let sealed = out["result"].clone();
    // A stale seal (content edited after sealing) is replaced too.
    let edited = with(sealed.clone(), "next_action", json!("Rerun the ledger tests, then stop."));
    let (_, out) = ce(dir, "capsule", None, &json!({"capsule": edited}));
    let resealed = out["result"]["capsule_hash"].as_str().unwrap().to_owned();
    assert!(resealed.starts_with("sha256:") && resealed != DRAFT_HASH, "{out}");
    // `verify` (strata) answers whether a handed-back capsule is the one its hash names.
    assert_eq!(code(ce(dir, "capsule", None, &json!({"capsule": sealed, "verify": true}))), "ok");
    assert_eq!(code(ce(dir, "capsule", None, &json!({"capsule": edited, "verify": true}))), "CAPSULE_HASH_MISMATCH");
    assert_eq!(
        code(ce(dir, "capsule", None, &json!({"capsule": placeholder, "verify": true}))),
        "CAPSULE_HASH_MISMATCH"
    );
    assert_eq!(code(ce(dir, "capsule", None, &json!({"capsule": draft(), "verify": true}))), "CAPSULE_HASH_MISMATCH");
    assert_eq!(code(ce(dir, "capsule", None, &json!({"capsule": sealed, "verify": false}))), "ok");
    assert_eq!(code(ce(dir, "capsule", None, &json!({"capsule": sealed, "verify": "yes"}))), "INVALID_REQUEST");
    // With a journal the record holds the seal strata computed, never the hash handed in; a
    // refused verification appends nothing (here: creates no journal at all).
    let journal = dir.join("journal");
    let refused = ce(dir, "capsule", Some(&journal), &json!({"capsule": edited, "verify": true}));
    assert_eq!(code(refused), "CAPSULE_HASH_MISMATCH");
    assert!(!journal.exists());
    let (status, out) = ce(dir, "capsule", Some(&journal), &json!({"capsule": placeholder}));
    assert_eq!((status, &out["result"]["capsule_hash"]), (0, &json!(DRAFT_HASH)));
    let recorded = events(&journal);
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].0, ledger::CAPSULE_SEALED);
    assert_eq!(recorded[0].1["capsule_hash"], DRAFT_HASH);
}

#[test]
fn privacy_comes_first_and_a_malformed_hash_is_a_schema_violation() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let capsule = |c: Value| code(ce(dir, "capsule", None, &json!({"capsule": c})));
    // A hash of another form fails the schema's pattern; it is not "a different seal".
    for bad in [format!("md5:{}", "a".repeat(32)), format!("sha256:{}", "A".repeat(64)), "sha256:abc".to_owned()] {
        assert_eq!(capsule(with(draft(), "capsule_hash", json!(bad))), "CAPSULE_SCHEMA_INVALID", "{bad}");
    }
    // A secret-like value and an absolute file reference: private content, privacy first, even
    // for token shapes strata's scanner lets pass in an accepted capsule.
    let absolute = with(draft(), "owned_files", json!(["/etc/passwd"]));
    assert_eq!(capsule(absolute.clone()), "CAPSULE_ARTIFACT_REF_INVALID");
    for secret in ["use ghp_abcdefghijklmnopqrstuvwxyz0123456789", "key sk-abc12345", "resume run-abcdefgh"] {
        assert_eq!(
            capsule(with(absolute.clone(), "next_action", json!(secret))),
            "CAPSULE_PRIVATE_CONTENT",
            "{secret}"
        );
    }
    let outside = with(draft(), "artifact_refs", json!(["logs/x.txt"]));
    assert_eq!(capsule(with(outside, "risks", json!(["Bearer abcdefgh"]))), "CAPSULE_PRIVATE_CONTENT");
    // Prose that only the reference's shapes would flag still passes in an accepted capsule.
    assert_eq!(capsule(with(draft(), "next_action", json!("Use sk-learn-compatible estimators"))), "ok");

    // Telemetry: a secret-like value is PRIVATE_TELEMETRY though its field also fails its enum.
    let event = |k: &str, v: &str| {
        let mut e = json!({"event": "worker_usage", "observed_at": "2026-11-30T12:00:00Z", "provider": "claude"});
        e[k] = json!(v);
        code(ce(dir, "telemetry", None, &json!({"event": e})))
    };
    for (k, v) in [("model", "sk-abc12345"), ("profile", "Bearer abcdefgh"), ("task_corpus_id", "run-abcdefgh")] {
        assert_eq!(event(k, v), "PRIVATE_TELEMETRY", "{k}: {v}");
    }
    assert_eq!(event("model", "arbitrary-unapproved-model"), "EFFICIENCY_EVENT_INVALID");
    assert_eq!(event("model", "sonnet"), "ok");
}

#[test]
fn an_exact_content_duplicate_is_skipped_under_a_new_semantic_key() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let delta = |key: &str| json!({"category": "pattern", "title": "Retry policy", "content": "Retry three times.", "semantic_key": key});
    let stateless = json!({"input": {"delta": delta("new-key"), "previous_deltas": [delta("old-key")]}});
    let (_, out) = ce(dir, "vault-delta", None, &stateless);
    assert_eq!(out["result"], json!({"action": "skip", "reason": "SEMANTIC_DUPLICATE"}));
    // Changed content under a new key is still new knowledge.
    let mut other = delta("new-key");
    other["content"] = json!("Retry five times.");
    let (_, out) =
        ce(dir, "vault-delta", None, &json!({"input": {"delta": other, "previous_deltas": [delta("old-key")]}}));
    assert_eq!(out["result"], json!({"action": "batch", "reason": "NORMAL_DELTA"}));
    // Against the journal's records: the duplicate is skipped and nothing is appended.
    let journal = dir.join("journal");
    let (_, out) = ce(dir, "vault-delta", Some(&journal), &json!({"input": {"delta": delta("old-key")}}));
    assert_eq!(out["result"]["action"], "batch");
    let before = events(&journal).len();
    let (_, out) = ce(dir, "vault-delta", Some(&journal), &json!({"input": {"delta": delta("new-key")}}));
    assert_eq!(out["result"], json!({"action": "skip", "reason": "SEMANTIC_DUPLICATE"}));
    assert_eq!(events(&journal).len(), before);
}

#[test]
fn the_externalized_record_counts_toward_max_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let evidence: Vec<Value> =
        (0..6).map(|i| json!({"kind": "test", "summary": format!("case {i}: {}", "e".repeat(300))})).collect();
    let path = "knowzcode/artifacts/wg-7/evidence.json";
    let req = |max: usize| {
        json!({"capsule": with(draft(), "evidence", json!(evidence)), "max_bytes": max,
               "artifact_path": path, "artifact_roots": ["knowzcode/artifacts"]})
    };
    let (status, out) = ce(dir, "capsule", None, &req(1500));
    assert_eq!(status, 0, "{out}");
    let sealed = &out["result"];
    let bytes = strata_engine::ce::json::to_string(sealed).len();
    let record = format!(",\"externalized\":{}", strata_engine::ce::json::to_string(&sealed["externalized"]));
    assert_eq!(record.len(), 126 + path.len() + 1, "the size docs/compat.md gives");
    // What the reference would return (the same capsule without the record) fits `bytes - record`;
    // strata's needs the record's bytes too.
    assert_eq!(code(ce(dir, "capsule", None, &req(bytes - record.len()))), "CAPSULE_MANDATORY_OVERFLOW");
    assert_eq!(code(ce(dir, "capsule", None, &req(bytes - 1))), "CAPSULE_MANDATORY_OVERFLOW");
    let (status, out) = ce(dir, "capsule", None, &req(bytes));
    assert_eq!((status, &out["result"]), (0, sealed));
}

// ---- a real workspace's symbolic links ----

/// A workspace: `third_party/lib/x.rs`, `docs/notes.md`, and links `vendor/lib` →
/// `../third_party/lib` (relative), `notes.md` → `docs/notes.md` (a file), `abs` → the absolute
/// path of `third_party`, `out` → a directory outside the workspace.
fn workspace(tmp: &Path) -> std::path::PathBuf {
    let ws = tmp.join("ws");
    std::fs::create_dir_all(ws.join("third_party/lib")).unwrap();
    std::fs::create_dir_all(ws.join("vendor")).unwrap();
    std::fs::create_dir_all(ws.join("docs")).unwrap();
    std::fs::create_dir_all(tmp.join("elsewhere")).unwrap();
    std::fs::write(ws.join("third_party/lib/x.rs"), "fn x() {}\n").unwrap();
    std::fs::write(ws.join("docs/notes.md"), "notes\n").unwrap();
    std::os::unix::fs::symlink("../third_party/lib", ws.join("vendor/lib")).unwrap();
    std::os::unix::fs::symlink("docs/notes.md", ws.join("notes.md")).unwrap();
    std::os::unix::fs::symlink(ws.join("third_party"), ws.join("abs")).unwrap();
    std::os::unix::fs::symlink(tmp.join("elsewhere"), ws.join("out")).unwrap();
    ws
}

/// `route` of a writer owning `mine` while another owns `theirs`, under `root`.
fn claim(root: &Value, mine: &str, theirs: &str) -> Value {
    json!({"input": {"workspace_root": root, "owned_files": [mine], "active_writers": [{"owned_files": [theirs]}]}})
}

fn route(dir: &Path, req: &Value) -> String {
    match ce(dir, "route", None, req) {
        (0, v) => v["result"]["reason_codes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_str().unwrap())
            .collect::<Vec<_>>()
            .join(","),
        (_, v) => v["code"].as_str().unwrap().to_owned(),
    }
}

#[test]
fn paths_that_are_one_file_through_a_link_conflict_and_a_link_out_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = workspace(tmp.path());
    let root = json!(ws.to_str().unwrap());
    let conflict = "WRITER_OWNERSHIP_CONFLICT";
    for (mine, theirs) in [
        ("vendor/lib/x.rs", "third_party/lib/x.rs"),
        ("third_party/lib", "vendor/lib/x.rs"),
        ("notes.md", "docs/notes.md"),
        ("abs/lib/x.rs", "vendor/lib"),
        ("vendor/lib/X.rs", "third_party/lib/x.rs"),
    ] {
        assert_eq!(route(tmp.path(), &claim(&root, mine, theirs)), conflict, "{mine} / {theirs}");
    }
    assert_eq!(route(tmp.path(), &claim(&root, "vendor/lib/y.rs", "third_party/lib/x.rs")), "INDEPENDENT_CAPSULE");
    // A path whose link leaves the workspace is refused; so is an empty root, as in the reference.
    assert_eq!(route(tmp.path(), &claim(&root, "out/x.rs", "docs")), "INVALID_OWNERSHIP_PATH");
    assert_eq!(route(tmp.path(), &claim(&json!(""), "src/a.rs", "docs")), "INVALID_OWNERSHIP_PATH");
    // A root given relative to the working directory works the same.
    assert_eq!(route(tmp.path(), &claim(&json!("ws"), "notes.md", "docs")), conflict);
    // A root that does not exist keeps the lexical model: no link is known.
    let missing = json!(tmp.path().join("nowhere").to_str().unwrap());
    assert_eq!(route(tmp.path(), &claim(&missing, "vendor/lib/x.rs", "third_party/lib/x.rs")), "INDEPENDENT_CAPSULE");
    // Link facts the request states must agree with the file system.
    let mut stated = claim(&root, "vendor/lib/x.rs", "docs");
    stated["workspace"] = json!({"links": {"vendor/lib": "docs"}});
    assert_eq!(route(tmp.path(), &stated), "INVALID_FACT");
    stated["workspace"] = json!({"links": {"vendor/lib": "third_party/lib"}});
    assert_eq!(route(tmp.path(), &stated), "INDEPENDENT_CAPSULE");
    // Dispatch routes through the same facts.
    let dispatch =
        json!({"routing": claim(&root, "notes.md", "docs/notes.md"), "rollout": {"input": {"rollout": "on"}}});
    let (_, out) = ce(tmp.path(), "dispatch", None, &dispatch);
    assert_eq!(out["result"]["routing"]["reason_codes"], json!([conflict]), "{out}");
}

#[test]
fn odd_files_never_hang_the_lookup_and_what_cannot_be_told_is_refused() {
    use std::os::unix::ffi::OsStrExt as _;
    let tmp = tempfile::tempdir().unwrap();
    let ws = workspace(tmp.path());
    let root = json!(ws.to_str().unwrap());
    // A FIFO (never opened: a read would block), a path beneath it, and a link to it.
    let made = Command::new("mkfifo").arg(ws.join("pipe")).status().unwrap();
    assert!(made.success());
    std::os::unix::fs::symlink("pipe", ws.join("pipe-link")).unwrap();
    assert_eq!(route(tmp.path(), &claim(&root, "pipe", "docs")), "INDEPENDENT_CAPSULE");
    assert_eq!(route(tmp.path(), &claim(&root, "pipe/x", "docs")), "INDEPENDENT_CAPSULE");
    assert_eq!(route(tmp.path(), &claim(&root, "pipe-link", "pipe")), "WRITER_OWNERSHIP_CONFLICT");
    // A link loop, and a target that is not UTF-8: the guard cannot decide, so it denies.
    std::os::unix::fs::symlink("loop-b", ws.join("loop-a")).unwrap();
    std::os::unix::fs::symlink("loop-a", ws.join("loop-b")).unwrap();
    assert_eq!(route(tmp.path(), &claim(&root, "loop-a/x", "docs")), "INVALID_OWNERSHIP_PATH");
    std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(b"\xff\xfe"), ws.join("binary")).unwrap();
    assert_eq!(route(tmp.path(), &claim(&root, "binary/x", "docs")), "INVALID_OWNERSHIP_PATH");
    // Paths that do not touch the odd files decide as before.
    assert_eq!(route(tmp.path(), &claim(&root, "vendor/lib", "third_party/lib/x.rs")), "WRITER_OWNERSHIP_CONFLICT");
}

#[test]
fn with_a_journal_discovered_links_are_recorded_and_a_replay_decides_the_same() {
    use strata_engine::ce::ledger::Ledger;
    use strata_journal::projection::Projection as _;
    let tmp = tempfile::tempdir().unwrap();
    let ws = workspace(tmp.path());
    let root = json!(ws.to_str().unwrap());
    let journal = tmp.path().join("journal");
    let unit = |id: &str, req: Value| {
        let mut r = req;
        r["lineage_id"] = json!(id);
        r
    };
    let mine = json!({"input": {"workspace_root": root, "owned_files": ["vendor/lib/x.rs"]}});
    let (status, out) = ce(tmp.path(), "route", Some(&journal), &unit("u1", mine));
    assert_eq!((status, &out["result"]["mode"]), (0, &json!("fresh-capsule")), "{out}");
    let recorded = events(&journal);
    let types: Vec<&str> = recorded.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(types, [ledger::WORKSPACE_FACTS, ledger::ROUTE_DECIDED, ledger::CLAIMED]);
    assert_eq!(recorded[0].1["links"]["vendor/lib"], "third_party/lib");
    assert_eq!(recorded[2].1["paths"], json!(["third_party/lib/x.rs"]));
    // Another unit naming the real path conflicts, without a root: the recorded facts decide.
    let theirs = json!({"input": {"owned_files": ["third_party/lib"]}});
    let (_, out) = ce(tmp.path(), "route", Some(&journal), &unit("u2", theirs));
    assert_eq!(out["result"]["reason_codes"], json!(["WRITER_OWNERSHIP_CONFLICT"]));
    // While u1 owns paths, a newly discovered link that moves no owned path is added.
    let notes = json!({"input": {"workspace_root": root, "owned_files": ["notes.md"]}});
    let (status, out) = ce(tmp.path(), "route", Some(&journal), &unit("u3", notes));
    assert_eq!((status, &out["result"]["mode"]), (0, &json!("fresh-capsule")), "{out}");
    let recorded = events(&journal);
    let facts: Vec<&Value> = recorded.iter().filter(|(t, _)| t == ledger::WORKSPACE_FACTS).map(|(_, p)| p).collect();
    assert_eq!(facts.len(), 2);
    assert_eq!(facts[1]["links"]["notes.md"], "docs/notes.md");
    // Replay: the ledger folded from the journal decides the same without the file system.
    let j = Journal::open(&journal, &strata_tests::options(strata_journal::Durability::Process)).unwrap();
    let mut state = Ledger::default();
    j.scan(1, j.head().seq, |r, _| state.apply(r).map(|()| true)).unwrap().unwrap();
    j.close_blocking().unwrap();
    let ctx = strata_engine::ce::Context { now_ns: 0, workspace: Default::default(), warm_lease_minutes: 20 };
    let mut ids = strata_engine::ports::CountingIds::new(1);
    for (path, holder) in [("vendor/lib/x.rs", "u1"), ("docs/notes.md", "u3")] {
        let req = json!({"lineage_id": "u9", "input": {"owned_files": [path]}});
        let d = strata_engine::ce::wire::journaled::run(
            "route",
            &req,
            &ctx,
            &state,
            &mut ids,
            &strata_engine::ports::FixedClock(0),
        )
        .unwrap();
        assert_eq!(d.result["reason_codes"], json!(["WRITER_OWNERSHIP_CONFLICT"]), "{path} held by {holder}");
    }
}
