//! The adapters' dispatch subscriber (`coordinator::runner`) on a real sled journal: it starts
//! the worker of a dispatch it catches up on, records start and end on the attempt's own
//! stream once, does nothing for an attempt that already ended when it restarts, and records a
//! worker a stopped run left as abandoned.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use strata_adapters::coordinator::runner::{self, Runner, Setup};
use strata_adapters::providers::sim::SimProvider;
use strata_engine::ports::{CountingIds, FixedClock};
use strata_engine::workgroup::decide;
use strata_engine::workgroup::events::{Dispatched, PromptRef, WorkerStarted};
use strata_engine::workgroup::plan::{self, Plan};
use strata_engine::workgroup::provider::Provider;
use strata_engine::workgroup::state::{Status, Workgroups, worker_stream};
use strata_journal::projection::catch_up_one;
use strata_journal::{Durability, Journal};

const PLAN: &str = r#"{"workgroup": "solo", "pipeline": "light",
  "task": [{"id": "read", "role": "analyst", "phase": "build", "objective": "Read the code."}]}"#;

struct Fixture {
    _tmp: tempfile::TempDir,
    journal: Journal,
    setup: Setup,
    ids: CountingIds,
}

/// A journal holding the plan and the dispatch of `read`'s first attempt (its input written).
fn dispatched() -> Fixture {
    let tmp = tempfile::tempdir().expect("tempdir");
    let journal = Journal::create(&tmp.path().join("journal"), "runner", &strata_tests::options(Durability::Process))
        .expect("journal");
    let mut ids = CountingIds::new(1);
    let plan: Plan = serde_json::from_str(PLAN).expect("plan");
    let checked = plan::check(&plan).expect("checks");
    let append = decide::plan(&Workgroups::default(), checked, 9, &mut ids, &FixedClock(0)).expect("plan event");
    journal.append_multi_blocking(vec![append]).expect("append").expect("no conflict");
    let groups = fold(&journal);
    let g = groups.get("solo").expect("workgroup");
    let d = Dispatched {
        task: "read".into(),
        attempt: 1,
        lineage_id: "solo.read".into(),
        provider: "sim".into(),
        routed: strata_engine::ce::router::Mode::FreshCapsule,
        runs_as: strata_engine::ce::router::Mode::FreshCapsule,
        reason_codes: vec!["INDEPENDENT_CAPSULE".into()],
        prompt: PromptRef { prompt_task: "solo.read".into(), prompt_hash: "sha256:00".into(), tokens: 12 },
        baseline_tokens: 100,
        from_session: None,
        capsule_hash: None,
        lineage_check: None,
        gate: None,
        evidence: None,
        caps: Default::default(),
        fallback_after: None,
        without_knowledge: false,
        model: None,
    };
    let e = decide::dispatched(g, &d, &mut ids, &FixedClock(0)).expect("dispatch event");
    journal.append_multi_blocking(vec![decide::append(g, vec![e])]).expect("append").expect("no conflict");
    let setup = Setup {
        prompts_dir: tmp.path().join("prompts"),
        repo_root: None,
        workspace: tmp.path().to_path_buf(),
        cwd: tmp.path().to_path_buf(),
    };
    let input = runner::input_path(&setup.prompts_dir, "solo", "read", 1);
    std::fs::create_dir_all(input.parent().expect("dir")).expect("mkdir");
    std::fs::write(&input, "Read the code and say what it does.\n").expect("input");
    Fixture { _tmp: tmp, journal, setup, ids }
}

fn fold(journal: &Journal) -> Workgroups {
    let mut g = Workgroups::default();
    catch_up_one(&mut g, journal).expect("fold");
    g
}

/// Runs a runner caught up to the journal's head until `done` holds of the folded state (at
/// most a minute), then stops it; what it reported.
fn run_until(f: &Fixture, done: impl Fn(&Workgroups) -> bool) -> runner::Shared {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let groups = fold(&f.journal);
    let sim: Arc<dyn Provider> = Arc::new(SimProvider::new(9, 0));
    let providers = BTreeMap::from([("sim".to_owned(), sim)]);
    let shared = runner::SharedRef::default();
    let from = f.journal.head().seq + 1;
    let r = Runner::new(f.journal.clone(), "solo", groups, providers, f.setup.clone(), shared.clone());
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let task = rt.spawn(r.run(from, stopped));
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !done(&fold(&f.journal)) && std::time::Instant::now() < deadline {
        let head = f.journal.head().seq;
        f.journal.wait_for_head_timeout(head + 1, Duration::from_millis(100));
    }
    let _ = stop.send(());
    rt.block_on(task).expect("the runner ends");
    std::mem::take(&mut *shared.lock().expect("lock"))
}

fn types(journal: &Journal, stream: &str) -> Vec<String> {
    journal.read_stream(stream, 1, 100).expect("read").into_iter().map(|e| e.event_type).collect()
}

#[test]
fn a_dispatch_caught_up_on_starts_its_worker_once_and_a_restart_does_not_start_it_again() {
    let f = dispatched();
    let ended =
        |g: &Workgroups| g.get("solo").and_then(|g| g.tasks.get("read")).is_some_and(|t| t.worker_end.is_some());
    let shared = run_until(&f, ended);
    assert!(shared.errors.is_empty(), "{:?}", shared.errors);
    let stream = worker_stream("solo", "read", 1);
    let recorded = types(&f.journal, &stream);
    assert_eq!(recorded.first().map(String::as_str), Some("worker.started"), "{recorded:?}");
    assert!(
        recorded.last().is_some_and(|t| t == "worker.completed" || t == "worker.failed"),
        "the worker's end is recorded: {recorded:?}"
    );
    let t = fold(&f.journal).get("solo").and_then(|g| g.tasks.get("read")).cloned().expect("task");
    assert_eq!((t.status, t.attempts), (Status::Running, 1), "the coordinator, not the runner, ends the task");
    assert!(shared.overhead.contains_key(&("read".to_owned(), 1)), "the runner's own time is reported");

    // A restarted runner catches up on the ended attempt and leaves it alone.
    let head = f.journal.head().seq;
    let again = run_until(&f, |_| true);
    assert!(again.errors.is_empty(), "{:?}", again.errors);
    assert_eq!(f.journal.head().seq, head, "nothing appended for an attempt that already ended");
    assert_eq!(types(&f.journal, &stream), recorded);
}

#[test]
fn a_worker_a_stopped_run_started_is_recorded_as_abandoned() {
    let mut f = dispatched();
    let s = WorkerStarted {
        task: "read".into(),
        attempt: 1,
        session_id: "sim-gone".into(),
        provider: "sim".into(),
        synthetic: true,
        pid: None,
    };
    let append = decide::started("solo", &s, &mut f.ids, &FixedClock(0)).expect("start event");
    let first = f.journal.append_multi_blocking(vec![append.clone()]).expect("append").expect("no conflict");
    // The same append retried is the same record (idempotent by event id); another start of
    // the same attempt is a version conflict, never a second record.
    let retried = f.journal.append_multi_blocking(vec![append]).expect("append").expect("idempotent");
    assert!(retried.deduplicated && retried.positions == first.positions, "{retried:?}");
    let other = decide::started("solo", &s, &mut f.ids, &FixedClock(0)).expect("start event");
    let again = f.journal.append_multi_blocking(vec![other]).expect("append");
    assert!(again.is_err(), "one attempt starts once");

    let ended =
        |g: &Workgroups| g.get("solo").and_then(|g| g.tasks.get("read")).is_some_and(|t| t.worker_end.is_some());
    let shared = run_until(&f, ended);
    assert!(shared.errors.is_empty(), "{:?}", shared.errors);
    assert_eq!(types(&f.journal, &worker_stream("solo", "read", 1)), ["worker.started", "worker.failed"]);
    let t = fold(&f.journal).get("solo").and_then(|g| g.tasks.get("read")).cloned().expect("task");
    let end = t.worker_end.expect("end");
    assert!(!end.succeeded && end.ended.abandoned, "{end:?}");
    assert_eq!(end.ended.session_id.as_deref(), Some("sim-gone"));
    assert!(shared.notes.iter().any(|n| n.contains("stopped")), "{:?}", shared.notes);

    // The coordinator's failure of the abandoned attempt is not the task's own: the plan's
    // retries are counted against own failures only.
    let groups = fold(&f.journal);
    let g = groups.get("solo").expect("workgroup");
    let failed = strata_engine::workgroup::events::Failed {
        task: "read".into(),
        attempt: 1,
        session_id: Some("sim-gone".into()),
        reason: end.ended.summary.clone(),
        usage: Default::default(),
        retry: decide::retry(g, "read", true, true) == Some(0),
        not_before_ns: None,
        ..Default::default()
    };
    let e = decide::failed(g, &failed, &mut f.ids, &FixedClock(0)).expect("failed event");
    f.journal.append_multi_blocking(vec![decide::append(g, vec![e])]).expect("append").expect("no conflict");
    let t = fold(&f.journal).get("solo").and_then(|g| g.tasks.get("read")).cloned().expect("task");
    assert_eq!((t.status, t.failures), (Status::Pending, 0), "an abandoned attempt is no failure of the task");
}

/// The planning gate, where the worker starts: a dispatch whose input file is missing starts no
/// worker; the attempt ends as failed, naming the missing input, and nothing else is recorded.
#[test]
fn a_dispatch_whose_input_is_missing_starts_no_worker_and_fails_naming_it() {
    let f = dispatched();
    let input = runner::input_path(&f.setup.prompts_dir, "solo", "read", 1);
    std::fs::remove_file(&input).expect("remove the input");
    let ended =
        |g: &Workgroups| g.get("solo").and_then(|g| g.tasks.get("read")).is_some_and(|t| t.worker_end.is_some());
    let shared = run_until(&f, ended);
    assert!(shared.errors.is_empty(), "{:?}", shared.errors);
    let recorded = f.journal.read_stream(&worker_stream("solo", "read", 1), 1, 100).expect("read");
    let types: Vec<&str> = recorded.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(types, ["worker.failed"], "no worker.started: nothing ran");
    let payload = String::from_utf8_lossy(&recorded[0].payload);
    assert!(payload.contains("STRATA-E1725") && payload.contains("no worker starts without it"), "{payload}");
}
