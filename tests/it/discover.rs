//! `strata discover`: a BM25 ranking of the entities, specifications and knowledge chunks a
//! request concerns, from the journal at a position. The same position and text give the same
//! ranking, twice, at an earlier `--at` after more was appended, and in a copy of the journal
//! replayed from its export; matched words are shown; refusals name the rule and append nothing.

use std::path::{Path, PathBuf};

use serde_json::Value;
use strata_tests::{strata, strata_ok};

const BIN: &str = strata_tests::strata_bin!();

fn json(ws: &Path, args: &[&str]) -> Value {
    strata_tests::strata_json(BIN, ws, args)
}

fn head(ws: &Path) -> u64 {
    strata_tests::head_seq(BIN, ws)
}

fn seed_workspace(dir: &Path) -> (PathBuf, PathBuf) {
    strata_tests::seed_workspace(BIN, dir)
}

#[test]
fn the_same_position_and_text_give_the_same_ranking_with_matched_words() {
    let tmp = tempfile::tempdir().unwrap();
    let (ws, kb) = seed_workspace(tmp.path());
    let query = "Billing requirement 3 rounding";
    let first = json(&ws, &["discover", query]);
    let results = first["results"].as_array().unwrap();
    assert_eq!(results.len(), 10, "ten by default");
    assert_eq!(first["at"].as_u64().unwrap(), head(&ws));
    // The top hit is billing's third requirement: every searchable word matched, as written.
    let top = &results[0];
    assert_eq!((top["kind"].as_str(), top["entity"].as_str()), (Some("brd-requirement"), Some("billing")), "{first:#}");
    assert!(top["title"].as_str().unwrap().ends_with("requirement 3"), "{top}");
    let matched: Vec<&str> = top["matched"].as_array().unwrap().iter().map(|m| m.as_str().unwrap()).collect();
    assert!(matched.contains(&"Billing") && matched.contains(&"requirement"), "{matched:?}");
    assert!(!matched.contains(&"rounding"), "a word no document has is matched nowhere");
    // Ranked by score, ties by kind and id.
    for w in results.windows(2) {
        let (a, b) = (w[0]["score"].as_f64().unwrap(), w[1]["score"].as_f64().unwrap());
        assert!(
            a > b
                || (a == b
                    && (w[0]["kind"].as_str(), w[0]["id"].as_str()) <= (w[1]["kind"].as_str(), w[1]["id"].as_str()))
        );
    }
    assert_eq!(json(&ws, &["discover", query]), first, "the same ranking twice");
    // Only requirements when asked; the text output shows the matched words too.
    let reqs = json(&ws, &["discover", query, "--kind", "brd-requirement", "--limit", "3"]);
    assert!(reqs["results"].as_array().unwrap().iter().all(|r| r["kind"] == "brd-requirement"));
    assert_eq!(reqs["results"].as_array().unwrap().len(), 3);
    let text = strata_ok(BIN, &ws, &["discover", query, "--limit", "3"]);
    assert!(text.contains("MATCHED") && text.contains("Billing, requirement"), "{text}");

    // More appended: a requirement now speaks of rounding. At the old position the ranking is
    // the one seen before; at the head the changed requirement comes first for "rounding".
    let at = head(&ws);
    let file = kb.join("crm/requirements/BRD-4.2.md");
    let mut body = std::fs::read_to_string(&file).unwrap();
    body.push_str("\nMulti-currency rounding of invoice totals happens once, at the end.\n");
    std::fs::write(&file, body).unwrap();
    strata_ok(BIN, &ws, &["intake", file.to_str().unwrap()]);
    assert!(head(&ws) > at);
    assert_eq!(json(&ws, &["discover", query, "--at", &at.to_string()]), first, "as of the earlier position");
    let now = json(&ws, &["discover", "multi-currency rounding is wrong on invoices"]);
    let top = &now["results"][0];
    assert_eq!(top["id"], "BRD-4.2", "{now:#}");
    let matched: Vec<&str> = top["matched"].as_array().unwrap().iter().map(|m| m.as_str().unwrap()).collect();
    assert_eq!(matched, ["multi", "currency", "rounding", "invoices"], "stemmed: invoices matches invoice");

    // A copy of the journal, replayed from its export, ranks the same.
    let export = tmp.path().join("export.jsonl");
    strata_ok(BIN, &ws, &["journal", "export", "--jsonl", "--out", export.to_str().unwrap()]);
    let copy = tmp.path().join("copy");
    strata_ok(BIN, &copy, &["journal", "import", export.to_str().unwrap()]);
    assert_eq!(json(&copy, &["discover", "multi-currency rounding is wrong on invoices"]), now, "after a replay");
    assert_eq!(json(&copy, &["discover", query, "--at", &at.to_string()]), first);
}

#[test]
fn knowledge_chunks_are_discovered_and_refusals_append_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let (ws, _) = seed_workspace(tmp.path());
    strata_ok(BIN, &ws, &["knowledge", "declare", "--concern", "testing"]);
    let chunk = tmp.path().join("flaky.md");
    std::fs::write(
        &chunk,
        "---\nslug: flaky-tests\ntitle: Quarantining flaky tests\nconcerns: [testing]\nproject_scope: []\n---\nA test that fails intermittently is quarantined, never retried silently.\n",
    )
    .unwrap();
    strata_ok(BIN, &ws, &["knowledge", "put", chunk.to_str().unwrap()]);
    let found = json(&ws, &["discover", "flaky test fails intermittently"]);
    assert_eq!(
        (found["results"][0]["kind"].as_str(), found["results"][0]["id"].as_str()),
        (Some("chunk"), Some("flaky-tests"))
    );

    let before = head(&ws);
    let long = "word ".repeat(500);
    for (args, code) in [
        (vec!["discover", "the of and"], "STRATA-E2500"),
        (vec!["discover", ""], "STRATA-E2500"),
        (vec!["discover", long.as_str()], "STRATA-E2501"),
        (vec!["discover", "billing", "--limit", "0"], "STRATA-E2502"),
        (vec!["discover", "billing", "--limit", "101"], "STRATA-E2502"),
        (vec!["discover", "billing", "--at", "999999"], "STRATA-E2505"),
    ] {
        let out = strata(BIN, &ws, &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(code), "{args:?}: {err}");
    }
    assert_eq!(head(&ws), before, "a refused discovery appends nothing");
    // A word that no document has: an empty ranking, not an error.
    assert!(json(&ws, &["discover", "zanzibar"])["results"].as_array().unwrap().is_empty());
}

/// A one-task plan whose task gives `task_line` (a `request`, or a request and specs).
fn request_plan(workgroup: &str, task_line: &str) -> String {
    format!(
        "workgroup = \"{workgroup}\"\npipeline = \"light\"\n[[task]]\nid = \"read\"\nrole = \"analyst\"\nobjective = \"Say what it asks.\"\n{task_line}\n"
    )
}

#[test]
fn a_request_is_resolved_to_specifications_by_discovery_recorded_as_evidence_and_followed() {
    let tmp = tempfile::tempdir().expect("tmp");
    let at = tmp.path().join("example");
    let out = strata_tests::strata(
        strata_tests::strata_bin!(),
        tmp.path(),
        &["run", "--example", "--at", at.to_str().expect("utf-8"), "--time-scale", "0"],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let bin = strata_tests::strata_bin!();
    let plan = at.join("asked.toml");
    let run = |extra: &[&str]| {
        let mut args = vec!["run", plan.to_str().expect("utf-8"), "--time-scale", "0"];
        args.extend_from_slice(extra);
        strata_tests::strata(bin, &at, &args)
    };
    // Nothing in the knowledge base uses these words: refused, recorded nothing.
    std::fs::write(&plan, request_plan("asked", "request = \"zzyzx quux\"")).expect("plan");
    let head = strata_tests::head_seq(bin, &at);
    let out = run(&["--check", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(report["problems"][0]["code"], "STRATA-E2116", "{report}");
    assert_eq!(strata_tests::head_seq(bin, &at), head);
    // Specs and a request together: the plan check says give one.
    std::fs::write(&plan, request_plan("asked", "request = \"Billing requirement 1\"\nspecs = [\"BRD-2.2\"]"))
        .expect("plan");
    let report: Value = serde_json::from_slice(&run(&["--check", "--json"]).stdout).expect("JSON");
    assert!(report["problems"].to_string().contains("give specs or a request, not both"), "{report}");
    // Resolved: the check shows the ranking and the choice, the run records and follows it.
    std::fs::write(&plan, request_plan("asked", "request = \"Billing requirement 1\"")).expect("plan");
    let out = run(&["--check", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let d = &report["discovered"]["read"];
    assert_eq!(d["chosen"][0], "BRD-2.1", "{report}");
    assert_eq!(d["candidates"][0]["id"], "BRD-2.1");
    assert!(d["candidates"][0]["score_milli"].as_u64() > d["candidates"][1]["score_milli"].as_u64(), "{d}");
    let text = String::from_utf8_lossy(&run(&["--check"]).stdout).into_owned();
    assert!(text.contains("task read: request resolved to BRD-2.1"), "{text}");
    let again: Value = serde_json::from_slice(&run(&["--check", "--json"]).stdout).expect("JSON");
    assert_eq!(again["discovered"], report["discovered"], "the same position and text, the same ranking");
    assert!(run(&[]).status.success());
    // The plan as recorded (its tasks in the plan's chunk events) carries the evidence.
    let recorded: Vec<Value> = strata_tests::journal_events(&at)
        .into_iter()
        .filter(|(stream, _, _)| stream == "workgroup/asked")
        .map(|(_, _, v)| v)
        .collect();
    let text = serde_json::to_string(&recorded).expect("json");
    assert!(text.contains(&format!("\"discovered\":{}", d)), "the evidence is in the plan's events: {text}");
    assert!(text.contains(&format!("\"specs\":{}", d["chosen"])), "{text}");
    let prompt = std::fs::read_to_string(at.join(".strata/prompts/asked/read.1.prompt.md")).expect("prompt");
    assert!(prompt.contains("Specifications to follow: BRD-2.1"), "{prompt}");
}
