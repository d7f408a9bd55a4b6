//! The simulator's front ends and report: every scenario's result document validates against
//! `schemas/simulation-result.schema.json`; every scenario's journal round-trips through
//! `journal export` and `journal import` byte for byte; `strata simulate` repeats a seed exactly
//! and names the scenarios it has; the HTML report carries every chart, and headless Chromium (the
//! Debian package, installed by `.ci/run`) renders it with them: each chart with its axes, axis
//! labels, legend, thresholds and values as text in the DOM, and a screenshot (README's,
//! `docs/simulation-report.png`, retaken with `STRATA_UPDATE_SCREENSHOT=1`).

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
        let config = Config { seed: 2, steps, defects: Defects::default() };
        let o = result::run(scenario, config).unwrap_or_else(|f| panic!("{f}"));
        let errors: Vec<String> = v.iter_errors(&o.result).map(|e| format!("{}: {e}", e.instance_path())).collect();
        assert!(errors.is_empty(), "{scenario}: {errors:?}\n{}", o.result);
        let page = html::render(&o.result);
        assert!(page.starts_with("<!doctype html>") && page.contains("id=\"provenance\""));
        assert!(page.contains(o.result["reproduce"].as_str().expect("reproduce")), "the footer names the reproduction");
        // Deterministic: the same seed, the same bytes.
        let again = result::run(scenario, config).unwrap_or_else(|f| panic!("{f}"));
        assert!(html::render(&again.result) == page, "{scenario}: the report differs between two runs of one seed");
        // Self-contained: no script, and no address but the SVG namespace.
        assert!(!page.contains("<script"));
        assert_eq!(page.matches("http").count(), page.matches("xmlns=\"http://www.w3.org/2000/svg\"").count());
        assert!(!page.contains("chart-error"), "{scenario}: every chart drawn");
        for id in ["faults", "invariants", "synthetic"] {
            assert!(page.contains(&format!("id=\"{id}\"")), "{scenario}: no {id}");
        }
        if scenario.starts_with("canary") {
            for id in CHARTS {
                assert!(page.contains(&format!("id=\"{id}\"")), "{scenario}: no {id}");
            }
            charts_are_read_as_text(scenario, &page, &o.result);
        }
    }
    // A wrong document does not validate.
    assert!(!v.is_valid(&serde_json::json!({"schema": "strata.simulation-result/v1"})));
}

/// The SVG of chart `id` in `page` (the report or the browser's DOM of it).
fn chart<'a>(scenario: &str, page: &'a str, id: &str) -> &'a str {
    let from = page.find(&format!("<svg id=\"{id}\"")).unwrap_or_else(|| panic!("{scenario}: no {id}"));
    let len = page[from..].find("</svg>").expect("closed");
    &page[from..from + len]
}

/// The texts of class `class` in `svg`, trimmed.
fn texts(svg: &str, class: &str) -> Vec<String> {
    let open = format!("<text class=\"{class}\"");
    svg.match_indices(&open)
        .filter_map(|(at, _)| {
            let body = &svg[at..];
            let start = body.find('>')? + 1;
            let end = body.find("</text>")?;
            Some(body[start..end].trim().to_owned())
        })
        .collect()
}

/// Every chart of a canary report, as written or as the browser parsed it: a title and a
/// description, its axes with their two labels (units in them) and tick values, a legend where
/// marks differ; the scorecard's rows name their pass condition; each forest plot states its sign convention, labels its threshold with its
/// value and prints the measured value and the verdict beside every row; the scorecard's cells
/// carry their verdicts as words and their estimates, and the text scorecard has a row per gate.
fn charts_are_read_as_text(scenario: &str, page: &str, result: &serde_json::Value) {
    let windows = result["rollout"]["windows"].as_array().expect("windows");
    let last = windows.last().expect("a window");
    let gates = last["gates"].as_array().expect("gates");
    let mut ids: Vec<String> = CHARTS.iter().map(|s| (*s).to_owned()).collect();
    let forests: Vec<(String, &serde_json::Value)> = gates
        .iter()
        .map(|g| {
            let name = g["gate"].as_str().expect("gate");
            (format!("chart-forest-{}", name.replace(|c: char| !c.is_ascii_alphanumeric(), "-")), g)
        })
        .filter(|(id, _)| page.contains(&format!("<svg id=\"{id}\"")))
        .collect();
    ids.extend(forests.iter().map(|(id, _)| id.clone()));
    for id in &ids {
        let c = chart(scenario, page, id);
        assert!(c.contains(&format!("<title id=\"{id}-title\">")) && c.contains("<desc id="), "{scenario} {id}: title");
        assert!(c.contains("<g class=\"axes\">"), "{scenario} {id}: axes");
        let labels = texts(c, "axis-label");
        assert_eq!(labels.len(), 2, "{scenario} {id}: an x and a y axis label: {labels:?}");
        assert!(texts(c, "tick").len() >= 4, "{scenario} {id}: scales");
    }
    for id in ["chart-scatter", "chart-ecdf"] {
        let c = chart(scenario, page, id);
        assert!(texts(c, "axis-label").iter().any(|l| l.contains("(micro-units)")), "{scenario} {id}: units");
        assert!(texts(c, "legend-item").len() >= 2, "{scenario} {id}: a legend");
    }
    let ecdf = chart(scenario, page, "chart-ecdf");
    assert_eq!(ecdf.matches("class=\"marker\"").count(), 6, "{scenario}: p50/p75/p95 for both arms");
    assert_eq!(texts(ecdf, "marker-label").len(), 6, "{scenario}: each marker's value");
    let timeline = chart(scenario, page, "chart-timeline");
    assert_eq!(texts(timeline, "window").len(), windows.len(), "{scenario}: each window's action as a word");
    assert_eq!(texts(timeline, "legend-item").len(), 3, "{scenario}: the actions' legend");
    let scorecard = chart(scenario, page, "chart-scorecard");
    assert_eq!(texts(scorecard, "verdict").len(), windows.len() * gates.len(), "{scenario}: a verdict per cell");
    if windows.len() <= 7 {
        assert_eq!(
            texts(scorecard, "cell-value").len(),
            windows.len() * gates.len(),
            "{scenario}: an estimate per cell"
        );
    }
    let rows = texts(scorecard, "tick");
    assert!(
        rows.iter().any(|r| r.contains("median_cost (lower bound ≥")),
        "{scenario}: each gate's condition: {rows:?}"
    );
    for (id, g) in &forests {
        let c = chart(scenario, page, id);
        assert!(c.contains("right is better"), "{scenario} {id}: the sign convention in the title");
        let x = &texts(c, "axis-label");
        assert!(x.iter().any(|l| l.contains("better →") && l.contains("← worse")), "{scenario} {id}: {x:?}");
        let threshold = texts(c, "threshold-label");
        assert!(threshold.len() == 1 && threshold[0].starts_with("threshold "), "{scenario} {id}: {threshold:?}");
        let measured = texts(c, "measured");
        assert_eq!(measured.len(), c.matches("class=\"estimate\"").count() + 1, "{scenario} {id}: a value per row");
        let verdict = g["verdict"].as_str().expect("verdict");
        assert!(measured.last().is_some_and(|m| m.ends_with(verdict)), "{scenario} {id}: {measured:?}");
    }
    let from = page.find("<table id=\"scorecard-text\"").expect("the text scorecard");
    let table = &page[from..from + page[from..].find("</table>").expect("closed")];
    assert!(table.contains("<th>metric</th><th>condition</th><th>measured</th><th>verdict</th>"), "{table}");
    assert_eq!(table.matches("<tr><td>").count(), gates.len(), "a row per gate: {table}");
    for g in gates {
        let verdict = g["verdict"].as_str().expect("verdict");
        assert!(table.contains(&format!(">{verdict}</td></tr>")), "{scenario}: {verdict} as a word");
    }
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
    // The browser's own parse of the page: every chart is an SVG element in the document, with
    // its axes, labels, legends, thresholds and values as text (what a reader or a screen reader
    // gets, not only a tooltip).
    let dom = headless(&["--dump-dom"]);
    assert!(dom.status.success(), "{}", String::from_utf8_lossy(&dom.stderr));
    let dom = String::from_utf8_lossy(&dom.stdout);
    for id in CHARTS {
        assert!(dom.contains(&format!("<svg id=\"{id}\"")), "the rendered page has {id}");
    }
    assert!(dom.matches("class=\"pair\"").count() >= 100, "the scatter has its pairs");
    let config = Config { seed: 3, steps: 200, defects: Defects::default() };
    let o = result::run("canary-marginal", config).unwrap_or_else(|f| panic!("{f}"));
    charts_are_read_as_text("canary-marginal (as Chromium parsed it)", &dom, &o.result);
    assert!(dom.contains("id=\"scorecard-text\""));
    // And it paints: a screenshot of the page is a PNG of some substance.
    let shot = tmp.path().join("report.png");
    let painted = headless(&[&format!("--screenshot={}", shot.display())]);
    assert!(painted.status.success(), "{}", String::from_utf8_lossy(&painted.stderr));
    let png = std::fs::read(&shot).expect("the screenshot");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 50_000, "{} bytes", png.len());
    // README's screenshot (docs/simulation-report.png, its first screen) is this test's, taken
    // again with STRATA_UPDATE_SCREENSHOT=1.
    if std::env::var_os("STRATA_UPDATE_SCREENSHOT").is_some() {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("root").join("docs/simulation-report.png");
        let first = Command::new(chromium())
            .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars"])
            .args(["--window-size=860,1900", &format!("--screenshot={}", docs.display()), &url])
            .current_dir(tmp.path())
            .output()
            .expect("chromium runs");
        assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    }
}

/// The prompts and capsule facts `strata run` used, read back from its journal and prompt files:
/// what the simulation cannot know of the world (the knowledge base, the repository's tip).
struct Recorded {
    dispatched: std::collections::BTreeMap<(String, u32), strata_engine::workgroup::events::Dispatched>,
    prompts: PathBuf,
    workgroup: String,
    /// What each run of the consolidated suite answered in `strata run`, by run number.
    suites: std::collections::BTreeMap<u32, Vec<strata_engine::workgroup::verify::Check>>,
    /// What each attempt's `verify` commands answered in `strata run`.
    checks: std::collections::BTreeMap<(String, u32), Vec<strata_engine::workgroup::verify::Check>>,
    /// What planning each phase gave in `strata run`.
    planned: std::collections::BTreeMap<String, strata_engine::workgroup::gates::PhasePlanned>,
}

impl Recorded {
    fn planned_as(&self, task: &str, attempt: u32) -> Option<String> {
        let p = self.prompts.join(&self.workgroup).join(format!("{task}.{attempt}.prompt.manifest.json"));
        let m: strata_engine::context::assemble::Manifest =
            serde_json::from_str(&std::fs::read_to_string(p).ok()?).ok()?;
        m.continuation.map(|c| c.base_prompt_hash)
    }

    fn capsule(&self, task: &str, attempt: u32) -> Result<serde_json::Value, String> {
        let p = self.prompts.join(&self.workgroup).join(format!("{task}.{attempt}.prompt.capsule.json"));
        let text = std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        serde_json::from_str(&text).map_err(|e| e.to_string())
    }

    /// The facts a capsule was drafted from, as its text states them.
    fn facts(capsule: &serde_json::Value) -> strata_engine::workgroup::dispatch::CapsuleFacts {
        let knowledge = capsule["constraints"].as_array().into_iter().flatten().find_map(|c| {
            c.as_str()?.strip_prefix("The knowledge this capsule was sealed from has digest ")?.strip_suffix('.')
        });
        strata_engine::workgroup::dispatch::CapsuleFacts {
            knowledge: knowledge.map(str::to_owned),
            checkpoint: capsule["checkpoint_sha"].as_str().map(str::to_owned),
            ..Default::default()
        }
    }
}

impl strata_simulations::plan_run::Briefing for Recorded {
    fn brief(
        &mut self,
        task: &strata_engine::workgroup::plan::Task,
        attempt: u32,
        _lineage: &str,
    ) -> Result<strata_engine::workgroup::dispatch::Brief, String> {
        let d = self.dispatched.get(&(task.id().to_owned(), attempt)).ok_or("strata run never dispatched it")?;
        let facts = if d.capsule_hash.is_some() {
            Recorded::facts(&self.capsule(task.id(), attempt)?)
        } else {
            Default::default()
        };
        Ok(strata_engine::workgroup::dispatch::Brief {
            prompt: d.prompt.clone(),
            prompt_text: String::new(),
            baseline_tokens: d.baseline_tokens,
            facts,
            // A retry's prompt extends the planned one by its continuation status, as its
            // manifest records.
            planned_as: self.planned_as(task.id(), attempt),
        })
    }

    fn build_facts(
        &mut self,
        task: &strata_engine::workgroup::plan::Task,
        attempt: u32,
    ) -> Option<strata_engine::workgroup::gates::BuildFacts> {
        // What the knowledge base said when strata run dispatched it, as it recorded.
        let d = self.dispatched.get(&(task.id().to_owned(), attempt))?;
        d.gate.as_ref().map(|g| g.facts.clone())
    }

    fn facts_now(
        &mut self,
        dispatching: (&str, u32),
        prior: &strata_engine::workgroup::plan::Task,
        _lineage: &str,
    ) -> Result<strata_engine::workgroup::dispatch::CapsuleFacts, String> {
        // The prior's knowledge (the base does not change during the run) at the tip the
        // continuation was dispatched on.
        let done = self.dispatched.keys().filter(|(t, _)| t == prior.id()).map(|(_, a)| *a).max().ok_or("no prior")?;
        let mut facts = Recorded::facts(&self.capsule(prior.id(), done)?);
        facts.checkpoint = Recorded::facts(&self.capsule(dispatching.0, dispatching.1)?).checkpoint;
        Ok(facts)
    }

    fn suite(
        &mut self,
        due: &strata_engine::workgroup::verify::SuiteDue,
    ) -> Result<Vec<strata_engine::workgroup::verify::Check>, String> {
        // How the commands ended when strata run ran them.
        self.suites.get(&due.run).cloned().ok_or_else(|| format!("strata run never ran suite run {}", due.run))
    }

    fn checks(
        &mut self,
        task: &strata_engine::workgroup::plan::Task,
        attempt: u32,
    ) -> Result<Vec<strata_engine::workgroup::verify::Check>, String> {
        let key = (task.id().to_owned(), attempt);
        self.checks.get(&key).cloned().ok_or_else(|| format!("strata run never checked {key:?}"))
    }

    fn planned(&mut self, phase: &str) -> Result<strata_engine::workgroup::gates::PhasePlanned, String> {
        self.planned.get(phase).cloned().ok_or_else(|| format!("strata run never planned the {phase} phase"))
    }
}

/// The decision events of a journal: the workgroup's, the runner's worker streams, the dispatch
/// ledger's and the telemetry's, each as (stream, type, payload) with the values that differ by
/// nature between a run and a simulation set aside: times; the id of a git commit (whether there
/// is one stays); and which other writers were in flight when a task was routed
/// (`active_writers`, `active_inherited_writers`), which in `strata run` depends on the wall-clock
/// order in which workers end and the coordinator gets to them, in the simulation on simulated
/// time alone. The decisions taken from them (mode, reasons, claims, holds) are compared.
fn decisions(j: &strata_journal::Journal) -> Vec<(String, String, serde_json::Value)> {
    fn normal(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, x) in m.iter_mut() {
                    if k.ends_with("_ns") || k.ends_with("_at") || k == "wall_ms" {
                        *x = serde_json::Value::String("<time>".into());
                    } else if k == "input_bytes" || k == "prompt_bytes" {
                        // The run hands its workers the assembled prompt; the simulation a stand-in.
                        *x = serde_json::Value::String("<bytes>".into());
                    } else if k == "active_writers" || k == "active_inherited_writers" {
                        *x = serde_json::Value::String("<in flight>".into());
                    } else if k == "commit" && x.is_string() {
                        *x = serde_json::Value::String("<commit>".into());
                    } else {
                        normal(x);
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(normal),
            _ => {}
        }
    }
    let events = j.read_range(1, j.head().seq as usize + 1).unwrap();
    events
        .into_iter()
        .filter(|e| {
            ["workgroup/", "worker/", "telemetry/"].iter().any(|p| e.stream.starts_with(p))
                || e.stream == strata_engine::ce::ledger::STREAM
        })
        .map(|e| {
            let mut v: serde_json::Value = serde_json::from_slice(&e.payload).unwrap();
            normal(&mut v);
            (e.stream.clone(), e.event_type.clone(), v)
        })
        .collect()
}

#[test]
fn strata_run_and_the_simulation_record_the_same_decisions_for_one_plan_and_seed() {
    let tmp = tempfile::tempdir().unwrap();
    let at = tmp.path().join("example");
    let at_arg = at.display().to_string();
    let args = ["run", "--example", "--at", &at_arg, "--provider", "sim", "--seed", "6", "--time-scale", "20"];
    let out = strata(strata_bin!(), tmp.path(), &args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let run = simulated_alike(&at, "cr-1-rollout");
    // The seed gives the decisions worth comparing: a local task, a retried failure, a warm
    // session resumed after reconciling its stale capsule, writers' claims and releases.
    for kind in ["task.completed", "task.failed", "ce.lineage-reconciled", "ce.ownership-claimed", "ce.lease-renewed"] {
        assert!(run.iter().any(|(_, t, _)| t == kind), "the run records no {kind}");
    }
    assert!(run.iter().any(|(_, t, v)| t == "task.dispatched" && v["runs_as"] == "local"));
    // Each dispatch's model choice (the profile's tier for the role) is among what is compared.
    assert!(run.iter().any(|(_, t, v)| t == "task.dispatched" && v["model"]["from"] == "profile"));
    // The resume went through the lineage evaluator, and its answer is recorded with the dispatch.
    let resumed = run.iter().find(|(_, t, v)| t == "task.dispatched" && v["runs_as"] == "resume").expect("a resume");
    assert_eq!(resumed.2["lineage_check"]["state"], "RECONCILE_REQUIRED", "{:?}", resumed.2);
}

/// Simulates the workgroup `wg` that `strata run` ran in workspace `at` from its recorded plan,
/// seed and policy, with the prompts and capsule facts the run used, and asserts that the
/// simulation records the same decisions; returns the run's decisions.
fn simulated_alike(at: &Path, wg: &str) -> Vec<(String, String, serde_json::Value)> {
    let journal = strata_journal::Journal::open(
        &at.join(".strata/journal"),
        &strata_tests::options(strata_journal::Durability::Process),
    )
    .unwrap();
    let mut groups = strata_engine::workgroup::state::Workgroups::default();
    strata_journal::projection::catch_up_one(&mut groups, &journal).unwrap();
    let g = groups.get(wg).unwrap().clone();
    let mut dispatched = std::collections::BTreeMap::new();
    let mut suites = std::collections::BTreeMap::new();
    let mut checks = std::collections::BTreeMap::new();
    let mut planned = std::collections::BTreeMap::new();
    for r in journal.read_range(1, journal.head().seq as usize + 1).unwrap() {
        if r.event_type == strata_engine::workgroup::events::DISPATCHED {
            let d: strata_engine::workgroup::events::Dispatched = serde_json::from_slice(&r.payload).unwrap();
            dispatched.insert((d.task.clone(), d.attempt), d);
        }
        if r.event_type == strata_engine::workgroup::events::SUITE_CHECKED {
            let s: strata_engine::workgroup::verify::SuiteChecked = serde_json::from_slice(&r.payload).unwrap();
            suites.insert(s.run, s.checks);
        }
        if r.event_type == strata_engine::workgroup::events::PHASE_PLANNED {
            let p: strata_engine::workgroup::gates::PhasePlanned = serde_json::from_slice(&r.payload).unwrap();
            planned.insert(p.phase.clone(), p);
        }
        if r.event_type == strata_engine::workgroup::events::WORKER_CHECKED {
            let c: strata_engine::workgroup::verify::Checked = serde_json::from_slice(&r.payload).unwrap();
            checks.insert((c.task, c.attempt), c.checks);
        }
    }
    let mut recorded = Recorded {
        dispatched,
        prompts: at.join(".strata/prompts"),
        workgroup: g.plan.workgroup.clone(),
        suites,
        checks,
        planned,
    };
    let setup = strata_simulations::plan_run::Setup {
        plan: g.plan.clone(),
        seed: g.seed,
        started: g.started.clone(),
        policy: g.policy.clone(),
        on_violation: "stop",
        worktrees: true,
        start_ns: 1_795_000_000_000_000_000,
    };
    let simulated = strata_simulations::plan_run::run(setup, &mut recorded).unwrap();
    let (run, sim) = (decisions(&journal), decisions(&simulated));
    // The same events on each stream in the same order, except where the order of two workers'
    // ends decides it: the workgroup's and the ledger's streams interleave tasks, so there the
    // events are compared as sets, and each task's own events in order.
    let by_stream = |d: &[(String, String, serde_json::Value)], interleaved: bool| {
        let mut m: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        for (s, t, v) in d {
            let shared = s.starts_with("workgroup/") || s == strata_engine::ce::ledger::STREAM;
            if shared != interleaved {
                continue;
            }
            let key = if shared { format!("{s} {}", v["task"].as_str().unwrap_or("")) } else { s.clone() };
            m.entry(key).or_default().push(format!("{t} {v}"));
        }
        if interleaved {
            // The ledger's events carry no task: compared as a set.
            m.values_mut().filter(|v| v.iter().any(|e| e.starts_with("ce."))).for_each(|v| v.sort());
        }
        m
    };
    let differ = |a: &std::collections::BTreeMap<String, Vec<String>>,
                  b: &std::collections::BTreeMap<String, Vec<String>>| {
        let mut out = Vec::new();
        for k in a.keys().chain(b.keys()).collect::<std::collections::BTreeSet<_>>() {
            let (x, y) = (a.get(k).cloned().unwrap_or_default(), b.get(k).cloned().unwrap_or_default());
            for e in x.iter().filter(|e| !y.contains(e)) {
                out.push(format!("only in the run, {k}: {e}"));
            }
            for e in y.iter().filter(|e| !x.contains(e)) {
                out.push(format!("only in the simulation, {k}: {e}"));
            }
            if out.is_empty() && x != y {
                out.push(format!("{k}: the same events in another order"));
            }
        }
        out.join("\n")
    };
    for interleaved in [false, true] {
        let (a, b) = (by_stream(&run, interleaved), by_stream(&sim, interleaved));
        assert!(a == b, "{}", differ(&a, &b));
    }
    let mut all_run: Vec<String> = run.iter().map(|(s, t, v)| format!("{s} {t} {v}")).collect();
    let mut all_sim: Vec<String> = sim.iter().map(|(s, t, v)| format!("{s} {t} {v}")).collect();
    all_run.sort();
    all_sim.sort();
    assert_eq!(all_run, all_sim, "every decision event, as a set");
    run
}

/// A plan exercising the decisions of the context-efficiency policy: a trivial task done
/// locally, two continuations of which the policy's cap lets one resume, a fork of a warm
/// session, tight coupling, and a handoff for every result.
const POLICY_PLAN: &str = r#"
workgroup = "alike"
pipeline = "light"
[[task]]
id = "survey"
role = "analyst"
objective = "Say what the modules do."
trivial = true
[[task]]
id = "a1"
role = "backend-builder"
objective = "Write the first module."
owns = ["src/a1.rs"]
after = ["survey"]
[[task]]
id = "a2"
role = "backend-builder"
objective = "Write the second module."
owns = ["src/a2.rs"]
after = ["survey"]
[[task]]
id = "b1"
role = "backend-builder"
objective = "Extend the first module."
owns = ["src/a1.rs"]
after = ["a1", "a2"]
continues = "a1"
[[task]]
id = "b2"
role = "backend-builder"
objective = "Extend the second module."
owns = ["src/a2.rs"]
after = ["a1", "a2"]
continues = "a2"
[[task]]
id = "fork"
role = "test-builder"
objective = "Test the second module as its author would."
owns = ["src/a2_tests.rs"]
after = ["b2"]
affinity = "b2"
sensitivity = "normal"
affinity_approved = true
[[task]]
id = "glue"
role = "backend-builder"
objective = "Wire the modules together."
owns = ["src/glue.rs"]
after = ["b1"]
coupling = "tight"
"#;

#[test]
fn strata_run_and_the_simulation_agree_on_the_policys_decisions() {
    let tmp = tempfile::tempdir().unwrap();
    let files = [("src/a1.rs", "// a1\n"), ("src/a2.rs", "// a2\n")];
    let (ws, repo, plan) = strata_tests::run_setting(strata_bin!(), tmp.path(), &files, POLICY_PLAN);
    let config = ws.join(".strata/config.toml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str("\n[context_efficiency]\nmax_active_inherited = 1\ndisk_handoff_threshold = \"always\"\n");
    std::fs::write(&config, text).unwrap();
    let (plan, repo) = (plan.display().to_string(), repo.display().to_string());
    let args = ["run", &plan, "--repo", &repo, "--provider", "sim", "--seed", "11", "--time-scale", "20"];
    let out = strata(strata_bin!(), &ws, &args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let run = simulated_alike(&ws, "alike");
    let mode = |task: &str| {
        run.iter()
            .filter(|(_, t, v)| t == "task.dispatched" && v["task"] == task)
            .map(|(_, _, v)| v["runs_as"].as_str().unwrap_or_default().to_owned())
            .collect::<Vec<_>>()
    };
    assert!(mode("survey").contains(&"local".to_owned()), "{:?}", mode("survey"));
    let (b1, b2) = (mode("b1"), mode("b2"));
    assert_eq!([&b1, &b2].iter().filter(|m| m.contains(&"resume".to_owned())).count(), 1, "{b1:?} {b2:?}");
    assert!(mode("fork").contains(&"inherit-full".to_owned()), "{:?}", mode("fork"));
    assert!(mode("glue").contains(&"local".to_owned()), "{:?}", mode("glue"));
    assert!(run.iter().any(|(_, t, v)| t == "task.completed" && v["task"] == "survey" && !v["handoff"].is_null()));
}

/// A plan whose caps decide: one task's output cap interrupts it (and its fallback), and the
/// workgroup's cost cap pauses the run before its last task.
const CAPS_PLAN: &str = r#"
workgroup = "capped-alike"
pipeline = "light"
parallel = 1
retries = 0
[caps.workgroup]
cost_usd = 0.02
[[task]]
id = "big"
role = "backend-builder"
objective = "Write too much."
owns = ["src/big.rs"]
caps = { output_tokens = 150 }
[[task]]
id = "first"
role = "backend-builder"
objective = "Write the first module."
owns = ["src/first.rs"]
[[task]]
id = "second"
role = "backend-builder"
objective = "Write the second module."
owns = ["src/second.rs"]
after = ["first"]
[[task]]
id = "third"
role = "backend-builder"
objective = "Write the third module."
owns = ["src/third.rs"]
after = ["second"]
"#;

#[test]
fn strata_run_and_the_simulation_agree_on_caps_and_a_pause() {
    let tmp = tempfile::tempdir().unwrap();
    let (ws, repo, plan) = strata_tests::run_setting(strata_bin!(), tmp.path(), &[("src/lib.rs", "//\n")], CAPS_PLAN);
    let (plan, repo) = (plan.display().to_string(), repo.display().to_string());
    let args = ["run", &plan, "--repo", &repo, "--provider", "sim", "--seed", "5", "--time-scale", "0"];
    let out = strata(strata_bin!(), &ws, &args);
    assert_eq!(out.status.code(), Some(4), "paused: {}", String::from_utf8_lossy(&out.stderr));
    let run = simulated_alike(&ws, "capped-alike");
    let capped: Vec<_> = run.iter().filter(|(_, t, v)| t == "worker.capped" && v["task"] == "big").collect();
    assert_eq!(capped.len(), 2, "the attempt and its fallback");
    assert!(run.iter().any(|(_, t, v)| t == "workgroup.paused" && v["reason"] == "workgroup-cap"));
    assert!(!run.iter().any(|(_, t, v)| t == "task.dispatched" && v["task"] == "third"), "nothing after the pause");
}

/// A light plan with a consolidated suite that runs twice: before the review and after the fix
/// round that follows it.
const SUITE_PLAN: &str = r#"
workgroup = "suite-alike"
pipeline = "light"
retries = 0
suite = ["test -f src/api.rs", "true"]
[[task]]
id = "api"
role = "backend-builder"
objective = "Write the API."
owns = ["src/api.rs"]
verify = ["test -f src/api.rs"]
[[task]]
id = "review"
role = "reviewer"
phase = "review"
objective = "Review the API."
after = ["api"]
[[task]]
id = "fix"
role = "backend-builder"
phase = "review"
objective = "Fix what the review found."
owns = ["src/fix.rs"]
after = ["review"]
"#;

#[test]
fn strata_run_and_the_simulation_agree_on_the_consolidated_suite_and_the_review_gate() {
    let tmp = tempfile::tempdir().unwrap();
    let (ws, repo, plan) = strata_tests::run_setting(strata_bin!(), tmp.path(), &[("src/lib.rs", "//\n")], SUITE_PLAN);
    let (plan, repo) = (plan.display().to_string(), repo.display().to_string());
    let args = ["run", &plan, "--repo", &repo, "--provider", "sim", "--seed", "5", "--time-scale", "0"];
    let out = strata(strata_bin!(), &ws, &args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let run = simulated_alike(&ws, "suite-alike");
    let suites: Vec<_> = run.iter().filter(|(_, t, _)| t == "workgroup.suite-checked").collect();
    assert_eq!(suites.len(), 2, "before the review and after the fix: {suites:?}");
    let review = run.iter().find(|(_, t, v)| t == "task.dispatched" && v["task"] == "review").expect("review ran");
    assert_eq!(review.2["gate"]["suite"], "passed 2/2 on the changes of 1 task", "{}", review.2);
}
