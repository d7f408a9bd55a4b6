//! Child process for the crash test: appends from 12 threads until it is killed.
//!
//! Usage: `crash-child <journal dir> <process|power>`. Prints `READY` once the journal is open,
//! then one line per acknowledged append: `ACK <seq> <event id> <stream> <version>`, flushed
//! before the next append starts, so every printed line is an acknowledgement the parent may hold
//! the journal to after a SIGKILL. Half the threads share three streams and retry on conflict;
//! the other half own a stream each. Every 7th append is sent twice to exercise idempotent
//! retries (the second send must return the original positions: `DUP` lines).

use std::io::Write;
use std::sync::{Arc, Mutex};

use strata_journal::{Durability, ExpectedVersion, Journal};
use uuid::Uuid;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(dir), Some(mode)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: crash-child <journal dir> <process|power>");
        std::process::exit(2);
    };
    let durability: Durability = match mode.parse() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let journal = match Journal::open(std::path::Path::new(dir), &strata_tests::options(durability)) {
        Ok(j) => j,
        Err(e) => {
            eprintln!("open failed: {e}");
            std::process::exit(1);
        }
    };
    let out = Arc::new(Mutex::new(std::io::stdout()));
    {
        let mut o = out.lock().unwrap_or_else(|e| e.into_inner());
        let _ = writeln!(o, "READY");
        let _ = o.flush();
    }
    let threads: Vec<_> = (0..12)
        .map(|t| {
            let journal = journal.clone();
            let out = out.clone();
            std::thread::spawn(move || run_thread(&journal, t, &out))
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
}

fn run_thread(journal: &Journal, t: usize, out: &Mutex<std::io::Stdout>) {
    let shared = t.is_multiple_of(2);
    let stream = if shared { format!("shared/{}", t % 3) } else { format!("own/{t}") };
    for n in 0u64.. {
        let id = Uuid::now_v7();
        let ev =
            strata_tests::event(id, "bench.sample", &serde_json::json!({"thread": t, "n": n, "pad": "x".repeat(200)}));
        let mut attempts = 0;
        let appended = loop {
            attempts += 1;
            let expected = ExpectedVersion::Exact(journal.stream_version(&stream));
            match journal.append_blocking(&stream, expected, vec![ev.clone()]) {
                Ok(Ok(a)) => break a,
                Ok(Err(_conflict)) if attempts < 1000 => continue,
                Ok(Err(c)) => {
                    eprintln!("gave up after {attempts} conflicts: {c}");
                    std::process::exit(1);
                }
                Err(e) => {
                    eprintln!("append failed: {e}");
                    std::process::exit(1);
                }
            }
        };
        let pos = appended.positions[0];
        let mut line = format!("ACK {} {} {} {}\n", pos.seq, id, stream, pos.version);
        if n % 7 == 3 {
            // Retry the same event: must be deduplicated with the original position.
            match journal.append_blocking(&stream, ExpectedVersion::Exact(pos.version - 1), vec![ev]) {
                Ok(Ok(again)) if again.deduplicated && again.positions == appended.positions => {
                    line.push_str(&format!("DUP {} {}\n", pos.seq, id));
                }
                other => {
                    eprintln!("retry of {id} was not deduplicated: {other:?}");
                    std::process::exit(1);
                }
            }
        }
        let mut o = out.lock().unwrap_or_else(|e| e.into_inner());
        let _ = o.write_all(line.as_bytes());
        let _ = o.flush();
    }
}
