//! Coordinator overhead of `strata run` with the simulated provider, against a baseline measured
//! in the same run.
//!
//! * A 1,000-task workgroup (every fifth task writes its own directory in a git worktree; the
//!   rest read; layered dependencies; eight workers at once) runs over the bundled knowledge base
//!   on a sled journal with power durability, simulated latency not waited for. Per task the
//!   coordinator's own time is measured: routing, prompt assembly with its bill of materials,
//!   claims, the dispatch and completion appends, the worktree and post-turn diff for writers,
//!   plus the runner's (the adapters' dispatch subscriber): preparing the brief and the
//!   worker's start and end appends. Target: p50 ≤ 20 ms. The run must complete and its journal verify.
//! * The same run governed: caps on every task and the workgroup (none reached), a `verify`
//!   command that does nothing on every task, telemetry with an efficiency event per attempt;
//!   the plain run has none of them (telemetry off). Target: governed ≤ 1.25× plain. The check
//!   processes' own lives (spawn to exit) are the checks' time and left out of the overhead, as
//!   the workers' turns are; what strata does around them (the worktree snapshot and restore,
//!   the logs and their hashes, the events) is in it. The figure with them counted is reported
//!   too. The bench binary is the checks' confinement trampoline, as `strata` is in a run.
//!   Plain and governed run twice each, in the order plain, governed, governed, plain.
//! * Baseline: the durable writes alone, as raw sled: four inserts with a flush each per task
//!   (dispatch, worker start, worker end, completion), the floor any recorded step pays.

use std::path::Path;
use std::time::Instant;

use criterion::{Criterion, criterion_group};
use strata_adapters::coordinator::{Coordinator, Options, example};
use strata_benches::{Ratio, Samples, report, timed_per_call};
use strata_engine::workgroup::plan::{self, Plan};

static SAMPLES: std::sync::LazyLock<Samples> = std::sync::LazyLock::new(Samples::default);

const TASKS: usize = 1_000;

/// Caps on every task and the workgroup (generous: none is reached) and a check that does
/// nothing on every task: what the governed run adds to the plain one.
const GOVERNED: &str = "[caps.task]\nturns = 1000\noutput_tokens = 100000000\nwall_seconds = 86400\n[caps.workgroup]\ncost_usd = 1000000\n";

fn plan_text(governed: bool) -> String {
    let mut t = String::from("workgroup = \"bench\"\nparallel = 8\nretries = 1\n");
    if governed {
        t.push_str(GOVERNED);
    }
    let verify = if governed { "verify = [\"true\"]\n" } else { "" };
    t.push_str("\n[[task]]\nid = \"plan\"\nrole = \"planner\"\nphase = \"plan\"\nobjective = \"Plan change request CR-1.\"\nchange_request = \"CR-1\"\n");
    for i in 1..TASKS - 1 {
        let after = if i < 9 { "plan".to_owned() } else { format!("t{}", i - 8) };
        let (role, owns) = if i % 5 == 0 {
            ("backend-builder", format!("owns = [\"src/m{i}/\"]\n"))
        } else {
            ("analyst", String::new())
        };
        t.push_str(&format!(
            "\n[[task]]\nid = \"t{i}\"\nrole = \"{role}\"\nobjective = \"Part {i} of change request CR-1.\"\nchange_request = \"CR-1\"\nafter = [\"{after}\"]\n{owns}{verify}"
        ));
    }
    t.push_str(
        "\n[[task]]\nid = \"review\"\nrole = \"reviewer\"\nphase = \"review\"\nobjective = \"Review it all.\"\n",
    );
    t
}

/// Runs the 1,000-task plan in `dir`: plain (no caps, no checks, telemetry off) or governed
/// (caps, a check per task, telemetry with an efficiency event per attempt).
fn run_thousand(dir: &Path, governed: bool) -> (strata_adapters::coordinator::Measured, u64, usize) {
    let (ws, repo) = example::build(&dir.join("ws")).expect("example workspace");
    let journal = ws.open_journal("bench").expect("journal");
    let options = Options {
        provider: Some("sim".into()),
        seed: 7,
        time_scale: 0,
        progress: false,
        live: false,
        repo: Some(repo),
        on_violation: "flag".into(),
        prompts_dir: ws.strata_dir().join("prompts"),
        workspace: ws.root().to_path_buf(),
        nesting_depth: 0,
        detected: Default::default(),
        rollout: None,
    };
    let plan: Plan = toml::from_str(&plan_text(governed)).expect("plan TOML");
    let checked = plan::check(&plan).expect("plan checks");
    let mut config = ws.config().expect("config");
    if !governed {
        config.efficiency.telemetry = strata_engine::workgroup::policy::TelemetryMode::Off;
    }
    let mut c = Coordinator::open(&journal, config, options).expect("coordinator");
    let wg = c.plan(checked).expect("planned");
    let t = Instant::now();
    let measured = c.run(&wg).expect("the run completes");
    let elapsed = t.elapsed().as_millis() as u64;
    let g = c.groups().get(&wg).expect("workgroup").clone();
    drop(c);
    let head = journal.head().seq;
    journal.close_blocking().expect("close");
    drop(journal);
    assert!(g.finished, "the 1,000-task run finished");
    let done = g.tasks.values().filter(|t| t.status.is_terminal()).count();
    assert_eq!(done, TASKS);
    let options = ws.open_options("bench verify").expect("options");
    let report = strata_journal::verify::verify_dir(&ws.journal_dir(), &options, Vec::new(), &[]);
    assert!(report.is_ok(), "the journal of the 1,000-task run verifies: {report:?}");
    println!("1,000-task run (governed: {governed}): {elapsed} ms, {head} events, journal verified");
    (measured, elapsed, head as usize)
}

fn bench(c: &mut Criterion) {
    let tmp = tempfile::tempdir().expect("tempdir");
    // Plain, governed, governed, plain: each kind sees the machine's early and late moments.
    for (i, governed) in [false, true, true, false].into_iter().enumerate() {
        let (measured, elapsed, events) = run_thousand(&tmp.path().join(format!("run-{i}")), governed);
        let kind = if governed { "governed" } else { "plain" };
        let overhead = if governed { "governed-overhead-per-task-us" } else { "coordinator-overhead-per-task-us" };
        for us in &measured.overhead_us {
            SAMPLES.value(overhead, *us as f64);
        }
        if governed {
            for us in &measured.with_checks_us {
                SAMPLES.value("governed-with-check-processes-per-task-us", *us as f64);
            }
        }
        SAMPLES.value(&format!("run-1000-tasks-{kind}-ms"), elapsed as f64);
        SAMPLES.value(&format!("run-1000-tasks-{kind}-events"), events as f64);
    }

    let db = sled::Config::new().path(tmp.path().join("raw")).open().expect("sled");
    let value = vec![7u8; 600];
    timed_per_call(c, &SAMPLES, "coordinator", "raw-sled-4-flushed-writes", 5, |i| {
        for k in 0..4u64 {
            db.insert(((i as u64) * 4 + k).to_be_bytes(), value.as_slice()).expect("insert");
            db.flush().expect("flush");
        }
    });
    let p50 = SAMPLES.median("coordinator-overhead-per-task-us").unwrap_or(f64::NAN);
    let floor = SAMPLES.median("raw-sled-4-flushed-writes-us").unwrap_or(f64::NAN);
    println!(
        "coordinator overhead per task p50 {:.2} ms (target <= 20 ms); raw durable floor {:.2} ms",
        p50 / 1e3,
        floor / 1e3
    );
    report(
        "coordinator",
        &SAMPLES,
        &[
            Ratio {
                label: "raw durable floor / coordinator overhead (share of overhead that is the floor)",
                ours: "raw-sled-4-flushed-writes-us",
                baseline: "coordinator-overhead-per-task-us",
                target: 0.0,
            },
            Ratio {
                label: "plain / governed overhead (caps, a check per task, telemetry; target >= 0.8, i.e. governed <= 1.25x)",
                ours: "coordinator-overhead-per-task-us",
                baseline: "governed-overhead-per-task-us",
                target: 0.8,
            },
            Ratio {
                label: "plain / governed with the check processes' own lives counted (no target: a process start is their floor)",
                ours: "coordinator-overhead-per-task-us",
                baseline: "governed-with-check-processes-per-task-us",
                target: 0.0,
            },
        ],
        &[("coordinator overhead per task p50 (target <= 20)", p50 / 1e3, "ms")],
    );
}

criterion_group!(benches, bench);

/// The bench binary is also the confinement trampoline of its runs' checks, as `strata` is for
/// `strata run` (the coordinator starts `<this executable> confine --write … -- sh -c …`): so
/// the checks start as they do under `strata run`, not with the rules applied between a fork
/// and an exec of this whole process.
fn main() -> std::process::ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Some(code) = strata_adapters::coordinator::verify::confine_from_args(&args) {
        return code;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
    std::process::ExitCode::SUCCESS
}
