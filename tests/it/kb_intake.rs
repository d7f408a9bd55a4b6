//! Intake end to end with the real binary: the bad-input catalogue (every malformed file gets a
//! precise error and the journal head does not move), re-intake, concurrent writers, lifecycles,
//! promotions with back-links, the suspicion gate, as-of impact, and validation exit codes.

use std::path::Path;

use strata_engine::kb::fixture::{FixtureSpec, generate, render};
use strata_engine::kb::graph::Graph;
use strata_engine::kb::intake::{SourceFile, plan};
use strata_engine::kb::kind::{ArtifactKey, ArtifactKind};
use strata_engine::ports::{CountingIds, FixedClock};
use strata_journal::{Durability, Journal};
use strata_tests::{options, strata, strata_bin, strata_ok};

const BIN: &str = strata_bin!();

fn workspace_with_fixture(tmp: &Path) -> std::path::PathBuf {
    let ws = tmp.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    strata_ok(BIN, &ws, &["init", "--durability", "process"]);
    strata_ok(BIN, &ws, &["fixture", "--out", ws.join("kb").to_str().unwrap()]);
    strata_ok(BIN, &ws, &["intake", ws.join("kb").to_str().unwrap()]);
    ws
}

fn head(ws: &Path) -> u64 {
    let v: serde_json::Value =
        serde_json::from_str(&strata_ok(BIN, ws, &["--json", "journal", "log", "--limit", "1"])).unwrap();
    v[0]["seq"].as_u64().unwrap()
}

fn md(front: &str, body: &str) -> Vec<u8> {
    format!("---\n{front}---\n{body}").into_bytes()
}

const CR: &str =
    "kind: change-request\nid: CR-900\nentity: billing\ntitle: A change\nstate: draft\nbrdRefs: [BRD-2.1]\n";

#[test]
fn every_malformed_file_is_refused_precisely_and_appends_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = workspace_with_fixture(tmp.path());
    let before = head(&ws);
    let long = "x".repeat(300);
    let cases: Vec<(&str, &str, Vec<u8>, &str, &str)> = vec![
        ("unclosed flow list", "a.md", md("kind: [unclosed\n", ""), "front-matter", ""),
        ("no front matter", "a.md", b"# Just a heading\n".to_vec(), "front-matter", ""),
        ("unterminated front matter", "a.md", b"---\nkind: issue\n".to_vec(), "front-matter", ""),
        ("yaml alias", "a.md", md("kind: &k issue\nid: *k\n", ""), "front-matter", ""),
        ("yaml list at top", "a.md", md("- kind\n- issue\n", ""), "front-matter", ""),
        ("non-string key", "a.md", md("1: issue\n", ""), "front-matter", ""),
        ("NaN value", "a.md", md("kind: issue\nscore: .nan\n", ""), "front-matter", ""),
        (
            "nesting too deep",
            "a.md",
            md(&format!("kind: issue\nx: {}1{}\n", "[".repeat(20), "]".repeat(20)), ""),
            "front-matter",
            "",
        ),
        (
            "title of the wrong type",
            "a.md",
            md(&CR.replace("title: A change", "title: 42"), ""),
            "schema:type",
            "/title",
        ),
        (
            "list given as a string",
            "a.md",
            md(&CR.replace("brdRefs: [BRD-2.1]", "brdRefs: BRD-2.1"), ""),
            "schema:type",
            "/brdRefs",
        ),
        ("unknown entity", "a.md", md(&CR.replace("entity: billing", "entity: bilinng"), ""), "entity", "/entity"),
        ("missing entity", "a.md", md(&CR.replace("entity: billing\n", ""), ""), "schema:required", ""),
        ("id pattern", "a.md", md(&CR.replace("id: CR-900", "id: CR-x"), ""), "schema:pattern", "/id"),
        ("reference pattern", "a.md", md(&CR.replace("[BRD-2.1]", "[BRD-2]"), ""), "schema:pattern", "/brdRefs/0"),
        ("oversize content", "a.md", md(CR, &"lorem ipsum ".repeat(20_000)), "size", ""),
        ("binary data", "a.md", vec![0x89, b'P', b'N', b'G', 0, 0, 0, 13], "encoding", ""),
        ("invalid UTF-8", "a.md", vec![b'-', b'-', b'-', b'\n', 0xff, 0xfe, b'\n'], "encoding", ""),
        ("unknown kind", "a.md", md(&CR.replace("kind: change-request", "kind: epic"), ""), "kind", "/kind"),
        ("missing kind", "a.md", md(&CR.replace("kind: change-request\n", ""), ""), "kind", "/kind"),
        ("unknown field", "a.md", md(&format!("{CR}prority: high\n"), ""), "schema:additionalProperties", ""),
        (
            "state outside the lifecycle",
            "a.md",
            md(&CR.replace("state: draft", "state: shipped"), ""),
            "schema:enum",
            "/state",
        ),
        (
            "severity outside its enumeration",
            "a.md",
            md(
                "kind: issue\nid: ISS-900\nentity: billing\ntitle: t\ncategory: defect\nseverity: urgent\nstate: open\n",
                "",
            ),
            "schema:enum",
            "/severity",
        ),
        (
            "tier outside the four tiers",
            "a.json",
            br#"{"kind":"entity","id":"newthing","name":"New","tier":"platform","state":"active"}"#.to_vec(),
            "schema:enum",
            "/tier",
        ),
        ("JSON that is not an object", "a.json", b"[1,2,3]".to_vec(), "json", ""),
        ("JSON syntax error", "a.json", b"{\"kind\": \"issue\",}".to_vec(), "json", ""),
        ("unsupported file type", "a.txt", b"kind: issue\n".to_vec(), "file-type", ""),
        ("body in front matter", "a.md", md(&format!("{CR}body: text\n"), "content"), "body", "/body"),
        (
            "malformed devlog date",
            "a.md",
            md("kind: devlog\nid: DL-900\nentity: billing\ntitle: t\nstate: recorded\ndate: 20/11/2026\n", ""),
            "schema:pattern",
            "/date",
        ),
        (
            "untraced API method",
            "a.md",
            md(
                "kind: backend-module\nid: new-api\nentity: billing\ntitle: t\nstate: draft\nbrdRequirements: []\napiMethods: [{name: get, signature: get()}]\n",
                "",
            ),
            "schema:required",
            "/apiMethods/0",
        ),
        (
            "title too long",
            "a.md",
            md(&CR.replace("title: A change", &format!("title: {long}")), ""),
            "schema:maxLength",
            "/title",
        ),
        ("empty title", "a.md", md(&CR.replace("title: A change", "title: \"\""), ""), "schema:minLength", "/title"),
        (
            "repeated references",
            "a.md",
            md(&CR.replace("[BRD-2.1]", "[BRD-2.1, BRD-2.1]"), ""),
            "schema:uniqueItems",
            "/brdRefs",
        ),
        (
            "illegal lifecycle change",
            "CR-3.md",
            {
                let fx = generate(&FixtureSpec::seed_scale(7));
                let mut d = fx
                    .drafts
                    .iter()
                    .find(|d| d.key == ArtifactKey::new(ArtifactKind::ChangeRequest, "CR-3"))
                    .unwrap()
                    .clone();
                assert_eq!(d.state, "done");
                d.state = "draft".into();
                render(&d).bytes
            },
            "lifecycle",
            "/state",
        ),
        (
            "tier change by intake",
            "billing.json",
            {
                let fx = generate(&FixtureSpec::seed_scale(7));
                let mut d = fx
                    .drafts
                    .iter()
                    .find(|d| d.key == ArtifactKey::new(ArtifactKind::Entity, "billing"))
                    .unwrap()
                    .clone();
                d.fields.insert("tier".into(), serde_json::json!("foundation"));
                d.source = Some("billing.json".into());
                render(&d).bytes
            },
            "tier",
            "/tier",
        ),
    ];
    assert!(cases.len() >= 30);
    for (name, file, bytes, rule, pointer) in &cases {
        let dir = tmp.path().join("bad").join(name.replace(' ', "-"));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(file);
        std::fs::write(&path, bytes).unwrap();
        let out = strata(BIN, &ws, &["--json", "intake", path.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(1), "{name}: {}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{name}: {e}: {}", String::from_utf8_lossy(&out.stdout)));
        assert_eq!(v["ok"], false);
        let problems = v["problems"].as_array().unwrap();
        assert!(
            problems.iter().any(|p| p["rule"] == *rule
                && p["pointer"] == *pointer
                && p["file"].as_str().unwrap().ends_with(file)
                && !p["hint"].as_str().unwrap().is_empty()),
            "{name}: expected rule {rule} at {pointer:?}, got {problems:#?}"
        );
        assert_eq!(head(&ws), before, "{name} moved the journal head");
    }
    // Duplicate ids within one intake.
    let dup = tmp.path().join("dup");
    std::fs::create_dir_all(&dup).unwrap();
    std::fs::write(dup.join("one.md"), md(CR, "")).unwrap();
    std::fs::write(dup.join("two.md"), md(CR, "other body")).unwrap();
    let out = strata(BIN, &ws, &["--json", "intake", dup.to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["problems"].as_array().unwrap().iter().any(|p| p["rule"] == "duplicate" && p["pointer"] == "/id"), "{v}");
    // One bad file among good ones: nothing at all is appended.
    let mixed = tmp.path().join("mixed");
    std::fs::create_dir_all(&mixed).unwrap();
    std::fs::write(mixed.join("good.md"), md(CR, "")).unwrap();
    std::fs::write(mixed.join("bad.md"), md(&CR.replace("CR-900", "CR-901").replace("billing", "nowhere"), ""))
        .unwrap();
    let out = strata(BIN, &ws, &["intake", mixed.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(head(&ws), before);
    // The good file alone goes in; taken in again, nothing is appended.
    strata_ok(BIN, &ws, &["intake", mixed.join("good.md").to_str().unwrap()]);
    assert_eq!(head(&ws), before + 1);
    let again: serde_json::Value =
        serde_json::from_str(&strata_ok(BIN, &ws, &["--json", "intake", mixed.join("good.md").to_str().unwrap()]))
            .unwrap();
    assert_eq!(again["appended"], 0);
    assert_eq!(head(&ws), before + 1);
}

#[test]
fn two_writers_editing_one_artifact_get_one_success_and_one_conflict() {
    let fx = generate(&FixtureSpec::seed_scale(7));
    let tmp = tempfile::tempdir().unwrap();
    let j = Journal::create(&tmp.path().join("j"), "strata.test/kb", &options(Durability::Process)).unwrap();
    let mut g = Graph::new();
    let p = plan(&g, &fx.files(), &mut CountingIds::new(1), &FixedClock(0)).unwrap();
    j.append_multi_blocking(p.appends).unwrap().unwrap();
    let r = j.scan(1, u64::MAX, |rec, _| g.apply_record(rec).map(|()| true)).unwrap();
    r.unwrap();
    let key = ArtifactKey::new(ArtifactKind::BrdRequirement, "BRD-2.1");
    let base = fx.drafts.iter().find(|d| d.key == key).unwrap().clone();
    let edit = |text: &str| {
        let mut d = base.clone();
        d.body.push_str(text);
        let f = render(&d);
        SourceFile { path: f.path, bytes: f.bytes }
    };
    // Both writers read the same graph and decide against the same version.
    let a = plan(&g, &[edit("\nEdit by writer A.\n")], &mut CountingIds::new(10_000), &FixedClock(1)).unwrap();
    let b = plan(&g, &[edit("\nEdit by writer B.\n")], &mut CountingIds::new(20_000), &FixedClock(2)).unwrap();
    let (ja, jb) = (j.clone(), j.clone());
    let ta = std::thread::spawn(move || ja.append_multi_blocking(a.appends).unwrap());
    let tb = std::thread::spawn(move || jb.append_multi_blocking(b.appends).unwrap());
    let results = [ta.join().unwrap(), tb.join().unwrap()];
    let ok = results.iter().filter(|r| r.is_ok()).count();
    let conflicts: Vec<_> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert_eq!(ok, 1, "{results:?}");
    assert_eq!(conflicts.len(), 1);
    assert_eq!(conflicts[0].stream, key.stream());
    assert_eq!(conflicts[0].expected, strata_journal::ExpectedVersion::Exact(1));
    assert_eq!(conflicts[0].actual, 2);
}

#[test]
fn lifecycles_promotions_suspicion_and_the_approval_gate() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = workspace_with_fixture(tmp.path());
    // An illegal transition is a typed rejection and appends nothing.
    let h = head(&ws);
    let out = strata(BIN, &ws, &["artifact", "transition", "CR-3", "--to", "draft"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("STRATA-E0702"));
    assert_eq!(head(&ws), h);
    // Promotion-only states cannot be reached by a plain transition.
    let out = strata(BIN, &ws, &["artifact", "transition", "ISS-2", "--to", "promoted"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("STRATA-E0703"), "{}", String::from_utf8_lossy(&out.stderr));
    // Issue → change request, with back-links both ways.
    strata_ok(BIN, &ws, &["artifact", "promote", "ISS-2", "--to-cr", "CR-700", "--title", "Fix the pipeline"]);
    let cr: serde_json::Value =
        serde_json::from_str(&strata_ok(BIN, &ws, &["--json", "artifact", "show", "CR-700"])).unwrap();
    assert_eq!(cr["fields"]["promotedFrom"], "ISS-2");
    assert_eq!(cr["state"], "draft");
    let iss: serde_json::Value =
        serde_json::from_str(&strata_ok(BIN, &ws, &["--json", "artifact", "show", "ISS-2"])).unwrap();
    assert_eq!(iss["fields"]["promotedTo"], "CR-700");
    assert_eq!(iss["state"], "promoted");
    // A draft change request on a requirement, grouped into an initiative with back-links.
    let cr_file = tmp.path().join("CR-701.md");
    std::fs::write(
        &cr_file,
        md(
            "kind: change-request\nid: CR-701\nentity: billing\ntitle: Tax rework\nstate: draft\nbrdRefs: [BRD-2.2]\n",
            "Rework tax.\n",
        ),
    )
    .unwrap();
    let brd = {
        let fx = generate(&FixtureSpec::seed_scale(7));
        fx.drafts.iter().find(|d| d.key == ArtifactKey::new(ArtifactKind::BrdRequirement, "BRD-2.2")).unwrap().clone()
    };
    let mut brd_linked = brd.clone();
    strata_engine::kb::intake::with(&mut brd_linked.fields, "linkedCrs", "CR-701");
    let brd_file = tmp.path().join("BRD-2.2.md");
    std::fs::write(&brd_file, render(&brd_linked).bytes).unwrap();
    strata_ok(BIN, &ws, &["intake", cr_file.to_str().unwrap(), brd_file.to_str().unwrap()]);
    strata_ok(BIN, &ws, &["artifact", "promote", "CR-701", "--to-initiative", "BI-90", "--title", "Tax"]);
    let bi: serde_json::Value =
        serde_json::from_str(&strata_ok(BIN, &ws, &["--json", "artifact", "show", "BI-90"])).unwrap();
    assert_eq!(bi["fields"]["linkedCrIds"], serde_json::json!(["CR-701"]));
    assert_eq!(bi["fields"]["linkedBrdRefs"], serde_json::json!(["BRD-2.2"]));
    strata_ok(BIN, &ws, &["graph", "validate"]);
    // Change the requirement upstream of CR-701: it becomes suspect, transitively, and the change
    // request cannot be approved until reviewed.
    strata_ok(BIN, &ws, &["artifact", "transition", "CR-701", "--to", "proposed"]);
    let mut brd_changed = brd_linked.clone();
    brd_changed.body.push_str("\nThe threshold is now configurable.\n");
    std::fs::write(&brd_file, render(&brd_changed).bytes).unwrap();
    // The intake must carry the backlog link the initiative added, or it would be undone.
    let shown: serde_json::Value =
        serde_json::from_str(&strata_ok(BIN, &ws, &["--json", "artifact", "show", "BRD-2.2"])).unwrap();
    brd_changed.fields = shown["fields"].as_object().unwrap().clone();
    std::fs::write(&brd_file, render(&brd_changed).bytes).unwrap();
    strata_ok(BIN, &ws, &["intake", brd_file.to_str().unwrap()]);
    let suspects: serde_json::Value =
        serde_json::from_str(&strata_ok(BIN, &ws, &["--json", "graph", "suspects"])).unwrap();
    let list = suspects["suspects"].as_array().unwrap();
    assert!(
        list.iter().any(|s| s["artifact"] == "change-request:CR-701" && s["cause"] == "brd-requirement:BRD-2.2"),
        "{suspects}"
    );
    assert!(list.iter().any(|s| s["artifact"].as_str().unwrap().starts_with("ui-screen:")
        && s["path"].as_str().unwrap().starts_with("BRD-2.2 -")));
    let h = head(&ws);
    let out = strata(BIN, &ws, &["artifact", "transition", "CR-701", "--to", "approved"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("STRATA-E0704") && err.contains("change-request:CR-701"), "{err}");
    assert_eq!(head(&ws), h);
    strata_ok(BIN, &ws, &["artifact", "review", "CR-701"]);
    strata_ok(BIN, &ws, &["artifact", "transition", "CR-701", "--to", "approved"]);
    // Entity tier promotion follows its table.
    let out = strata(BIN, &ws, &["artifact", "promote", "billing", "--kind", "entity", "--tier", "discipline"]);
    assert!(!out.status.success());
    strata_ok(BIN, &ws, &["artifact", "promote", "qa-practice", "--tier", "product"]);
    let entities: serde_json::Value =
        serde_json::from_str(&strata_ok(BIN, &ws, &["--json", "graph", "entities"])).unwrap();
    let qa = entities["entities"].as_array().unwrap().iter().find(|e| e["id"] == "qa-practice").unwrap();
    assert_eq!(qa["tier"], "product");
    // Replay from scratch reaches the same graph as the live projection.
    let r: serde_json::Value = serde_json::from_str(&strata_ok(BIN, &ws, &["--json", "replay", "--check"])).unwrap();
    assert_eq!(r["ok"], true);
}

#[test]
fn impact_answers_as_of_any_sequence_and_validate_fails_on_planted_defects() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = workspace_with_fixture(tmp.path());
    let now: serde_json::Value =
        serde_json::from_str(&strata_ok(BIN, &ws, &["--json", "graph", "impact", "CR-3"])).unwrap();
    let at = now["at"].as_u64().unwrap();
    // Add a new screen to a requirement CR-3 touches: the impact grows, but not as of before.
    let fx = generate(&FixtureSpec::seed_scale(7));
    let mut brd =
        fx.drafts.iter().find(|d| d.key == ArtifactKey::new(ArtifactKind::BrdRequirement, "BRD-2.1")).unwrap().clone();
    strata_engine::kb::intake::with(&mut brd.fields, "uiScreens", "billing-screen-99");
    let dir = tmp.path().join("more");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("brd.md"), render(&brd).bytes).unwrap();
    std::fs::write(
        dir.join("screen.md"),
        md("kind: ui-screen\nid: billing-screen-99\nentity: billing\ntitle: New screen\nstate: draft\ncomponents: []\nbrdRequirements: [BRD-2.1]\n", ""),
    )
    .unwrap();
    strata_ok(BIN, &ws, &["intake", dir.to_str().unwrap()]);
    let screens = |v: &serde_json::Value| {
        v["groups"]["screens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["id"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    let later: serde_json::Value =
        serde_json::from_str(&strata_ok(BIN, &ws, &["--json", "graph", "impact", "CR-3"])).unwrap();
    let before: serde_json::Value =
        serde_json::from_str(&strata_ok(BIN, &ws, &["--json", "graph", "impact", "CR-3", "--at", &at.to_string()]))
            .unwrap();
    assert!(!screens(&now).contains(&"billing-screen-99".to_owned()));
    assert!(screens(&later).contains(&"billing-screen-99".to_owned()));
    assert_eq!(before["groups"], now["groups"], "as-of answers what was true then");
    let path = later["groups"]["screens"].as_array().unwrap().iter().find(|s| s["id"] == "billing-screen-99").unwrap()
        ["path"]
        .clone();
    assert_eq!(path, "CR-3 -brdRefs-> BRD-2.1 -uiScreens-> billing-screen-99");
    let out = strata(BIN, &ws, &["graph", "impact", "CR-3", "--at", &(at + 1000).to_string()]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("STRATA-E0803"));
    // A fixture with planted defects fails validation with exit 3 and names each one.
    let bad_ws = tmp.path().join("bad");
    std::fs::create_dir_all(&bad_ws).unwrap();
    strata_ok(BIN, &bad_ws, &["init", "--durability", "process"]);
    let planted: serde_json::Value = serde_json::from_str(&strata_ok(
        BIN,
        &bad_ws,
        &[
            "--json",
            "fixture",
            "--out",
            bad_ws.join("kb").to_str().unwrap(),
            "--plant",
            "missing-inverse",
            "--plant",
            "dangling",
            "--plant",
            "cycle",
        ],
    ))
    .unwrap();
    strata_ok(BIN, &bad_ws, &["intake", bad_ws.join("kb").to_str().unwrap()]);
    let out = strata(BIN, &bad_ws, &["--json", "graph", "validate"]);
    assert_eq!(out.status.code(), Some(3));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let findings = v["findings"].as_array().unwrap();
    for p in planted["planted"].as_array().unwrap() {
        assert!(
            findings.iter().any(|f| f["rule"] == p["rule"] && f["artifact"] == p["artifact"]),
            "{p} not found in {findings:#?}"
        );
    }
    assert_eq!(findings.len(), 3);
}

#[test]
fn intake_cannot_approve_past_a_suspect_the_transition_would_refuse() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = workspace_with_fixture(tmp.path());
    // Change a requirement upstream of CR-3: CR-3 becomes suspect.
    let fx = generate(&FixtureSpec::seed_scale(7));
    let mut brd =
        fx.drafts.iter().find(|d| d.key == ArtifactKey::new(ArtifactKind::BrdRequirement, "BRD-2.1")).unwrap().clone();
    brd.body.push_str("\nThe threshold is now configurable.\n");
    let brd_file = tmp.path().join("BRD-2.1.md");
    std::fs::write(&brd_file, render(&brd).bytes).unwrap();
    strata_ok(BIN, &ws, &["intake", brd_file.to_str().unwrap()]);
    let suspects: serde_json::Value =
        serde_json::from_str(&strata_ok(BIN, &ws, &["--json", "graph", "suspects"])).unwrap();
    assert!(suspects["suspects"].as_array().unwrap().iter().any(|s| s["artifact"] == "change-request:CR-3"));
    // A proposed change request depending on it goes in (no gate on the way to proposed), but the
    // transition to approved is refused.
    let cr = |id: &str, state: &str| {
        md(
            &format!(
                "kind: change-request\nid: {id}\nentity: billing\ntitle: On top of CR-3\nstate: {state}\nbrdRefs: []\ndependsOn: [CR-3]\n"
            ),
            "",
        )
    };
    let proposed = tmp.path().join("CR-900.md");
    std::fs::write(&proposed, cr("CR-900", "proposed")).unwrap();
    strata_ok(BIN, &ws, &["intake", proposed.to_str().unwrap()]);
    let before = head(&ws);
    let out = strata(BIN, &ws, &["artifact", "transition", "CR-900", "--to", "approved"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let transition_err = stderr.trim().trim_start_matches("error: ").to_owned();
    assert!(transition_err.contains("[STRATA-E0704] change-request:CR-900 cannot be approved"), "{transition_err}");
    assert!(transition_err.contains("change-request:CR-3"), "{transition_err}");
    assert_eq!(head(&ws), before);
    // Neither route around it works: a new change request created as approved (or past it), nor
    // the proposed one's file changing its state to approved. Each is listed; nothing is appended.
    let dir = tmp.path().join("around");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("CR-901.md"), cr("CR-901", "approved")).unwrap();
    std::fs::write(dir.join("CR-902.md"), cr("CR-902", "done")).unwrap();
    std::fs::write(dir.join("CR-900.md"), cr("CR-900", "approved")).unwrap();
    let out = strata(BIN, &ws, &["--json", "intake", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(head(&ws), before, "a refused intake appended");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let problems = v["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 3, "{problems:#?}");
    for (p, id) in problems.iter().zip(["CR-900", "CR-901", "CR-902"]) {
        assert!(p["file"].as_str().unwrap().ends_with(&format!("{id}.md")), "{p}");
        assert_eq!((p["rule"].as_str(), p["pointer"].as_str()), (Some("suspect"), Some("/state")), "{p}");
        let detail = p["detail"].as_str().unwrap();
        assert!(
            detail.starts_with(&format!("[STRATA-E0704] change-request:{id} cannot be approved while")),
            "{detail}"
        );
        assert!(detail.contains("change-request:CR-3"), "{detail}");
    }
    // The update's refusal is word for word the transition's.
    assert_eq!(problems[0]["detail"].as_str().unwrap(), transition_err);
    assert!(
        problems[2]["hint"].as_str().unwrap().starts_with("done is reached only through approved"),
        "{}",
        problems[2]
    );
    // As a table, with the intake's own code on stderr.
    let out = strata(BIN, &ws, &["intake", dir.join("CR-901.md").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("STRATA-E0704"));
    assert!(String::from_utf8_lossy(&out.stderr).contains("STRATA-E0802"));
    assert_eq!(head(&ws), before);
    // Once everything suspect is reviewed, the same files go in: approval by intake follows the
    // same gate as the command, no stricter.
    let suspects: serde_json::Value =
        serde_json::from_str(&strata_ok(BIN, &ws, &["--json", "graph", "suspects"])).unwrap();
    let mut reviewed = std::collections::BTreeSet::new();
    for s in suspects["suspects"].as_array().unwrap() {
        let id = s["artifact"].as_str().unwrap().split_once(':').unwrap().1.to_owned();
        if reviewed.insert(id.clone()) {
            strata_ok(BIN, &ws, &["artifact", "review", &id]);
        }
    }
    let took: serde_json::Value =
        serde_json::from_str(&strata_ok(BIN, &ws, &["--json", "intake", dir.to_str().unwrap()])).unwrap();
    assert_eq!(took["transitioned"], serde_json::json!(["change-request:CR-900"]));
    assert_eq!(took["created"].as_array().unwrap().len(), 2);
}

#[test]
fn graph_impact_lists_a_missing_requirement_as_dangling_not_reached() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = workspace_with_fixture(tmp.path());
    let file = tmp.path().join("CR-910.md");
    std::fs::write(
        &file,
        md("kind: change-request\nid: CR-910\nentity: billing\ntitle: On a ghost\nstate: draft\nbrdRefs: [BRD-2.1, BRD-99.9]\n", ""),
    )
    .unwrap();
    strata_ok(BIN, &ws, &["intake", file.to_str().unwrap()]);
    let v: serde_json::Value =
        serde_json::from_str(&strata_ok(BIN, &ws, &["--json", "graph", "impact", "CR-910"])).unwrap();
    let reqs: Vec<&str> =
        v["groups"]["requirements"].as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(reqs, ["BRD-2.1"], "{v}");
    let total: usize = v["groups"].as_object().unwrap().values().map(|g| g.as_array().unwrap().len()).sum();
    assert_eq!(v["reached"].as_u64(), Some(total as u64));
    assert_eq!(
        v["dangling"],
        serde_json::json!([{"artifact": "change-request:CR-910", "field": "brdRefs", "target": "brd-requirement:BRD-99.9",
            "detail": "CR-910.brdRefs refers to brd-requirement BRD-99.9, which does not exist; create it or remove the reference"}])
    );
    // The same reference `graph validate` reports.
    let out = strata(BIN, &ws, &["--json", "graph", "validate"]);
    let findings: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(findings["findings"].as_array().unwrap().iter().any(|f| f["rule"] == "dangling"
        && f["artifact"] == "change-request:CR-910"
        && f["detail"] == v["dangling"][0]["detail"]));
    let text = strata_ok(BIN, &ws, &["graph", "impact", "CR-910"]);
    assert!(text.contains("dangling references, not reached (1)"), "{text}");
}
