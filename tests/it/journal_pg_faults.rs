//! Faults on a PostgreSQL journal, for real: the server SIGKILLed and restarted under twelve
//! concurrent appenders, a writer process SIGKILLed while it commits, and a coordinator cut off
//! from the server by a network partition (two network namespaces and a veth pair). Each test
//! runs a server of its own (it kills or partitions it), started like `.ci/postgres` starts the
//! shared one. Then many processes on two workspaces naming one database (as two machines do):
//! concurrent writer claims, a stopped coordinator taken over and fenced, and one workspace's
//! MCP server serving the chunks the other put.

use crate::pg::{self, fresh_schema, lease_of, shared_workspaces};

use std::collections::BTreeMap;
use std::io::BufRead as _;
use std::sync::{Arc, Condvar, Mutex};

use strata_journal::pg::PgStore;
use strata_journal::verify::verify_store;
use strata_journal::{EventData, ExpectedVersion, Journal, StreamAppend};
use strata_tests::event;
use uuid::Uuid;

const ORIGIN: &str = "strata.test/faults";

fn ev(id: u128) -> EventData {
    event(Uuid::from_u128(id), "bench.sample", &serde_json::json!({ "id": id as u64 }))
}

fn server_dir(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", Uuid::now_v7().simple()))
}

/// A request of 1 to 3 events across distinct streams of 20; ids derived from `(writer, n)`.
fn request(writer: u128, n: u128) -> Vec<StreamAppend> {
    let width = (n % 3 + 1) as usize;
    (0..width)
        .map(|k| StreamAppend {
            stream: format!("s/{}", (writer * 7 + n + k as u128 * 5) % 20),
            expected: ExpectedVersion::Any,
            events: vec![ev((writer << 64) | (n << 8) | k as u128)],
        })
        .collect()
}

#[derive(Default)]
struct Progress {
    acked: BTreeMap<u128, u64>,
    restarted: bool,
}

#[test]
#[ignore = "needs PostgreSQL; CI runs them"]
fn sigkill_of_the_server_under_twelve_appenders_loses_nothing_acknowledged() {
    const WRITERS: u128 = 12;
    const APPENDS: u128 = 40;
    let server = pg::Server::start(&server_dir("pg-kill"));
    let mut options = pg::fresh_options(&server.url());
    options.connect_timeout = std::time::Duration::from_secs(2);
    let first = Journal::create_postgres(&options, ORIGIN).unwrap();
    let handles = [first.clone(), Journal::open_postgres(&options).unwrap(), Journal::open_postgres(&options).unwrap()];
    let state = Arc::new((Mutex::new(Progress::default()), Condvar::new()));
    let workers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (j, state) = (handles[w as usize % 3].clone(), state.clone());
            std::thread::spawn(move || {
                let mut in_doubt = 0u32;
                for n in 0..APPENDS {
                    let req = request(w, n);
                    let mut tries = 0;
                    let appended = loop {
                        tries += 1;
                        assert!(tries < 200, "writer {w} append {n} never got through");
                        match j.append_multi_blocking(req.clone()) {
                            Ok(r) => break r.expect("Any never conflicts"),
                            Err(e) => {
                                assert!(e.to_string().starts_with("[STRATA-E230"), "a typed backend error: {e}");
                                in_doubt += 1;
                                // In doubt: wait for the server to be back, then retry the same ids.
                                let (m, cv) = &*state;
                                let mut p = m.lock().unwrap();
                                while !p.restarted {
                                    p = cv.wait(p).unwrap();
                                }
                            }
                        }
                    };
                    let (m, cv) = &*state;
                    let mut p = m.lock().unwrap();
                    for (s, pos) in req.iter().flat_map(|s| &s.events).zip(&appended.positions) {
                        p.acked.insert(s.id.as_u128(), pos.seq);
                    }
                    cv.notify_all();
                }
                in_doubt
            })
        })
        .collect();
    {
        let (m, cv) = &*state;
        let mut p = m.lock().unwrap();
        while p.acked.len() < 150 {
            p = cv.wait(p).unwrap();
        }
    }
    server.kill9();
    server.up();
    {
        let (m, cv) = &*state;
        m.lock().unwrap().restarted = true;
        cv.notify_all();
    }
    let in_doubt: u32 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    assert!(in_doubt > 0, "the kill landed while appends were in flight");
    let expected: usize = (0..WRITERS).flat_map(|w| (0..APPENDS).map(move |n| request(w, n).len())).sum();
    drop(handles);
    first.close_blocking().unwrap();
    drop(first);
    let j = Journal::open_postgres(&options).unwrap();
    let head = j.head();
    assert_eq!(head.seq as usize, expected, "every request landed once (never doubled): {in_doubt} were in doubt");
    let all = j.read_range(1, expected + 1).unwrap();
    assert_eq!(all.iter().map(|e| e.seq).collect::<Vec<_>>(), (1..=head.seq).collect::<Vec<_>>(), "gapless");
    let stored: BTreeMap<u128, u64> = all.iter().map(|e| (e.id.as_u128(), e.seq)).collect();
    let acked = std::mem::take(&mut state.0.lock().unwrap().acked);
    assert_eq!(acked.len(), expected);
    for (id, seq) in &acked {
        assert_eq!(stored.get(id), Some(seq), "event {id:x} is at the sequence it was acknowledged with");
    }
    let report = verify_store(&PgStore::connect(&options).unwrap(), None, Vec::new(), &[]).unwrap();
    assert!(report.ok(), "{:?}", report.problems);
    assert_eq!((report.events, report.head_hash, report.root), (head.seq, head.hash, head.root));
}

/// The child side of the writer-kill test: appends 6-event batches across 3 streams forever,
/// printing each acknowledged batch number.
fn child_writer(schema: &str, url: &str, child: u128) {
    let options = pg::fresh_options(url).with_schema(schema).unwrap();
    let j = Journal::open_postgres(&options).unwrap();
    let mut out = std::io::stdout().lock();
    for k in 0..1_000_000u128 {
        let req: Vec<StreamAppend> = (0..3u128)
            .map(|s| StreamAppend {
                stream: format!("c/{s}"),
                expected: ExpectedVersion::Any,
                events: vec![ev((child << 64) | (k << 8) | (s * 2)), ev((child << 64) | (k << 8) | (s * 2 + 1))],
            })
            .collect();
        j.append_multi_blocking(req).unwrap().unwrap();
        std::io::Write::write_all(&mut out, format!("acked {k}\n").as_bytes()).unwrap();
        std::io::Write::flush(&mut out).unwrap();
    }
}

#[test]
#[ignore = "needs PostgreSQL; CI runs them"]
fn sigkill_of_a_writer_mid_commit_leaves_no_partial_batch_and_others_carry_on() {
    if let (Ok(schema), Ok(url), Ok(child)) =
        (std::env::var("STRATA_FAULT_SCHEMA"), std::env::var("STRATA_FAULT_URL"), std::env::var("STRATA_FAULT_CHILD"))
    {
        return child_writer(&schema, &url, child.parse().unwrap());
    }
    let server = pg::Server::start(&server_dir("pg-writer"));
    let options = pg::fresh_options(&server.url());
    Journal::create_postgres(&options, ORIGIN).unwrap().close_blocking().unwrap();
    let spawn = |child: u32| {
        std::process::Command::new(std::env::current_exe().unwrap())
            // The test's name in the test binary, module path first (`--exact` needs it).
            .args([
                "--exact",
                "journal_pg_faults::sigkill_of_a_writer_mid_commit_leaves_no_partial_batch_and_others_carry_on",
            ])
            .args(["--include-ignored", "--nocapture", "--test-threads=1"])
            .env("STRATA_FAULT_SCHEMA", &options.schema)
            .env("STRATA_FAULT_URL", server.url())
            .env("STRATA_FAULT_CHILD", child.to_string())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let acks = |c: &mut std::process::Child| std::io::BufReader::new(c.stdout.take().unwrap()).lines();
    let (mut victim, mut survivor) = (spawn(1), spawn(2));
    let (mut victim_acks, mut survivor_acks) = (acks(&mut victim), acks(&mut survivor));
    // Both are committing, contending for the ordering lock; kill one while it works.
    let mut seen = 0;
    while seen < 30 {
        let line = victim_acks.next().expect("the victim acknowledges").unwrap();
        if line.starts_with("acked ") {
            seen += 1;
        }
    }
    victim.kill().unwrap(); // SIGKILL
    victim.wait().unwrap();
    // The other coordinator is not stalled by the dead one's transaction: it keeps committing.
    let mut after = 0;
    while after < 30 {
        let line = survivor_acks.next().expect("the survivor carries on").unwrap();
        if line.starts_with("acked ") {
            after += 1;
        }
    }
    survivor.kill().unwrap();
    survivor.wait().unwrap();
    let j = Journal::open_postgres(&options).unwrap();
    let head = j.head().seq;
    let all = j.read_range(1, head as usize).unwrap();
    assert_eq!(all.len() as u64, head);
    let mut batches: BTreeMap<(u128, u128), u32> = BTreeMap::new();
    for e in &all {
        let id = e.id.as_u128();
        *batches.entry((id >> 64, (id >> 8) & 0xffff_ffff_ffff)).or_default() += 1;
    }
    assert!(batches.keys().any(|(c, _)| *c == 1) && batches.keys().any(|(c, _)| *c == 2));
    assert!(batches.values().all(|&n| n == 6), "every batch whole or absent: {batches:?}");
    let report = verify_store(&PgStore::connect(&options).unwrap(), None, Vec::new(), &[]).unwrap();
    assert!(report.ok(), "{:?}", report.problems);
}

/// The child side of the partition test, run inside the coordinator's network namespace. Reads
/// commands on stdin and answers each on stdout:
/// `append N` → N single-event appends, each answered `acked <id> <seq>`, then `ok`;
/// `hold` → takes the ordering lock on a session of its own (with the journal's settings) and
/// keeps it, answering `holding`; `try` → one append of a new event, answered `acked <id> <seq>`
/// or `failed <id> <ms> <error>`; `retry` → the failed events again, same ids, until acknowledged;
/// `lease T` → takes the coordinator lease of workgroup `part` as holder A at time T (ns, the
/// test's clock), answered `leased <id> <seq> <epoch>`; `fenced T` → one append of a new event
/// fenced by A's lease renewed at T, answered `fenced <stream> <id>` when refused, else
/// `appended <id>`.
fn partition_child(schema: &str, url: &str) {
    use strata_journal::shared::SharedOrder as _;
    let mut options = pg::fresh_options(url).with_schema(schema).unwrap();
    options.tcp_user_timeout = std::time::Duration::from_secs(3);
    options.keepalive_idle = std::time::Duration::from_secs(1);
    options.keepalive_interval = std::time::Duration::from_secs(1);
    options.keepalive_retries = 2;
    options.connect_timeout = std::time::Duration::from_secs(3);
    options.statement_timeout = std::time::Duration::from_secs(10);
    options.idle_in_transaction_timeout = std::time::Duration::from_secs(2);
    let j = Journal::open_postgres(&options).unwrap();
    let holder = PgStore::connect(&options).unwrap();
    let mut out = std::io::stdout().lock();
    let mut say = |line: String| {
        // Marked: the test harness writes to the same stdout, not always at a line start.
        std::io::Write::write_all(&mut out, format!("@@ {line}\n").as_bytes()).unwrap();
        std::io::Write::flush(&mut out).unwrap();
    };
    let (mut next, mut failed) = (1u128, Vec::new());
    let (mut ids, mut held) = (strata_engine::ports::CountingIds::new(5 << 64), None);
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap();
        let words: Vec<&str> = line.split(' ').collect();
        match words[0] {
            "append" => {
                for _ in 0..words[1].parse::<u32>().unwrap() {
                    let id = (3u128 << 64) | next;
                    next += 1;
                    let a = j.append_blocking("part/child", ExpectedVersion::Any, vec![ev(id)]).unwrap().unwrap();
                    say(format!("acked {id} {}", a.positions[0].seq));
                }
                say("ok".into());
            }
            "hold" => {
                let (seq, _) = holder.lock_order().unwrap();
                say(format!("holding {seq}"));
            }
            "try" => {
                let id = (3u128 << 64) | next;
                next += 1;
                let started = std::time::Instant::now();
                match j.append_blocking("part/child", ExpectedVersion::Any, vec![ev(id)]) {
                    Ok(a) => say(format!("acked {id} {}", a.unwrap().positions[0].seq)),
                    Err(e) => {
                        failed.push(id);
                        say(format!("failed {id} {} {e}", started.elapsed().as_millis()));
                    }
                }
            }
            "retry" => {
                for id in std::mem::take(&mut failed) {
                    let mut tries = 0;
                    let a = loop {
                        tries += 1;
                        match j.append_blocking("part/child", ExpectedVersion::Any, vec![ev(id)]) {
                            Ok(a) => break a.unwrap(),
                            Err(e) => assert!(tries < 20, "the retry of {id} never got through: {e}"),
                        }
                    };
                    say(format!("acked {id} {}", a.positions[0].seq));
                }
                say("ok".into());
            }
            "lease" => {
                use strata_engine::workgroup::lease;
                let now: i64 = words[1].parse().unwrap();
                let clock = strata_engine::ports::FixedClock(now);
                let state = lease_of(&j, "part").0;
                let (h, append) = lease::take(&state, "part", "A", now, 1_000, &mut ids, &clock).unwrap();
                let id = append.events[0].id.as_u128();
                let a = j.append_multi_blocking(vec![append]).unwrap().unwrap();
                say(format!("leased {id} {} {}", a.positions[0].seq, h.epoch));
                held = Some(h);
            }
            "fenced" => {
                use strata_engine::workgroup::lease;
                let now: i64 = words[1].parse().unwrap();
                let clock = strata_engine::ports::FixedClock(now);
                let (_, renewal) = lease::renew(held.as_ref().unwrap(), now, 1_000, &mut ids, &clock).unwrap();
                let id = (3u128 << 64) | next;
                next += 1;
                let work =
                    StreamAppend { stream: "part/child".into(), expected: ExpectedVersion::Any, events: vec![ev(id)] };
                match j.append_multi_blocking(vec![renewal, work]).unwrap() {
                    Err(conflict) => say(format!("fenced {} {id}", conflict.stream)),
                    Ok(_) => say(format!("appended {id}")),
                }
            }
            other => panic!("unknown command {other}"),
        }
    }
    let _ = j.close_blocking();
}

#[test]
#[ignore = "needs PostgreSQL and root (network namespaces); CI runs them"]
fn a_partitioned_coordinator_fails_typed_stalls_no_one_is_fenced_after_takeover_and_loses_nothing() {
    // Its name in the test binary (`--exact` needs the module path).
    const NAME: &str = "journal_pg_faults::a_partitioned_coordinator_fails_typed_stalls_no_one_is_fenced_after_takeover_and_loses_nothing";
    if let (Ok(schema), Ok(url)) = (std::env::var("STRATA_PARTITION_SCHEMA"), std::env::var("STRATA_PARTITION_URL")) {
        return partition_child(&schema, &url);
    }
    assert_eq!(euid(), 0, "network namespaces need root (CI runs as root)");
    let net = pg::Partition::new();
    let server = pg::Server::start_in(&server_dir("pg-partition"), Some(&net.server_ns), pg::Partition::SERVER_ADDR);
    // This process reaches the server through its Unix socket, which no partition cuts.
    let mut options = pg::fresh_options(&server.socket_url());
    options.lock_timeout = std::time::Duration::from_secs(60);
    let j = Journal::create_postgres(&options, ORIGIN).unwrap();
    let mut child = std::process::Command::new("ip")
        .args(["netns", "exec", &net.client_ns])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", NAME, "--include-ignored", "--nocapture", "--test-threads=1"])
        .env("STRATA_PARTITION_SCHEMA", &options.schema)
        .env("STRATA_PARTITION_URL", server.url())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut to_child = child.stdin.take().unwrap();
    let (tx, answers) = std::sync::mpsc::channel::<String>();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    // Every answer is awaited with a bound: a coordinator that hangs fails the test.
    let bound = std::time::Duration::from_secs(120);
    let mut ask = |cmd: &str| std::io::Write::write_all(&mut to_child, format!("{cmd}\n").as_bytes()).unwrap();
    let next = |what: &str| loop {
        let line = answers.recv_timeout(bound).unwrap_or_else(|_| panic!("no answer to {what} within {bound:?}"));
        if let Some((_, answer)) = line.split_once("@@ ") {
            return answer.to_owned();
        }
    };
    let mut acked: BTreeMap<u128, u64> = BTreeMap::new();
    let take_acks = |what: &str, acked: &mut BTreeMap<u128, u64>| loop {
        let line = next(what);
        let Some(rest) = line.strip_prefix("acked ") else {
            assert_eq!(line, "ok", "{what}");
            return;
        };
        let (id, seq) = rest.split_once(' ').unwrap();
        acked.insert(id.parse().unwrap(), seq.parse().unwrap());
    };
    ask("append 20");
    take_acks("append 20", &mut acked);
    assert_eq!(acked.len(), 20);
    // The child coordinates workgroup `part` (epoch 1) from T0, for 1 s by the test's clock.
    const T0: i64 = 1_000_000_000_000_000_000;
    ask(&format!("lease {T0}"));
    let leased = next("lease");
    let words: Vec<&str> = leased.split(' ').collect();
    assert_eq!((words[0], words[3]), ("leased", "1"), "{leased}");
    acked.insert(words[1].parse().unwrap(), words[2].parse().unwrap());

    // Cut off while it holds the ordering lock: the server ends that session once it has been
    // idle in its transaction for idle_in_transaction_session_timeout (2 s in the child), so a
    // coordinator on the other side of the partition waits for that, not forever.
    ask("hold");
    assert!(next("hold").starts_with("holding "));
    net.cut();
    let waited = std::time::Instant::now();
    let mine = j.append_blocking("part/parent", ExpectedVersion::Any, vec![ev(7 << 64)]).unwrap().unwrap();
    eprintln!("an append behind the cut-off holder of the order waited {} ms", waited.elapsed().as_millis());
    acked.insert(7 << 64, mine.positions[0].seq);

    // The cut-off coordinator's appends fail with a typed error: nothing acknowledges what it
    // sends, so TCP_USER_TIMEOUT (3 s) ends its session, and a new connection times out.
    let mut failures = Vec::new();
    for _ in 0..2 {
        ask("try");
        let line = next("try");
        let rest = line.strip_prefix("failed ").unwrap_or_else(|| panic!("an append got through a partition: {line}"));
        let mut parts = rest.splitn(3, ' ');
        let (_id, ms, error) = (parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap().to_owned());
        assert!(error.starts_with("[STRATA-E2302]") || error.starts_with("[STRATA-E2301]"), "a typed error: {error}");
        failures.push((ms.parse::<u64>().unwrap(), error));
    }
    for (ms, error) in &failures {
        eprintln!(
            "an append during the partition failed after {ms} ms: {}",
            error.chars().take(140).collect::<String>()
        );
    }

    // Its lease ends by the time recorded in the journal; this side takes the workgroup over.
    {
        use strata_engine::workgroup::lease;
        let mut ids = strata_engine::ports::CountingIds::new(6 << 64);
        j.refresh().unwrap();
        let state = lease_of(&j, "part").0;
        let (early_ns, end_ns) = (T0 + 999_000_000, T0 + 1_000_000_000);
        let clock = strata_engine::ports::FixedClock(early_ns);
        let early = lease::take(&state, "part", "B", early_ns, 1_000, &mut ids, &clock).unwrap_err();
        assert!(early.to_string().starts_with("[STRATA-E2312]"), "{early}");
        let clock = strata_engine::ports::FixedClock(end_ns);
        let (b, append) = lease::take(&state, "part", "B", end_ns, 1_000, &mut ids, &clock).unwrap();
        assert_eq!(b.epoch, 2);
        let id = append.events[0].id.as_u128();
        let took = j.append_multi_blocking(vec![append]).unwrap().unwrap();
        acked.insert(id, took.positions[0].seq);
    }

    // Healed: the appends that failed are in doubt; retried with the same ids they land once.
    net.heal();
    ask("retry");
    take_acks("retry", &mut acked);
    // The first coordinator cannot append under its old epoch: the whole append is refused.
    let before = j.refresh().unwrap().seq;
    ask(&format!("fenced {}", T0 + 1_500_000_000));
    let fenced = next("fenced");
    assert!(fenced.starts_with("fenced coordinator/part "), "an append under a lost epoch landed: {fenced}");
    let refused: u128 = fenced.rsplit(' ').next().unwrap().parse().unwrap();
    assert_eq!(j.refresh().unwrap().seq, before, "nothing of a fenced append is recorded");
    ask("append 5");
    take_acks("append 5", &mut acked);
    drop(to_child);
    child.wait().unwrap();
    assert_eq!(acked.len(), 20 + 1 + 1 + 2 + 1 + 5);

    let head = j.refresh().unwrap();
    assert_eq!(head.seq as usize, acked.len(), "every event once: nothing lost, nothing doubled");
    let all = j.read_range(1, acked.len() + 1).unwrap();
    assert_eq!(all.iter().map(|e| e.seq).collect::<Vec<_>>(), (1..=head.seq).collect::<Vec<_>>(), "gapless");
    let stored: BTreeMap<u128, u64> = all.iter().map(|e| (e.id.as_u128(), e.seq)).collect();
    assert_eq!(stored, acked, "every acknowledged event at the sequence it was acknowledged with");
    assert!(!stored.contains_key(&refused), "the fenced event is nowhere");
    let (lease, _) = lease_of(&j, "part");
    assert_eq!(lease.current.map(|l| (l.holder, l.epoch)), Some(("B".to_owned(), 2)));
    j.close_blocking().unwrap();
    let report = verify_store(&PgStore::connect(&options).unwrap(), None, Vec::new(), &[]).unwrap();
    assert!(report.ok(), "{:?}", report.problems);
}

/// This process's effective user id, from /proc (no unsafe call).
fn euid() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    line.split_whitespace().nth(2).unwrap().parse().unwrap()
}

/// Runs strata's write guard for lineage `L1` on a write to `rel` under `ROOT`.
fn guard_hook(ws: &std::path::Path, rel: &str, deadline_ms: u64) -> std::process::Output {
    const ROOT: &str = "/work/repo";
    let input = serde_json::json!({"session_id": "s-1", "cwd": ROOT, "hook_event_name": "PreToolUse",
        "tool_name": "Write", "tool_input": {"file_path": format!("{ROOT}/{rel}"), "content": "x\n"}, "tool_use_id": "t-1"});
    let (j, deadline) = (ws.display().to_string(), deadline_ms.to_string());
    let args = ["hook", "claude", "pre-tool-use", "--journal", &j, "--lineage", "L1", "--root", ROOT];
    let args: Vec<&str> = args.into_iter().chain(["--deadline-ms", &deadline]).collect();
    strata_tests::strata_with_stdin(strata_tests::strata_bin!(), &args, input.to_string().as_bytes())
}

#[test]
#[ignore = "needs PostgreSQL; CI runs them"]
fn the_write_guard_of_a_postgres_workspace_decides_on_it_and_denies_while_the_server_is_stopped() {
    const BIN: &str = strata_tests::strata_bin!();
    let tmp = tempfile::tempdir().unwrap();
    let server = pg::Server::start(&server_dir("guard"));
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    strata_tests::strata_ok(BIN, &ws, &["init", "--backend", "postgres", "--url", &server.url()]);
    let claim = serde_json::json!({"lineage_id": "L1", "input": {"owned_files": ["src/api"], "is_writer": true}});
    let j = ws.display().to_string();
    let out = strata_tests::strata_with_stdin(BIN, &["ce", "route", "--journal", &j], claim.to_string().as_bytes());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    // With the server up, the guard decides on the shared journal: inside ownership allowed,
    // outside denied, both recorded there (nothing written to sled: there is none).
    assert_eq!(guard_hook(&ws, "src/api/ok.rs", 10_000).status.code(), Some(0));
    let out = guard_hook(&ws, "src/web/no.rs", 10_000);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!ws.join(".strata/journal/sled").exists());
    // The server stopped: the guard cannot decide, so it denies within its deadline, even for a
    // path the lineage owns, and keeps the denial on this machine until the journal opens again.
    let pid = server.pid().to_string();
    assert!(std::process::Command::new("kill").args(["-STOP", &pid]).status().unwrap().success());
    let out = guard_hook(&ws, "src/api/late.rs", 2_000);
    assert!(std::process::Command::new("kill").args(["-CONT", &pid]).status().unwrap().success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("[STRATA-E2001]") || stderr.contains("[STRATA-E2003]"), "{stderr}");
    assert_eq!(strata_journal::pending::count(&ws.join(".strata/journal")), 1, "the denial waits on disk: {stderr}");
    // The next command that opens the journal folds it in; every decision is there once.
    let log = strata_tests::strata_ok(BIN, &ws, &["--json", "journal", "log"]);
    assert_eq!(strata_journal::pending::count(&ws.join(".strata/journal")), 0);
    assert_eq!(log.matches("guard.write-allowed").count(), 1, "{log}");
    assert_eq!(log.matches("guard.write-denied").count(), 2, "{log}");
    assert!(log.contains("late.rs"), "{log}");
}

#[test]
#[ignore = "needs PostgreSQL; CI runs them"]
fn writer_ownership_is_one_map_for_concurrent_routes_on_two_workspaces() {
    use strata_engine::ce::ledger::{self, Ledger};
    const BIN: &str = strata_tests::strata_bin!();
    const ROUTES: usize = 8;
    let tmp = tempfile::tempdir().unwrap();
    let (schema, options) = fresh_schema();
    let (a, b) = shared_workspaces(tmp.path(), &schema);
    // Eight processes, alternating between the two workspaces, claim overlapping files at once:
    // all are started before any is given its request.
    let mut children: Vec<_> = (0..ROUTES)
        .map(|i| {
            let ws = if i.is_multiple_of(2) { &a } else { &b };
            std::process::Command::new(BIN)
                .args(["ce", "route", "--journal", ws.to_str().unwrap()])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    // Every pair overlaps: a directory and a file in it, or the same file.
    let owned = |i: usize| if i.is_multiple_of(2) { "src/api" } else { "src/api/handler.rs" };
    let mut stdins: Vec<_> = children.iter_mut().map(|c| c.stdin.take().unwrap()).collect();
    for (i, stdin) in stdins.iter_mut().enumerate() {
        let claim =
            serde_json::json!({"lineage_id": format!("L{i}"), "input": {"owned_files": [owned(i)], "is_writer": true}});
        std::io::Write::write_all(stdin, claim.to_string().as_bytes()).unwrap();
    }
    drop(stdins);
    let answers: Vec<serde_json::Value> = children
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            serde_json::from_slice(&out.stdout).unwrap()
        })
        .collect();
    let winners: Vec<usize> = (0..ROUTES).filter(|&i| answers[i]["result"]["mode"] != "local").collect();
    assert_eq!(winners.len(), 1, "exactly one claim wins: {answers:?}");
    // Every loser got the conflict one process gives a second overlapping claim.
    let winner = winners[0];
    let single = {
        let dir = tmp.path().join("single");
        let first =
            serde_json::json!({"lineage_id": "X", "input": {"owned_files": [owned(winner)], "is_writer": true}});
        let clash =
            serde_json::json!({"lineage_id": "Y", "input": {"owned_files": [owned(winner + 1)], "is_writer": true}});
        let d = dir.to_str().unwrap();
        let route = |req: &serde_json::Value| {
            let out =
                strata_tests::strata_with_stdin(BIN, &["ce", "route", "--journal", d], req.to_string().as_bytes());
            serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
        };
        route(&first);
        route(&clash)
    };
    assert!(single["result"]["reason_codes"].as_array().unwrap().contains(&"WRITER_OWNERSHIP_CONFLICT".into()));
    for (i, answer) in answers.iter().enumerate().filter(|(i, _)| *i != winner) {
        assert_eq!(answer["result"]["mode"], single["result"]["mode"], "L{i}: {answer}");
        assert!(
            answer["result"]["reason_codes"].as_array().unwrap().contains(&"WRITER_OWNERSHIP_CONFLICT".into()),
            "L{i}: {answer}"
        );
    }
    // The shared ledger folds (a fold refuses an overlapping claim): one owner, one claim and a
    // recorded conflict for each loser.
    let j = Journal::open_postgres(&options).unwrap();
    let mut state = Ledger::default();
    strata_journal::projection::catch_up_one(&mut state, &j).expect("the ledger never held overlapping claims");
    assert_eq!(state.owners().keys().cloned().collect::<Vec<_>>(), [format!("L{winner}")]);
    let events = j.read_stream(ledger::STREAM, 1, 1000).unwrap();
    let count = |t: &str| events.iter().filter(|e| e.event_type == t).count();
    assert_eq!((count(ledger::CLAIMED), count(ledger::CONFLICT), count(ledger::ROUTE_DECIDED)), (1, 7, 8));
    j.close_blocking().unwrap();
}

#[test]
#[ignore = "needs PostgreSQL; CI runs them"]
fn a_chunk_put_through_one_workspace_is_served_by_the_other_workspaces_mcp_at_its_next_call() {
    use rmcp::ServiceExt as _;
    use strata_engine::knowledge::fixture::{EXAMPLE_CONCERNS, EXAMPLE_PROJECTS};
    const BIN: &str = strata_tests::strata_bin!();
    let tmp = tempfile::tempdir().unwrap();
    let (schema, _) = fresh_schema();
    let (a, b) = shared_workspaces(tmp.path(), &schema);
    let files = tmp.path().join("chunks");
    strata_tests::strata_ok(BIN, &a, &["knowledge", "example", "--out", files.to_str().unwrap()]);
    let mut declare = vec!["knowledge", "declare"];
    for c in EXAMPLE_CONCERNS {
        declare.extend(["--concern", c]);
    }
    for p in EXAMPLE_PROJECTS {
        declare.extend(["--project", p]);
    }
    strata_tests::strata_ok(BIN, &a, &declare);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        // Machine B's MCP server runs (and has answered) before machine A puts anything.
        let mut cmd = tokio::process::Command::new(BIN);
        cmd.arg("--dir").arg(&b).arg("mcp").stderr(std::process::Stdio::inherit());
        let client = ().serve(rmcp::transport::TokioChildProcess::new(cmd).unwrap()).await.unwrap();
        let call = |tool: &str, args: serde_json::Value| {
            let params = rmcp::model::CallToolRequestParams::new(tool.to_owned())
                .with_arguments(args.as_object().unwrap().clone());
            let client = &client;
            async move {
                let r = client.call_tool(params).await.unwrap();
                assert_eq!(r.is_error, Some(false), "{r:?}");
                r.structured_content.unwrap()
            }
        };
        let before = call("list_knowledge", serde_json::json!({})).await;
        assert_eq!(before["chunks"].as_array().unwrap().len(), 0, "{before}");
        assert_eq!(before["concerns"].as_array().unwrap().len(), EXAMPLE_CONCERNS.len(), "A's vocabulary: {before}");
        strata_tests::strata_ok(BIN, &a, &["knowledge", "put", files.to_str().unwrap()]);
        // The next call on B answers from the catalogue A just changed: listed, then served.
        let listed = call("list_knowledge", serde_json::json!({})).await;
        let slugs: Vec<&str> =
            listed["chunks"].as_array().unwrap().iter().map(|c| c["slug"].as_str().unwrap()).collect();
        assert!(!slugs.is_empty(), "{listed}");
        let concern = listed["chunks"][0]["concerns"][0].as_str().unwrap().to_owned();
        let served = call("get_knowledge", serde_json::json!({"concerns": [concern]})).await;
        assert!(!served["chunks"].as_array().unwrap().is_empty(), "{served}");
        client.cancel().await.unwrap();
        // And the serve B recorded is in A's journal at once.
        let log = strata_tests::strata_ok(BIN, &a, &["--json", "journal", "log"]);
        assert!(log.contains("knowledge.served"), "{log}");
    });
}

#[test]
#[ignore = "needs PostgreSQL; CI runs them"]
fn a_stopped_coordinator_whose_lease_was_taken_over_is_fenced_and_nothing_acknowledged_is_lost() {
    use std::io::BufRead as _;
    use strata_engine::workgroup::state::Workgroups;
    const BIN: &str = strata_tests::strata_bin!();
    const PLAN: &str = "workgroup = \"fence\"\nparallel = 1\nretries = 3\n\n\
        [[task]]\nid = \"r1\"\nrole = \"reviewer\"\nobjective = \"Read the first part.\"\n\n\
        [[task]]\nid = \"r2\"\nrole = \"reviewer\"\nobjective = \"Read the second part.\"\n\n\
        [[task]]\nid = \"r3\"\nrole = \"reviewer\"\nobjective = \"Read it all.\"\nafter = [\"r1\", \"r2\"]\n";
    let tmp = tempfile::tempdir().unwrap();
    let (schema, options) = fresh_schema();
    let (a, b) = shared_workspaces(tmp.path(), &schema);
    let plan = tmp.path().join("plan.toml");
    std::fs::write(&plan, PLAN).unwrap();
    let lease_ms = "3000";
    // Opened before A runs: a look at the journal never waits for A's ordering lock.
    let j = Journal::open_postgres(&options).unwrap();
    // Coordinator A: simulated turns of 5–40 s divided by 4, so it waits for its workers a while.
    let mut coordinator_a = std::process::Command::new(BIN)
        .arg("--dir")
        .arg(&a)
        .args(["run", plan.to_str().unwrap(), "--provider", "sim", "--time-scale", "4"])
        .env("STRATA_COORDINATOR_LEASE_MS", lease_ms)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, lines) = std::sync::mpsc::channel::<String>();
    let stderr = coordinator_a.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let bound = std::time::Duration::from_secs(120);
    let mut said_by_a = Vec::new();
    loop {
        let line = lines.recv_timeout(bound).expect("A dispatches within the bound");
        said_by_a.push(line.clone());
        if line.contains(": dispatched to sim") {
            break;
        }
    }
    // A stops answering (as a partitioned or frozen machine does) while it waits for its worker:
    // once the worker's start is recorded, A has nothing to append for a while (its next lease
    // renewal is due a second after the dispatch), so the stop never lands inside a commit.
    let started = |j: &Journal| j.stream_version("worker/fence/r1/1") > 0;
    for _ in 0..1_200 {
        if started(&j) {
            break;
        }
        let head = j.refresh().unwrap().seq;
        j.wait_for_head_timeout(head + 1, std::time::Duration::from_millis(100));
    }
    assert!(started(&j), "A's runner started r1's worker");
    let pid = coordinator_a.id().to_string();
    assert!(std::process::Command::new("kill").args(["-STOP", &pid]).status().unwrap().success());
    j.refresh().unwrap();
    let acknowledged = j.read_range(1, 100_000).unwrap();
    let (lease, _) = lease_of(&j, "fence");
    let held = lease.current.clone().expect("A took the lease when its run started");
    assert_eq!(held.epoch, 1);

    // B takes over once A's lease ended by the time recorded in the journal: until then it is
    // refused (STRATA-E2312) and appends nothing (a bounded poll).
    let mut refused = 0;
    let out = loop {
        let head = j.refresh().unwrap().seq;
        let out = std::process::Command::new(BIN)
            .arg("--dir")
            .arg(&b)
            .args(["run", "--resume", "fence", "--time-scale", "0", "--json"])
            .env("STRATA_COORDINATOR_LEASE_MS", lease_ms)
            .output()
            .unwrap();
        // With --json a refusal is one JSON object on stdout.
        let stderr = format!("{}{}", String::from_utf8_lossy(&out.stderr), String::from_utf8_lossy(&out.stdout));
        if !stderr.contains("[STRATA-E2312]") {
            break out;
        }
        assert_eq!(j.refresh().unwrap().seq, head, "a refused takeover appends nothing: {stderr}");
        refused += 1;
        assert!(refused < 2_000, "A's lease never ended: {stderr}");
    };
    let stderr_b = String::from_utf8_lossy(&out.stderr);
    assert!(
        matches!(out.status.code(), Some(0) | Some(3)),
        "B carried the workgroup on: {:?} {stderr_b} {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout)
    );
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    eprintln!("B took over after {refused} refusals: {summary}");
    let after_b = j.refresh().unwrap();
    let (lease, epochs) = lease_of(&j, "fence");
    let b_lease = lease.current.clone().unwrap();
    assert_eq!(b_lease.epoch, 2, "B holds the next epoch: {epochs:?}");
    assert!(b_lease.at_ns >= held.expires_at_ns, "taken over only once A's recorded end had passed");

    // A wakes up still believing it coordinates: its next append is refused, typed, and it stops.
    assert!(std::process::Command::new("kill").args(["-CONT", &pid]).status().unwrap().success());
    let (done, exited) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(coordinator_a.wait());
    });
    let status = exited.recv_timeout(bound).expect("A stops within the bound").unwrap();
    let rest: Vec<String> = lines.try_iter().collect();
    said_by_a.extend(rest);
    let said = said_by_a.join("\n");
    assert_eq!(status.code(), Some(1), "{said}");
    assert!(
        said.contains("[STRATA-E2311] workgroup fence: this coordinator's lease (epoch 1) was taken over"),
        "{said}"
    );

    // Nothing under the old epoch after the takeover, nothing acknowledged lost, the chain holds.
    let head = j.refresh().unwrap();
    assert_eq!(head.seq, after_b.seq, "A appended nothing once fenced");
    let (_, epochs) = lease_of(&j, "fence");
    let first_b = epochs.iter().position(|e| e.epoch == 2).unwrap();
    assert!(epochs[first_b..].iter().all(|e| e.epoch == 2), "{epochs:?}");
    // B's run ended cleanly and released its epoch; A's release, fenced, recorded nothing.
    let last = epochs.last().unwrap();
    assert_eq!((last.event_type.as_str(), last.epoch), (strata_engine::workgroup::lease::RELEASED, 2), "{epochs:?}");
    assert!(!epochs.iter().any(|e| e.epoch == 1 && e.event_type == strata_engine::workgroup::lease::RELEASED));
    for e in &acknowledged {
        let now = j.get(e.seq).unwrap().expect("an acknowledged event is still there");
        assert_eq!((now.id, now.seq), (e.id, e.seq));
    }
    let mut groups = Workgroups::default();
    strata_journal::projection::catch_up_one(&mut groups, &j).unwrap();
    assert!(groups.get("fence").unwrap().finished, "B finished the workgroup");
    j.close_blocking().unwrap();
    let report = verify_store(&PgStore::connect(&options).unwrap(), None, Vec::new(), &[]).unwrap();
    assert!(report.ok(), "{:?}", report.problems);
}
