//! Whole `strata run` processes on two workspaces sharing one PostgreSQL journal (as two
//! machines do), asserted on the journal's events, never on timing: two runs whose plans own
//! overlapping files never hold overlapping claims (the second is held by the typed conflict and
//! the file is free for a later run once the first ends), and a run's coordinator lease is
//! released when the run ends, while a crashed run's lease ends only at the time it recorded.

use std::io::BufRead as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::Duration;

use strata_engine::ce::ledger::{self, Ledger};
use strata_engine::workgroup::lease;
use strata_engine::workgroup::state::Workgroups;
use strata_journal::Journal;
use strata_journal::pg::PgStore;
use strata_journal::verify::verify_store;

use crate::pg::{fresh_schema, lease_of, shared_workspaces};

const BIN: &str = strata_tests::strata_bin!();
const FILES: [(&str, &str); 2] = [("src/api/mod.rs", "// api\n"), ("src/api/handler.rs", "// handler\n")];
/// How long any one step the tests wait for may take before they fail.
const BOUND: Duration = Duration::from_secs(120);

/// A plan of one writer `task` in `workgroup` owning `owns`.
fn writer_plan(dir: &Path, workgroup: &str, task: &str, owns: &str) -> String {
    let plan = format!(
        "workgroup = \"{workgroup}\"\npipeline = \"light\"\n\n[[task]]\nid = \"{task}\"\nrole = \"backend-builder\"\n\
         objective = \"Rework {owns}.\"\nowns = [\"{owns}\"]\n"
    );
    let path = dir.join(format!("{workgroup}.toml"));
    std::fs::write(&path, plan).unwrap();
    path.to_str().unwrap().to_owned()
}

/// `strata --dir ws run args…` with a coordinator lease of `lease_ms`, its stderr lines sent
/// to the receiver as they come.
fn spawn_run(ws: &Path, args: &[&str], lease_ms: &str) -> (Child, Receiver<String>) {
    let mut child = Command::new(BIN)
        .arg("--dir")
        .arg(ws)
        .arg("run")
        .args(args)
        .env("STRATA_COORDINATOR_LEASE_MS", lease_ms)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, lines) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    (child, lines)
}

/// `strata --dir ws run args…` to its end, with a coordinator lease of `lease_ms`.
fn run(ws: &Path, args: &[&str], lease_ms: &str) -> std::process::Output {
    Command::new(BIN)
        .arg("--dir")
        .arg(ws)
        .arg("run")
        .args(args)
        .env("STRATA_COORDINATOR_LEASE_MS", lease_ms)
        .output()
        .unwrap()
}

/// Waits (a bounded poll on the journal's head) until `what` holds of `j`.
fn wait_until(j: &Journal, what: &str, cond: impl Fn(&Journal) -> bool) {
    for _ in 0..1_200 {
        let head = j.refresh().unwrap().seq;
        if cond(j) {
            return;
        }
        j.wait_for_head_timeout(head + 1, Duration::from_millis(100));
    }
    panic!("{what} within the bound");
}

fn signal(child: &Child, sig: &str) {
    let pid = child.id().to_string();
    assert!(Command::new("kill").args([sig, &pid]).status().unwrap().success());
}

/// Waits for `child` to exit within the bound; its exit status and what it said on stderr.
fn finish(mut child: Child, lines: &Receiver<String>) -> (std::process::ExitStatus, String) {
    let (done, exited) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let _ = done.send(child.wait());
    });
    let status = exited.recv_timeout(BOUND).expect("the run ends within the bound").unwrap();
    waiter.join().unwrap();
    (status, lines.try_iter().collect::<Vec<_>>().join("\n"))
}

/// The ledger's events: (sequence, type, lineage).
fn ledger_events(j: &Journal) -> Vec<(u64, String, String)> {
    j.read_stream(ledger::STREAM, 1, 100_000)
        .unwrap()
        .into_iter()
        .map(|e| {
            let v: serde_json::Value = serde_json::from_slice(&e.payload).unwrap();
            (e.seq, e.event_type.clone(), v["lineage_id"].as_str().unwrap_or_default().to_owned())
        })
        .collect()
}

/// The ledger folded over everything every process committed: the fold refuses a claim that
/// overlaps another lineage's, so this holding is "never two overlapping claims".
fn fold_ledger(j: &Journal) -> Ledger {
    let mut state = Ledger::default();
    strata_journal::projection::catch_up_one(&mut state, j).expect("the ledger never held overlapping claims");
    state
}

fn groups(j: &Journal) -> Workgroups {
    let mut g = Workgroups::default();
    strata_journal::projection::catch_up_one(&mut g, j).unwrap();
    g
}

#[test]
#[ignore = "needs PostgreSQL; CI runs them"]
fn two_runs_on_two_workspaces_never_hold_overlapping_claims_and_the_second_is_held_by_the_conflict() {
    let tmp = tempfile::tempdir().unwrap();
    let (schema, options) = fresh_schema();
    let (a, b) = shared_workspaces(tmp.path(), &schema);
    let (repo_a, repo_b) = (tmp.path().join("repo-a"), tmp.path().join("repo-b"));
    strata_tests::init_repo(&repo_a, &FILES);
    strata_tests::init_repo(&repo_b, &FILES);
    let north = writer_plan(tmp.path(), "north", "api", "src/api");
    let south = writer_plan(tmp.path(), "south", "handler", "src/api/handler.rs");
    let j = Journal::open_postgres(&options).unwrap();

    // Machine A's run claims src/api and starts its worker (a simulated turn of 5–40 s), then
    // stops answering while the worker runs: its claim stands for as long as the test needs.
    let (coordinator_a, lines_a) =
        spawn_run(&a, &[&north, "--repo", repo_a.to_str().unwrap(), "--provider", "sim", "--time-scale", "1"], "30000");
    wait_until(&j, "A's runner starts its worker", |j| j.stream_version("worker/north/api/1") > 0);
    signal(&coordinator_a, "-STOP");
    j.refresh().unwrap();
    assert!(fold_ledger(&j).owners().contains_key("north.api"), "A holds its claim while its worker runs");

    // Machine B's run of a plan owning a file inside it: decided on the shared map, so held by
    // the conflict one process gives a second overlapping claim; B claims nothing.
    let out = run(&b, &[&south, "--repo", repo_b.to_str().unwrap(), "--provider", "sim", "--time-scale", "0"], "30000");
    let said_b = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(3), "a held task is exit 3: {said_b}");
    j.refresh().unwrap();
    let g = groups(&j);
    let held = g.get("south").unwrap().tasks["handler"].held.clone().expect("B's task is held");
    assert!(held.reason.contains("writer ownership conflict: north.api holds src/api"), "{held:?}");
    let events = ledger_events(&j);
    let of =
        |t: &str, l: &str| events.iter().filter(|(_, et, el)| et == t && el == l).map(|(s, ..)| *s).collect::<Vec<_>>();
    assert_eq!(of(ledger::CONFLICT, "south.handler").len(), 1, "{events:?}");
    assert!(of(ledger::CLAIMED, "south.handler").is_empty(), "{events:?}");
    // B's run ended cleanly: its lease is released, not left to run out.
    let (lease_south, _) = lease_of(&j, "south");
    assert!(lease_south.released, "{lease_south:?}");

    // A carries on and ends; its claim is released with its task, its lease with its run.
    signal(&coordinator_a, "-CONT");
    let (status, said_a) = finish(coordinator_a, &lines_a);
    assert_eq!(status.code(), Some(0), "{said_a}");
    j.refresh().unwrap();
    assert!(lease_of(&j, "north").0.released);

    // Now the file is free: a later run on B claims it, after A's release in the journal's order.
    let again = writer_plan(tmp.path(), "south-again", "handler", "src/api/handler.rs");
    let out = run(&b, &[&again, "--repo", repo_b.to_str().unwrap(), "--provider", "sim", "--time-scale", "0"], "30000");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    j.refresh().unwrap();
    let events = ledger_events(&j);
    let of =
        |t: &str, l: &str| events.iter().filter(|(_, et, el)| et == t && el == l).map(|(s, ..)| *s).collect::<Vec<_>>();
    let (a_claimed, a_released) = (of(ledger::CLAIMED, "north.api"), of(ledger::RELEASED, "north.api"));
    let b_claimed = of(ledger::CLAIMED, "south-again.handler");
    assert_eq!((a_claimed.len(), a_released.len(), b_claimed.len()), (1, 1, 1), "{events:?}");
    assert!(a_claimed[0] < a_released[0] && a_released[0] < b_claimed[0], "{events:?}");
    assert!(fold_ledger(&j).owners().is_empty(), "every claim released with its task");
    j.close_blocking().unwrap();
    let report = verify_store(&PgStore::connect(&options).unwrap(), None, Vec::new(), &[]).unwrap();
    assert!(report.ok(), "{:?}", report.problems);
}

#[test]
#[ignore = "needs PostgreSQL; CI runs them"]
fn a_crashed_runs_lease_ends_at_its_recorded_time_and_a_run_that_ends_releases_its_lease_at_once() {
    const LONG: &str = "3600000";
    let tmp = tempfile::tempdir().unwrap();
    let (schema, options) = fresh_schema();
    let (a, b) = shared_workspaces(tmp.path(), &schema);
    let repo = tmp.path().join("repo");
    strata_tests::init_repo(&repo, &FILES);
    let plan = writer_plan(tmp.path(), "relay", "api", "src/api");
    let j = Journal::open_postgres(&options).unwrap();

    // A takes the lease (2 s), starts its worker and is killed: it releases nothing.
    let (coordinator_a, lines_a) =
        spawn_run(&a, &[&plan, "--repo", repo.to_str().unwrap(), "--provider", "sim", "--time-scale", "1"], "2000");
    wait_until(&j, "A's runner starts its worker", |j| j.stream_version("worker/relay/api/1") > 0);
    signal(&coordinator_a, "-KILL");
    let (status, _) = finish(coordinator_a, &lines_a);
    assert_eq!(status.code(), None, "killed");
    j.refresh().unwrap();
    let (_, crashed) = lease_of(&j, "relay");
    let a_end = crashed.iter().filter_map(|e| e.expires_at_ns).max().unwrap();
    assert!(crashed.iter().all(|e| e.epoch == 1 && e.event_type != lease::RELEASED), "{crashed:?}");

    // Machine B resumes the workgroup, but cannot write its prompts there (a file stands where
    // the workgroup's prompt directory goes). Until A's recorded end it is refused
    // (STRATA-E2312, appending nothing); then it takes the next epoch, fails writing the
    // prompt of its first dispatch and, ending, releases its hour-long lease at once.
    let blocked = b.join(".strata/prompts/relay");
    std::fs::create_dir_all(blocked.parent().unwrap()).unwrap();
    std::fs::write(&blocked, "not a directory\n").unwrap();
    let mut refused = 0;
    let said_b = loop {
        let head = j.refresh().unwrap().seq;
        let out = run(&b, &["--resume", "relay", "--time-scale", "0"], LONG);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if !stderr.contains("[STRATA-E2312]") {
            assert_eq!(out.status.code(), Some(1), "{stderr}");
            break stderr;
        }
        assert_eq!(j.refresh().unwrap().seq, head, "a refused takeover appends nothing: {stderr}");
        refused += 1;
        assert!(refused < 2_000, "A's lease never ended: {stderr}");
    };
    assert!(said_b.contains(&format!("cannot create {}", blocked.display())), "{said_b}");
    j.refresh().unwrap();
    let (_, events) = lease_of(&j, "relay");
    let kinds: Vec<(&str, u64)> = events.iter().map(|e| (e.event_type.as_str(), e.epoch)).collect();
    let b_taken = events.iter().find(|e| e.epoch == 2).unwrap().clone();
    assert_eq!(b_taken.event_type, lease::TAKEN);
    assert!(b_taken.at_ns >= a_end, "a crashed run's lease ends only at its recorded end: {events:?}");
    assert_eq!(kinds.last(), Some(&(lease::RELEASED, 2)), "{kinds:?}");
    let b_end = b_taken.expires_at_ns.unwrap();

    // A's machine resumes at once (its first try) under the next epoch, long before B's
    // recorded end: only the release allows that. It carries the workgroup to its end and
    // releases in turn.
    let out = run(&a, &["--resume", "relay", "--time-scale", "0"], LONG);
    let said_c = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{said_c}");
    j.refresh().unwrap();
    let (lease_now, events) = lease_of(&j, "relay");
    let c_taken = events.iter().find(|e| e.epoch == 3).unwrap();
    assert_eq!(c_taken.event_type, lease::TAKEN);
    assert!(c_taken.at_ns < b_end, "taken before B's recorded end: {events:?}");
    assert!(lease_now.released && lease_now.current.as_ref().is_some_and(|l| l.epoch == 3), "{events:?}");
    assert!(groups(&j).get("relay").unwrap().finished, "the workgroup was carried to its end");
    assert!(fold_ledger(&j).owners().is_empty());
    j.close_blocking().unwrap();
    let report = verify_store(&PgStore::connect(&options).unwrap(), None, Vec::new(), &[]).unwrap();
    assert!(report.ok(), "{:?}", report.problems);
}
