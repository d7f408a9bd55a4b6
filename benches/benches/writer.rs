//! A writer task's coordinator overhead on the bundled example (issue 27, Deliver 5), measured
//! the way `strata run --example` reports it and with the writers alone.
//!
//! * `strata --json run --example` as a child process, `STRATA_WRITER_RUNS` times (default 9):
//!   each run's `coordinator_overhead_p50_us` (7 tasks, 5 of them writers, so the median attempt
//!   is a writer's), and the median over the runs. Target: ≤ 10 ms.
//! * The example's five writing tasks and its reviewer (the planner left out), in process
//!   through [`Coordinator`], on a fresh example workspace per run, the simulated latency scaled
//!   as the CLI scales it: the p50 over every writer attempt of every run.
//! * Baseline in the same run: the same `run --example` with [`CLI_ENV`] set, so every writer
//!   task's worktree and commit are made by `git` processes as before (runs alternate between
//!   the two, so both see the same machine load); and one `git rev-parse HEAD` process in the
//!   example repository, the floor of any step that still starts git.
//!
//! No wall-clock bound is asserted: the figures are printed and written to
//! `target/strata-bench/writer.json` for BENCHMARKS.md.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use strata_adapters::coordinator::git::inproc::CLI_ENV;
use strata_adapters::coordinator::{Coordinator, Options, example};
use strata_benches::{Samples, report};
use strata_engine::workgroup::plan::{self, Plan};

/// The example plan with its planner left out: the five writers and the reviewer.
fn writers_only() -> String {
    let mut plan: toml::Table = toml::from_str(example::PLAN).expect("the example plan is TOML");
    let Some(toml::Value::Array(tasks)) = plan.get_mut("task") else { panic!("the example plan has tasks") };
    // The full pipeline needs its review task; it is one attempt of seven, so the p50 is a
    // writer's.
    tasks.retain(|t| t.get("owns").is_some() || t.get("phase").and_then(|p| p.as_str()) == Some("review"));
    for t in tasks.iter_mut() {
        if let Some(toml::Value::Array(after)) = t.get_mut("after") {
            after.retain(|a| a.as_str() != Some("survey"));
        }
    }
    toml::to_string(&plan).expect("the plan serialises")
}

fn runs() -> usize {
    std::env::var("STRATA_WRITER_RUNS").ok().and_then(|v| v.parse().ok()).filter(|n| *n > 0).unwrap_or(9)
}

/// One `strata --json run --example` in `at` (with `git` processes only when `cli`): its
/// reported overhead p50, microseconds.
fn cli_run(at: &Path, cli: bool) -> f64 {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_strata-bench-cli"));
    cmd.args(["--json", "run", "--example", "--at"]).arg(at);
    if cli {
        cmd.env(CLI_ENV, "1");
    } else {
        cmd.env_remove(CLI_ENV);
    }
    let out = cmd.output().expect("strata runs");
    assert!(out.status.success(), "run --example failed: {}", String::from_utf8_lossy(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON out");
    assert_eq!(doc["completed"], 7, "every task of the example completes");
    doc["coordinator_overhead_p50_us"].as_f64().expect("an overhead p50")
}

/// The writers-only plan on a fresh example workspace in `at`: every attempt's overhead, µs.
fn writers_run(at: &Path, plan_text: &str) -> Vec<u64> {
    let (ws, repo) = example::build(at).expect("example workspace");
    let journal = ws.open_journal("bench").expect("journal");
    let options = Options {
        provider: Some("sim".into()),
        seed: 7,
        time_scale: 1000,
        progress: false,
        live: false,
        repo: Some(repo),
        on_violation: "stop".into(),
        prompts_dir: ws.strata_dir().join("prompts"),
        workspace: ws.root().to_path_buf(),
        nesting_depth: 0,
        detected: Default::default(),
        rollout: None,
    };
    let plan: Plan = toml::from_str(plan_text).expect("plan TOML");
    let checked = plan::check(&plan).expect("plan checks");
    let mut c = Coordinator::open(&journal, ws.config().expect("config"), options).expect("coordinator");
    let wg = c.plan(checked).expect("planned");
    let measured = c.run(&wg).expect("the run completes");
    let g = c.groups().get(&wg).expect("workgroup").clone();
    drop(c);
    journal.close_blocking().expect("close");
    assert!(g.finished, "the writers' run finished");
    measured.overhead_us
}

fn main() {
    // `cargo bench` passes `--bench`; nothing here takes arguments.
    let samples = Samples::default();
    let tmp = tempfile::tempdir().expect("tempdir");
    let n = runs();
    for i in 0..n {
        let p50 = cli_run(&tmp.path().join(format!("cli-{i}")), false);
        let git = cli_run(&tmp.path().join(format!("git-{i}")), true);
        println!(
            "run --example {}: coordinator overhead p50 {:.2} ms; with git processes {:.2} ms",
            i + 1,
            p50 / 1e3,
            git / 1e3
        );
        samples.value("run-example-overhead-p50-us", p50);
        samples.value("run-example-git-cli-overhead-p50-us", git);
    }
    let plan_text = writers_only();
    for i in 0..n {
        let all = writers_run(&tmp.path().join(format!("writers-{i}")), &plan_text);
        let mid = all.get(all.len().saturating_sub(1) / 2).copied().unwrap_or_default();
        println!("writers only {}: {} attempts, p50 {:.2} ms", i + 1, all.len(), mid as f64 / 1e3);
        for us in all {
            samples.value("writer-attempt-overhead-us", us as f64);
        }
    }
    let repo = tmp.path().join("cli-0").join("repo");
    for _ in 0..20 {
        let t = Instant::now();
        let ok = Command::new("git").arg("-C").arg(&repo).args(["rev-parse", "HEAD"]).output().expect("git runs");
        assert!(ok.status.success());
        samples.value("git-rev-parse-process-us", t.elapsed().as_micros() as f64);
    }
    let cli = samples.median("run-example-overhead-p50-us").unwrap_or(f64::NAN);
    let with_git = samples.median("run-example-git-cli-overhead-p50-us").unwrap_or(f64::NAN);
    let writers = samples.median("writer-attempt-overhead-us").unwrap_or(f64::NAN);
    let git = samples.median("git-rev-parse-process-us").unwrap_or(f64::NAN);
    println!(
        "writer overhead: run --example p50 (median of {n}) {:.2} ms, with git processes {:.2} ms, writers alone p50 {:.2} ms (target <= 10 ms); one git process {:.2} ms",
        cli / 1e3,
        with_git / 1e3,
        writers / 1e3,
        git / 1e3
    );
    report(
        "writer",
        &samples,
        &[],
        &[
            ("run --example overhead p50, median of runs (target <= 10)", cli / 1e3, "ms"),
            ("the same with git processes (STRATA_GIT_CLI=1)", with_git / 1e3, "ms"),
            ("writer attempt overhead p50, writers-only plan", writers / 1e3, "ms"),
            ("one git process (rev-parse HEAD)", git / 1e3, "ms"),
        ],
    );
}
