//! Growth: how the knowledge base's costs move from seed scale (288 artifacts) to 116,142, each
//! scale measured in the same run so the seed figures are the baseline of the larger ones.
//!
//! Per scale, on a real workspace (sled on disk, `process` durability) that holds the fixture:
//! * impact closure (mean per query over 64 change requests) and validation, in memory;
//! * warm prompt assembly p50 (one shipped profile, 64 change requests, token cache warm);
//! * loading the graph from its snapshot (what every CLI query does first), in process;
//! * a full replay of the knowledge base's journal into the graph;
//! * `strata graph impact` as a whole child process: wall time and peak RSS (`/usr/bin/time`);
//!   and the same with `strata serve` running (the client forwards it; the daemon answers from
//!   the graph it keeps in memory): the median of 7 after a first query that loads it;
//! * `strata intake` of one edited file as a child process, and the disk it adds per edit.
//!
//! Workspaces are built once and cached in `target/strata-bench/growth-<artifacts>/`; each run
//! adds its edits to them. Run: `cargo bench -p strata-benches --bench growth` (a few minutes the
//! first time; `STRATA_GROWTH_SCALES=seed,29k` limits the scales).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::LazyLock;
use std::time::Instant;

use criterion::{Criterion, criterion_group, criterion_main};
use strata_adapters::app::workspace::Workspace;
use strata_adapters::config::Config;
use strata_benches::{Samples, report, target_dir, timed_per_call};
use strata_engine::context::assemble::{Inputs, Task, TokenCounter, assemble};
use strata_engine::context::profile::{self, BUILTIN};
use strata_engine::context::summary::Summaries;
use strata_engine::kb::fixture::{Fixture, FixtureSpec, generate, render};
use strata_engine::kb::graph::Graph;
use strata_engine::kb::intake;
use strata_engine::kb::kind::ArtifactKind;
use strata_engine::ports::{CountingIds, FixedClock};
use strata_journal::projection::{Projection, catch_up_one, save_one};
use strata_journal::{Durability, Journal};

static SAMPLES: LazyLock<Samples> = LazyLock::new(Samples::default);

/// Edits per scale for the intake and disk-growth figures.
const EDITS: usize = 8;

fn scales() -> Vec<(&'static str, FixtureSpec)> {
    let all = [
        ("seed", FixtureSpec::seed_scale(7)),
        ("29k", FixtureSpec::scaled(11, 50, 500)),
        ("116k", FixtureSpec::scaled(11, 200, 500)),
    ];
    let only = std::env::var("STRATA_GROWTH_SCALES").ok();
    all.into_iter().filter(|(n, _)| only.as_deref().is_none_or(|o| o.split(',').any(|x| x == *n))).collect()
}

/// A workspace holding `fx`, taken in through the intake planner in appends of 4,096 artifacts.
fn workspace(name: &str, fx: &Fixture) -> PathBuf {
    let root = target_dir().join("strata-bench").join(format!("growth-{name}"));
    if root.join("complete").exists() {
        return root;
    }
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).expect("dir");
    let ws = Workspace::at(&root);
    let journal = ws
        .create("strata.bench/growth", &Config { durability: Durability::Process, ..Config::default() })
        .expect("journal");
    let t = Instant::now();
    // Intakes of at most 4,000 files (the intake limit), each planned on the graph so far.
    let mut g = Graph::new();
    let files = fx.files();
    for (i, batch) in files.chunks(4000).enumerate() {
        let plan =
            intake::plan(&g, batch, &mut CountingIds::new(1 + i as u128 * 1_000_000), &FixedClock(0)).expect("plan");
        let mut appends = plan.appends;
        while !appends.is_empty() {
            let rest = appends.split_off(appends.len().min(4096));
            journal.append_multi_blocking(appends).expect("append").expect("no conflict");
            appends = rest;
        }
        fold_tail(&journal, &mut g);
    }
    save_one(&g, &journal, g.seq()).expect("snapshot");
    journal.close_blocking().expect("close");
    eprintln!("growth-{name}: {} artifacts taken in in {:.1}s", g.len(), t.elapsed().as_secs_f64());
    std::fs::write(root.join("complete"), "ok\n").expect("marker");
    root
}

fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// Runs the bench CLI under `/usr/bin/time`; returns (wall ms, peak RSS MiB).
fn cli(root: &Path, args: &[&str]) -> (f64, f64) {
    let t = Instant::now();
    let out = Command::new("/usr/bin/time")
        .args(["-f", "%M"])
        .arg(env!("CARGO_BIN_EXE_strata-bench-cli"))
        .arg("--dir")
        .arg(root)
        .args(args)
        .output()
        .expect("run the CLI under /usr/bin/time");
    let ms = t.elapsed().as_secs_f64() * 1e3;
    assert!(out.status.success(), "strata {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    let kib: f64 =
        String::from_utf8_lossy(&out.stderr).lines().last().and_then(|l| l.trim().parse().ok()).unwrap_or(f64::NAN);
    (ms, kib / 1024.0)
}

fn bench_growth(c: &mut Criterion) {
    let profile = profile::parse(BUILTIN[0].0, BUILTIN[0].1).expect("shipped profile");
    for (name, spec) in scales() {
        let fx = generate(&spec);
        let root = workspace(name, &fx);
        let ws = Workspace::at(&root);
        let crs: Vec<String> = fx.of(ArtifactKind::ChangeRequest).take(64).map(|d| d.key.id.clone()).collect();
        let v = |what: &str, x: f64| SAMPLES.value(&format!("{name}/{what}"), x);

        // In process: the graph from its snapshot, and from a full replay.
        let mut g = Graph::new();
        {
            let journal = ws.open_journal("bench").expect("open");
            // A workspace cached by an earlier run may hold a snapshot of an older format, or
            // that run's edits after its last snapshot: brought up to date once, untimed.
            let s = catch_up_one(&mut g, &journal).expect("catch up");
            if s.from_snapshot == 0 || s.applied > 0 || !s.discarded.is_empty() {
                save_one(&g, &journal, g.seq()).expect("snapshot");
            }
            for _ in 0..3 {
                let t = Instant::now();
                let mut fresh = Graph::new();
                let s = catch_up_one(&mut fresh, &journal).expect("catch up");
                v("snapshot-load-ms", t.elapsed().as_secs_f64() * 1e3);
                assert!(s.from_snapshot > 0 && s.discarded.is_empty(), "{s:?}");
                g = fresh;
            }
            let t = Instant::now();
            let replayed = Graph::at(&journal, journal.head().seq).expect("replay");
            v("replay-ms", t.elapsed().as_secs_f64() * 1e3);
            assert_eq!(replayed.state_hash(), g.state_hash());
            journal.close_blocking().expect("close");
        }
        v("artifacts", g.len() as f64);
        let ids: Vec<_> = crs.iter().map(|id| g.node_id(&g.find(id)[0].key).expect("node")).collect();
        timed_per_call(c, &SAMPLES, &format!("growth-{name}"), &format!("{name}/closure"), 2, |i| {
            std::hint::black_box(g.impact_closure(ids[i % ids.len()]));
        });
        let t = Instant::now();
        std::hint::black_box(g.validate());
        v("validate-ms", t.elapsed().as_secs_f64() * 1e3);

        // Warm assembly.
        let summaries = Summaries::build(&mut g);
        let tasks: Vec<Task> = crs
            .iter()
            .map(|cr| Task { id: format!("{cr}-bench"), objective: "Carry it out.".into(), plan: Some(cr.clone()) })
            .collect();
        let mut tc = TokenCounter::new(1300);
        let inputs = |i: usize| Inputs {
            graph: &g,
            summaries: &summaries,
            profile: &profile,
            profile_version: 1,
            task: &tasks[i % tasks.len()],
            position: g.seq(),
            position_hash: strata_journal::Hash::ZERO,
            continuation: None,
        };
        for i in 0..tasks.len() {
            assemble(&inputs(i), &mut tc).expect("assembles");
        }
        timed_per_call(c, &SAMPLES, &format!("growth-{name}"), &format!("{name}/assemble-warm"), 3, |i| {
            std::hint::black_box(assemble(&inputs(i), &mut tc).expect("assembles"));
        });

        // Whole processes: a query, then one-file intakes.
        for cr in crs.iter().take(3) {
            let (ms, mib) = cli(&root, &["graph", "impact", cr]);
            v("cli-impact-ms", ms);
            v("cli-impact-peak-MiB", mib);
        }
        let daemon = Daemon::start(&root);
        cli(&root, &["graph", "impact", &crs[0]]);
        for i in 0..7 {
            let (ms, _) = cli(&root, &["graph", "impact", &crs[i % crs.len()]]);
            v("cli-impact-daemon-ms", ms);
        }
        daemon.stop();
        let brd = fx.of(ArtifactKind::BrdRequirement).nth(3).expect("a requirement").clone();
        let file = root.join("edited.md");
        let before = dir_bytes(&root.join(".strata"));
        for n in 0..EDITS {
            let current = g.get(&brd.key).expect("exists");
            let mut d = brd.clone();
            d.fields = current.fields.clone();
            d.body = format!("{}\nBench edit {n} at {}.\n", current.body, g.seq());
            std::fs::write(&file, render(&d).bytes).expect("write");
            let (ms, mib) = cli(&root, &["intake", file.to_str().expect("utf-8 path")]);
            v("cli-intake-one-ms", ms);
            v("cli-intake-one-peak-MiB", mib);
            let journal = ws.open_journal("bench").expect("open");
            fold_tail(&journal, &mut g);
            journal.close_blocking().expect("close");
        }
        let after = dir_bytes(&root.join(".strata"));
        v("disk-per-edit-KiB", (after.saturating_sub(before)) as f64 / EDITS as f64 / 1024.0);
        v("disk-MiB", after as f64 / (1024.0 * 1024.0));
    }
}

/// `strata serve` on a workspace, for as long as it is held.
struct Daemon(std::process::Child);

impl Daemon {
    /// Starts it and waits until its `serve.json` names it.
    fn start(root: &Path) -> Daemon {
        let child = Command::new(env!("CARGO_BIN_EXE_strata-bench-cli"))
            .arg("--dir")
            .arg(root)
            .arg("serve")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("strata serve starts");
        let daemon = Daemon(child);
        let info = root.join(".strata").join("serve.json");
        let t = Instant::now();
        loop {
            let pid = std::fs::read_to_string(&info)
                .ok()
                .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                .and_then(|v| v["pid"].as_u64());
            if pid == Some(u64::from(daemon.0.id())) {
                return daemon;
            }
            assert!(t.elapsed().as_secs() < 120, "strata serve did not become ready");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// SIGTERM, and waits for it to close the journal and exit.
    fn stop(mut self) {
        let ok = Command::new("kill").arg("-TERM").arg(self.0.id().to_string()).status().expect("kill runs");
        assert!(ok.success());
        assert!(self.0.wait().expect("wait").success(), "strata serve exits 0");
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Folds the journal's tail into `g`.
fn fold_tail(journal: &Journal, g: &mut Graph) {
    let r = journal.scan(g.seq() + 1, u64::MAX, |rec, _| g.apply_record(rec).map(|()| true)).expect("scan");
    r.expect("fold");
}

fn summary(_: &mut Criterion) {
    let m = |n: &str| SAMPLES.median(n).unwrap_or(f64::NAN);
    let mut extra: Vec<(String, f64, &str)> = Vec::new();
    for (name, _) in scales() {
        for (what, unit) in [
            ("artifacts", ""),
            ("closure-us", "µs"),
            ("validate-ms", "ms"),
            ("assemble-warm-us", "µs"),
            ("snapshot-load-ms", "ms"),
            ("replay-ms", "ms"),
            ("cli-impact-ms", "ms"),
            ("cli-impact-peak-MiB", "MiB"),
            ("cli-impact-daemon-ms", "ms"),
            ("cli-intake-one-ms", "ms"),
            ("cli-intake-one-peak-MiB", "MiB"),
            ("disk-per-edit-KiB", "KiB"),
            ("disk-MiB", "MiB"),
        ] {
            extra.push((format!("{name}/{what}"), m(&format!("{name}/{what}")), unit));
        }
        if name != "seed" {
            let ratio = m(&format!("{name}/assemble-warm-us")) / m("seed/assemble-warm-us");
            extra.push((format!("{name}/assemble-warm vs seed (target <= 2x at 116k)"), ratio, "x"));
        }
    }
    let extra: Vec<(&str, f64, &str)> = extra.iter().map(|(l, v, u)| (l.as_str(), *v, *u)).collect();
    report("growth", &SAMPLES, &[], &extra);
}

criterion_group!(benches, bench_growth, summary);
criterion_main!(benches);
