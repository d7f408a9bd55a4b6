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
