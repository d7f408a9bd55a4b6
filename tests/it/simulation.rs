//! The simulator's front ends and report: every scenario's result document validates against
//! `schemas/simulation-result.schema.json`; every scenario's journal round-trips through
//! `journal export` and `journal import` byte for byte; `strata simulate` repeats a seed exactly
//! and names the scenarios it has; the HTML report carries every chart, and headless Chromium (the
//! Debian package, installed by `.ci/run`) renders it with them.

use std::path::{Path, PathBuf};
use std::process::Command;

use strata_simulations::store::Defects;
use strata_simulations::{Config, html, result};
use strata_tests::{strata, strata_bin};

const CHARTS: [&str; 5] =
    ["chart-timeline", "chart-scorecard", "chart-forest-median-cost", "chart-scatter", "chart-ecdf"];

fn validator() -> jsonschema::Validator {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("root").join("schemas/simulation-result.schema.json");
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("schema")).expect("schema is JSON");
    jsonschema::validator_for(&schema).expect("the schema compiles")
}

#[test]
fn every_scenario_s_result_matches_its_schema_and_its_report_carries_the_charts() {
    let v = validator();
    for scenario in result::SCENARIOS {
        let steps = if scenario.starts_with("canary") { 100 } else { 200 };
        let o = result::run(scenario, Config { seed: 2, steps, defects: Defects::default() })
            .unwrap_or_else(|f| panic!("{f}"));
        let errors: Vec<String> = v.iter_errors(&o.result).map(|e| format!("{}: {e}", e.instance_path())).collect();
        assert!(errors.is_empty(), "{scenario}: {errors:?}\n{}", o.result);
        let page = html::render(&o.result);
        assert!(page.starts_with("<!doctype html>") && page.contains("id=\"provenance\""));
        assert!(page.contains(o.result["reproduce"].as_str().expect("reproduce")), "the footer names the reproduction");
        // Self-contained: no script, and no address but the SVG namespace.
        assert!(!page.contains("<script"));
        assert_eq!(page.matches("http").count(), page.matches("xmlns=\"http://www.w3.org/2000/svg\"").count());
        for id in ["faults", "invariants", "synthetic"] {
            assert!(page.contains(&format!("id=\"{id}\"")), "{scenario}: no {id}");
        }
        if scenario.starts_with("canary") {
            for id in CHARTS {
                assert!(page.contains(&format!("id=\"{id}\"")), "{scenario}: no {id}");
            }
        }
    }
    // A wrong document does not validate.
    assert!(!v.is_valid(&serde_json::json!({"schema": "strata.simulation-result/v1"})));
}

#[test]
fn every_scenario_s_journal_round_trips_through_export_and_import() {
    for scenario in result::SCENARIOS {
        let steps = if scenario.starts_with("canary") { 100 } else { 200 };
        let journal = result::journal(scenario, Config { seed: 3, steps, defects: Defects::default() })
            .unwrap_or_else(|f| panic!("{f}"));
        let mut export = Vec::new();
        strata_journal::export::export_jsonl(&journal, &mut export).expect("export");
        let events = strata_tests::assert_export_round_trips(strata_bin!(), &export, scenario);
        assert_eq!(events, journal.head().seq, "{scenario}");
    }
}

#[test]
fn strata_simulate_repeats_a_seed_and_names_its_scenarios() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let args = ["simulate", "--scenario", "journal-crash", "--seed", "9", "--steps", "200", "--json"];
    let (a, b) = (strata(strata_bin!(), tmp.path(), &args), strata(strata_bin!(), tmp.path(), &args));
    assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
    assert_eq!(a.stdout, b.stdout, "the same seed, the same run");
    let doc: serde_json::Value = serde_json::from_slice(&a.stdout).expect("the result document");
    assert!(validator().is_valid(&doc), "{doc}");
    let bad = strata(strata_bin!(), tmp.path(), &["simulate", "--scenario", "nope"]);
    assert_eq!(bad.status.code(), Some(2), "a usage error");
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(stderr.contains("STRATA-E1802") && stderr.contains("canary-marginal"), "{stderr}");
}

fn chromium() -> PathBuf {
    std::env::var_os("STRATA_TEST_CHROMIUM").map_or_else(|| PathBuf::from("chromium"), PathBuf::from)
}

#[test]
#[ignore = "needs chromium (Debian package); CI runs it"]
fn the_report_renders_in_headless_chromium_with_every_chart() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let report = tmp.path().join("report.html");
    let out = strata(
        strata_bin!(),
        tmp.path(),
        &[
            "simulate",
            "--scenario",
            "canary-marginal",
            "--seed",
            "3",
            "--steps",
            "200",
            "--report",
            report.to_str().expect("utf-8"),
        ],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let url = format!("file://{}", report.display());
    let headless = |extra: &[&str]| {
        Command::new(chromium())
            .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1000,3000"])
            .args(extra)
            .arg(&url)
            .current_dir(tmp.path())
            .output()
            .unwrap_or_else(|e| panic!("{} runs (set STRATA_TEST_CHROMIUM): {e}", chromium().display()))
    };
    // The browser's own parse of the page: every chart is an SVG element in the document.
    let dom = headless(&["--dump-dom"]);
    assert!(dom.status.success(), "{}", String::from_utf8_lossy(&dom.stderr));
    let dom = String::from_utf8_lossy(&dom.stdout);
    for id in CHARTS {
        assert!(dom.contains(&format!("<svg id=\"{id}\"")), "the rendered page has {id}");
    }
    assert!(dom.matches("class=\"window\"").count() >= 4, "the timeline has its windows");
    assert!(dom.matches("class=\"pair\"").count() >= 100, "the scatter has its pairs");
    assert!(dom.matches("class=\"marker\"").count() == 6, "the ECDFs have p50/p75/p95 for both arms");
    // And it paints: a screenshot of the page is a PNG of some substance.
    let shot = tmp.path().join("report.png");
    let painted = headless(&[&format!("--screenshot={}", shot.display())]);
    assert!(painted.status.success(), "{}", String::from_utf8_lossy(&painted.stderr));
    let png = std::fs::read(&shot).expect("the screenshot");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 50_000, "{} bytes", png.len());
}
