//! The Knowledge API on a real sled journal: the seed's query semantics (checked against a brute
//! force over the catalogue), versions and hashes, serve records, retirement, refused input that
//! leaves the journal head where it was, and learned routing over logged sessions.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use rand::{Rng as _, SeedableRng as _};
use strata_adapters::harness::{GetArgs, Harness, HarnessError, LearningArgs, OutcomeArgs, StartArgs};
use strata_engine::knowledge::fixture::{EXAMPLE_CONCERNS, EXAMPLE_PROJECTS, generate};
use strata_journal::{Durability, Journal};
use strata_tests::{options, strata, strata_bin, strata_ok};

const BIN: &str = strata_bin!();

fn head(ws: &Path) -> u64 {
    let v: serde_json::Value = serde_json::from_str(&strata_ok(BIN, ws, &["--json", "journal", "log"])).unwrap();
    v.as_array().unwrap().last().unwrap()["seq"].as_u64().unwrap()
}

fn declare(ws: &Path, concerns: &[String], projects: &[String]) {
    let mut args = vec!["knowledge".to_owned(), "declare".to_owned()];
    for c in concerns {
        args.extend(["--concern".to_owned(), c.clone()]);
    }
    for p in projects {
        args.extend(["--project".to_owned(), p.clone()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    strata_ok(BIN, ws, &args);
}

/// A workspace holding the bundled example catalogue.
fn example_workspace(tmp: &Path) -> (PathBuf, PathBuf) {
    let ws = tmp.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    strata_ok(BIN, &ws, &["init", "--durability", "process"]);
    let files = tmp.join("chunks");
    strata_ok(BIN, &ws, &["knowledge", "example", "--out", files.to_str().unwrap()]);
    let concerns: Vec<String> = EXAMPLE_CONCERNS.iter().map(|s| (*s).to_owned()).collect();
    let projects: Vec<String> = EXAMPLE_PROJECTS.iter().map(|s| (*s).to_owned()).collect();
    declare(&ws, &concerns, &projects);
    strata_ok(BIN, &ws, &["knowledge", "put", files.to_str().unwrap()]);
    (ws, files)
}

fn open_harness(ws: &Path) -> std::sync::Arc<Harness> {
    let j = Journal::open(&ws.join(".strata/journal"), &options(Durability::Process)).unwrap();
    Harness::new(j).unwrap()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

#[test]
fn get_knowledge_matches_a_brute_force_over_the_catalogue() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    strata_ok(BIN, &ws, &["init", "--durability", "process"]);
    let g = generate(11, 400, 16, 5, 12);
    let dir = tmp.path().join("gen");
    std::fs::create_dir_all(&dir).unwrap();
    for f in &g.files {
        std::fs::write(dir.join(Path::new(&f.path).file_name().unwrap()), &f.bytes).unwrap();
    }
    declare(&ws, &g.concerns, &g.projects);
    strata_ok(BIN, &ws, &["knowledge", "put", dir.to_str().unwrap()]);

    let h = open_harness(&ws);
    let catalogue = h.list_knowledge().unwrap();
    assert_eq!(catalogue.chunks.len(), 400);
    let rt = rt();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
    let mut nonempty = 0;
    for _ in 0..300 {
        let n = rng.random_range(1..=3);
        let concerns: BTreeSet<String> =
            (0..n).map(|_| g.concerns[rng.random_range(0..g.concerns.len())].clone()).collect();
        let project =
            if rng.random_bool(0.2) { None } else { Some(g.projects[rng.random_range(0..g.projects.len())].clone()) };
        let got = rt
            .block_on(h.get_knowledge(GetArgs {
                concerns: concerns.iter().cloned().collect(),
                project: project.clone(),
                max_tokens: Some(1_000_000),
                ..GetArgs::default()
            }))
            .unwrap();
        // The seed's rule: concerns overlap AND (scope holds the project OR scope is empty).
        let want: Vec<&str> = catalogue
            .chunks
            .iter()
            .filter(|c| c.concerns.iter().any(|x| concerns.contains(x)))
            .filter(|c| c.project_scope.is_empty() || project.as_ref().is_some_and(|p| c.project_scope.contains(p)))
            .map(|c| c.slug.as_str())
            .collect();
        let slugs: Vec<&str> = got.chunks.iter().map(|c| c.slug.as_str()).collect();
        assert_eq!(slugs, want, "concerns {concerns:?} project {project:?}");
        assert!(got.omitted.is_empty());
        assert_eq!(got.total_tokens, got.chunks.iter().map(|c| u64::from(c.tokens)).sum::<u64>());
        nonempty += usize::from(!slugs.is_empty());
    }
    assert!(nonempty > 200, "the queries should mostly match something ({nonempty}/300)");

    // A token cap keeps whole chunks in slug order and lists the rest as omitted.
    let all = rt
        .block_on(h.get_knowledge(GetArgs {
            concerns: g.concerns.clone(),
            project: Some(g.projects[0].clone()),
            max_tokens: Some(1_000_000),
            ..GetArgs::default()
        }))
        .unwrap();
    let capped = rt
        .block_on(h.get_knowledge(GetArgs {
            concerns: g.concerns.clone(),
            project: Some(g.projects[0].clone()),
            max_tokens: Some(200),
            ..GetArgs::default()
        }))
        .unwrap();
    assert!(capped.total_tokens <= 200);
    assert!(!capped.omitted.is_empty());
    let mut union: Vec<String> = capped.chunks.iter().map(|c| c.slug.clone()).chain(capped.omitted.clone()).collect();
    union.sort();
    assert_eq!(union, all.chunks.iter().map(|c| c.slug.clone()).collect::<Vec<_>>());
    h.journal().close_blocking().unwrap();
}

#[test]
fn versions_hashes_and_the_serve_record() {
    let tmp = tempfile::tempdir().unwrap();
    let (ws, files) = example_workspace(tmp.path());
    let list: serde_json::Value = serde_json::from_str(&strata_ok(BIN, &ws, &["--json", "knowledge", "list"])).unwrap();
    let code_review = list["chunks"].as_array().unwrap().iter().find(|c| c["slug"] == "code-review").unwrap().clone();
    assert_eq!(code_review["version"], 1);

    // Unchanged content: nothing appended.
    let before = head(&ws);
    let again: serde_json::Value =
        serde_json::from_str(&strata_ok(BIN, &ws, &["--json", "knowledge", "put", files.to_str().unwrap()])).unwrap();
    assert_eq!(again["unchanged"].as_array().unwrap().len(), 18, "{again}");
    assert_eq!(head(&ws), before);

    // A changed body is a new version with a new hash; a token estimate in the file is ignored.
    let path = files.join("code-review.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let edited = text.replace("project_scope: []", "project_scope: []\ntoken_estimate: 1")
        + " Reviews of generated code follow the same rules.";
    std::fs::write(&path, edited).unwrap();
    strata_ok(BIN, &ws, &["knowledge", "put", path.to_str().unwrap()]);
    let list: serde_json::Value = serde_json::from_str(&strata_ok(BIN, &ws, &["--json", "knowledge", "list"])).unwrap();
    let v2 = list["chunks"].as_array().unwrap().iter().find(|c| c["slug"] == "code-review").unwrap().clone();
    assert_eq!(v2["version"], 2);
    assert!(v2["token_estimate"].as_u64().unwrap() > code_review["token_estimate"].as_u64().unwrap());
    assert_ne!(v2["token_estimate"], 1);

    // A serve in a session records slug, version, hash and tokens of every chunk served.
    let s: serde_json::Value = serde_json::from_str(&strata_ok(
        BIN,
        &ws,
        &["--json", "knowledge", "session", "--agent", "tester", "--task-context", "review a change"],
    ))
    .unwrap();
    let session = s["session"].as_str().unwrap().to_owned();
    let got: serde_json::Value = serde_json::from_str(&strata_ok(
        BIN,
        &ws,
        &["--json", "knowledge", "get", "--concern", "release", "--session", &session, "--task-context", "cut 2.1"],
    ))
    .unwrap();
    let served = got["chunks"].as_array().unwrap();
    let cr = served.iter().find(|c| c["slug"] == "code-review").expect("code-review is a release chunk");
    assert_eq!(cr["version"], 2);
    let log: serde_json::Value = serde_json::from_str(&strata_ok(BIN, &ws, &["--json", "journal", "log"])).unwrap();
    let serve = log.as_array().unwrap().iter().rev().find(|e| e["type"] == "knowledge.served").unwrap();
    let payload = &serve["payload"];
    assert_eq!(payload["session"], session.as_str());
    assert_eq!(payload["task_context"], "cut 2.1");
    let rec = payload["chunks"].as_array().unwrap().iter().find(|c| c["slug"] == "code-review").unwrap();
    assert_eq!(rec["version"], 2);
    assert_eq!(rec["hash"], cr["hash"]);
    assert_eq!(rec["tokens"], cr["tokens"]);
    assert_eq!(serve["seq"], got["logged_at"]);

    // Retired: neither listed nor served; putting it again revives it as the next version.
    strata_ok(BIN, &ws, &["knowledge", "retire", "code-review", "--reason", "folded into release-checklist"]);
    let list = strata_ok(BIN, &ws, &["--json", "knowledge", "list"]);
    assert!(!list.contains("\"code-review\""));
    let got = strata_ok(BIN, &ws, &["--json", "knowledge", "get", "--concern", "release"]);
    assert!(!got.contains("\"code-review\""));
    strata_ok(BIN, &ws, &["knowledge", "put", path.to_str().unwrap()]);
    let list: serde_json::Value = serde_json::from_str(&strata_ok(BIN, &ws, &["--json", "knowledge", "list"])).unwrap();
    let v3 = list["chunks"].as_array().unwrap().iter().find(|c| c["slug"] == "code-review").unwrap().clone();
    assert_eq!(v3["version"], 3);
}

#[test]
fn bad_input_is_refused_with_a_fix_and_the_head_does_not_move() {
    let tmp = tempfile::tempdir().unwrap();
    let (ws, _) = example_workspace(tmp.path());
    let before = head(&ws);
    let refuse = |args: &[&str], code: &str, hint: &str| {
        let out = strata(BIN, &ws, args);
        // The problem table is on stdout, the error line on stderr.
        let err = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(code), "{args:?} should say {code}: {err}");
        assert!(err.contains(hint), "{args:?} should say {hint:?}: {err}");
    };
    // Empty concerns (through the harness: the CLI's --concern is required).
    let h_tmp_dir = tmp.path().join("bad");
    std::fs::create_dir_all(&h_tmp_dir).unwrap();
    refuse(&["knowledge", "get", "--concern", "releas"], "STRATA-E1002", "did you mean release");
    refuse(&["knowledge", "get", "--concern", "release", "--project", "way2sav"], "STRATA-E1003", "way2save");
    refuse(
        &["knowledge", "get", "--concern", "release", "--session", "never-started"],
        "STRATA-E1005",
        "start_session",
    );

    let write = |name: &str, text: &str| {
        let p = h_tmp_dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let oversize = write(
        "big.md",
        &format!(
            "---\nslug: big\ntitle: Big\nconcerns: [testing]\nproject_scope: []\n---\n{}",
            "x".repeat(strata_engine::knowledge::CONTENT_BYTES_MAX + 1)
        ),
    );
    refuse(&["knowledge", "put", oversize.to_str().unwrap()], "STRATA-E1013", "big.md");
    let no_front = write("plain.md", "just text, no front matter\n");
    refuse(&["knowledge", "put", no_front.to_str().unwrap()], "STRATA-E1013", "plain.md");
    let broken = write("broken.md", "---\nslug: [unclosed\ntitle: x\n---\nbody\n");
    refuse(&["knowledge", "put", broken.to_str().unwrap()], "STRATA-E1013", "broken.md");
    let typo =
        write("typo.md", "---\nslug: typo\ntitle: Typo\nconcerns: [testng]\nproject_scope: [fieldbok]\n---\nbody\n");
    let out = strata(BIN, &ws, &["knowledge", "put", typo.to_str().unwrap()]);
    let err = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1));
    assert!(err.contains("testing") && err.contains("fieldbook"), "suggestions for both typos: {err}");
    // One bad file in a batch refuses the whole batch.
    let good =
        write("good.md", "---\nslug: good-one\ntitle: Good\nconcerns: [testing]\nproject_scope: []\n---\nbody\n");
    refuse(&["knowledge", "put", good.to_str().unwrap(), typo.to_str().unwrap()], "STRATA-E1013", "typo.md");
    assert_eq!(head(&ws), before, "refused input appended nothing");

    let h = open_harness(&ws);
    let rt = rt();
    rt.block_on(h.start_session(StartArgs { session: Some("s".into()), ..StartArgs::default() })).unwrap();
    let before = h.journal().head().seq;
    let e = rt.block_on(h.get_knowledge(GetArgs::default())).unwrap_err();
    assert!(matches!(e, HarnessError::Refused(_)) && e.to_string().contains("STRATA-E1001"), "{e}");
    let e = rt
        .block_on(h.log_outcome(OutcomeArgs { session: "s".into(), outcome: "maybe".into(), ..OutcomeArgs::default() }))
        .unwrap_err();
    assert!(e.to_string().contains("success, failure, partial, abandoned"), "{e}");
    let e = rt
        .block_on(h.log_learning(LearningArgs {
            session: "s".into(),
            text: "y".repeat(strata_engine::knowledge::TEXT_BYTES_MAX + 1),
            ..LearningArgs::default()
        }))
        .unwrap_err();
    assert!(e.to_string().contains("STRATA-E1008"), "{e}");
    assert_eq!(h.journal().head().seq, before);
    h.journal().close_blocking().unwrap();
}

#[test]
fn insights_find_merge_review_removal_and_bundle_candidates() {
    let tmp = tempfile::tempdir().unwrap();
    let (ws, _) = example_workspace(tmp.path());
    let h = open_harness(&ws);
    let rt = rt();
    // 12 sessions ask for security on cortex-aluminex (always served together: a merge pair);
    // the 8 that also ask for multicurrency (served `money-*` chunks) fail 7 times, the rest succeed.
    for i in 0..24 {
        let s = rt
            .block_on(h.start_session(StartArgs { session: Some(format!("s-{i:02}")), ..StartArgs::default() }))
            .unwrap();
        let concerns: Vec<String> = if i % 3 == 0 {
            vec!["multicurrency".into(), "domain-logic".into()]
        } else {
            vec!["security".into(), "persistence".into()]
        };
        rt.block_on(h.get_knowledge(GetArgs {
            concerns,
            project: Some("cortex-aluminex".into()),
            session: Some(s.session.clone()),
            ..GetArgs::default()
        }))
        .unwrap();
        let outcome = if i % 3 == 0 && i != 0 { "failure" } else { "success" };
        rt.block_on(h.log_outcome(OutcomeArgs {
            session: s.session,
            outcome: outcome.into(),
            idempotency_key: Some(format!("end-{i}")),
            ..OutcomeArgs::default()
        }))
        .unwrap();
    }
    h.journal().close_blocking().unwrap();
    drop(h);
    let v: serde_json::Value = serde_json::from_str(&strata_ok(
        BIN,
        &ws,
        &["--json", "knowledge", "insights", "--unused-days", "0", "--propose", "remove:code-review"],
    ))
    .unwrap();
    let custom = v["your_proposal"]["replay"].clone();
    let v = v["insights"].clone();
    assert_eq!(v["sessions_with_outcome"], 24, "{v}");
    let merge = v["merge"].as_array().unwrap();
    let pair = merge.iter().find(|p| p["candidate"] == true).expect("a merge candidate");
    assert_eq!(pair["confidence_a_to_b"], 1.0);
    assert!(pair["lift"].as_f64().unwrap() >= 1.0);
    let review = v["review"].as_array().unwrap();
    let flagged: Vec<&serde_json::Value> = review.iter().filter(|r| r["candidate"] == true).collect();
    assert!(!flagged.is_empty(), "chunks served only to failing sessions are review candidates: {review:?}");
    for r in &flagged {
        assert!(r["p_value"].as_f64().unwrap() < 0.05);
        assert_eq!(r["failures_served"], 7);
        assert_eq!(r["failures_other"], 0);
    }
    let removal = v["removal"].as_array().unwrap();
    assert!(removal.iter().any(|r| r["slug"] == "code-review"), "never served: {removal:?}");
    let bundles = v["bundles"].as_array().unwrap();
    assert!(bundles.iter().any(|b| b["concerns"] == serde_json::json!(["persistence", "security"])), "{bundles:?}");
    assert_eq!(custom["sessions_losing_a_used_chunk"].as_array().map(Vec::len), Some(0), "{v}");
}

#[test]
fn a_retried_get_with_its_key_gets_the_first_answer_whatever_changed_since() {
    let tmp = tempfile::tempdir().unwrap();
    let (ws, files) = example_workspace(tmp.path());
    let get = |extra: &[&str]| {
        let mut args = vec!["--json", "knowledge", "get", "--concern", "release"];
        args.extend_from_slice(extra);
        serde_json::from_str::<serde_json::Value>(&strata_ok(BIN, &ws, &args)).unwrap()
    };
    let first = get(&["--key", "review-1"]);
    assert_eq!(first["duplicate"], false);
    let slugs = |v: &serde_json::Value| -> Vec<String> {
        v["chunks"].as_array().unwrap().iter().map(|c| c["slug"].as_str().unwrap().to_owned()).collect()
    };
    assert!(slugs(&first).contains(&"code-review".to_owned()), "{first}");
    // Then the catalogue moves on: a chunk is added, one gets a new version, one is retired, and
    // the projection is snapshotted (a retry may be answered from a restored projection).
    let added = files.join("release-notes.md");
    std::fs::write(
        &added,
        "---\nslug: release-notes\ntitle: Release notes\nconcerns: [release]\nproject_scope: []\n---\nEvery release lists its user-visible changes.\n",
    )
    .unwrap();
    let review = files.join("code-review.md");
    let text = std::fs::read_to_string(&review).unwrap() + " Generated code is reviewed the same way.";
    std::fs::write(&review, text).unwrap();
    strata_ok(BIN, &ws, &["knowledge", "put", added.to_str().unwrap(), review.to_str().unwrap()]);
    strata_ok(BIN, &ws, &["knowledge", "retire", "release-checklist"]);
    strata_ok(BIN, &ws, &["replay", "--save-snapshots"]);
    let fresh = get(&[]);
    assert!(
        slugs(&fresh).contains(&"release-notes".to_owned()) && !slugs(&fresh).contains(&"release-checklist".to_owned())
    );
    // The retry answers exactly what the first call got, marked as a duplicate, and records nothing.
    let before = head(&ws);
    let retry = get(&["--key", "review-1"]);
    assert_eq!(head(&ws), before, "a retry appended");
    assert_eq!(retry["duplicate"], true);
    let mut expected = first.clone();
    expected["duplicate"] = true.into();
    assert_eq!(retry, expected, "the retry's answer is the first one");
    let cr = retry["chunks"].as_array().unwrap().iter().find(|c| c["slug"] == "code-review").unwrap();
    assert_eq!(cr["version"], 1);
    assert!(!cr["content"].as_str().unwrap().contains("Generated code"));
    // In text, too; and a key is per request: the same key for another request is refused.
    let text = strata_ok(BIN, &ws, &["knowledge", "get", "--concern", "release", "--key", "review-1"]);
    assert!(
        text.contains(&format!(
            "serve already recorded (a retry: the first answer) at sequence {}",
            first["logged_at"]
        )),
        "{text}"
    );
    let out =
        strata(BIN, &ws, &["knowledge", "get", "--concern", "release", "--concern", "testing", "--key", "review-1"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("STRATA-E1020") && err.contains(&format!("sequence {}", first["logged_at"])), "{err}");
    assert_eq!(head(&ws), before);
    // A new key is a new serve.
    let other = get(&["--key", "review-2"]);
    assert_eq!(other["duplicate"], false);
    assert_eq!(other["logged_at"].as_u64(), Some(before + 1));
    assert_eq!(other["chunks"], fresh["chunks"]);
}

#[test]
fn the_harness_answers_a_retry_from_the_first_serve_in_a_session() {
    let tmp = tempfile::tempdir().unwrap();
    let (ws, files) = example_workspace(tmp.path());
    let h = open_harness(&ws);
    let rt = rt();
    let session = rt.block_on(h.start_session(StartArgs::default())).unwrap().session;
    let args = GetArgs {
        concerns: vec!["release".into()],
        session: Some(session.clone()),
        task_context: Some("cut 2.1".into()),
        idempotency_key: Some("k".into()),
        ..GetArgs::default()
    };
    let first = rt.block_on(h.get_knowledge(args.clone())).unwrap();
    assert!(!first.duplicate);
    // A served chunk changes in the meantime (put through the same journal, which this process
    // holds).
    let review = files.join("code-review.md");
    let file = strata_engine::kb::intake::SourceFile {
        path: review.to_string_lossy().into_owned(),
        bytes: (std::fs::read_to_string(&review).unwrap() + " Changed.").into_bytes(),
    };
    let put = h
        .read(|k| {
            strata_engine::knowledge::decide::put(
                k,
                &[file],
                &mut strata_engine::ports::CountingIds::new(1 << 100),
                &strata_engine::ports::FixedClock(0),
            )
        })
        .unwrap()
        .unwrap();
    assert_eq!(put.updated.len(), 1);
    h.journal().append_multi_blocking(put.appends).unwrap().unwrap();
    let retry = rt.block_on(h.get_knowledge(args.clone())).unwrap();
    assert!(retry.duplicate);
    assert_eq!((retry.chunks.clone(), retry.logged_at), (first.chunks.clone(), first.logged_at));
    // The same key outside the session is another key; a different task context is refused.
    let unsessioned = rt.block_on(h.get_knowledge(GetArgs { session: None, ..args.clone() })).unwrap();
    assert!(!unsessioned.duplicate);
    let reused = rt.block_on(h.get_knowledge(GetArgs { task_context: Some("other".into()), ..args }));
    assert!(matches!(reused, Err(HarnessError::Refused(_))), "{reused:?}");
    assert!(reused.unwrap_err().to_string().contains("STRATA-E1020"));
}
