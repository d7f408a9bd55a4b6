//! The `strata-simulations` binary: a run prints what it checked and the same seed prints the
//! same head hash; an injected defect fails with the seed and a command that reproduces it.

use std::process::Command;

fn run(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_strata-simulations")).args(args).output().expect("the binary runs")
}

#[test]
fn a_seed_reproduces_its_run_and_a_broken_invariant_prints_its_reproduction() {
    let args = ["--scenario", "journal-crash", "--seed", "5", "--steps", "300", "--json"];
    let (a, b) = (run(&args), run(&args));
    assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
    let report: serde_json::Value = serde_json::from_slice(&a.stdout).expect("one JSON line");
    assert_eq!(report["seed"], 5);
    assert!(report["invariants"]["checks"].as_u64().is_some_and(|c| c > 300), "{report}");
    assert_eq!(a.stdout, b.stdout, "the same seed, the same run");

    let bad =
        run(&["--scenario", "journal-crash", "--seed", "1", "--seeds", "8", "--steps", "300", "--inject", "sync-lies"]);
    assert_eq!(bad.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&bad.stderr);
    let line = stderr.lines().find_map(|l| l.strip_prefix("reproduce: ")).expect("a reproduction line");
    assert!(stderr.contains("invariant acknowledged-survive broken"), "{stderr}");
    // The printed command reproduces the same failure.
    let argv: Vec<&str> = line.split_whitespace().skip_while(|w| *w != "--").skip(1).collect();
    let again = run(&argv);
    assert_eq!(again.status.code(), Some(1));
    let first = stderr.lines().find(|l| l.contains("STRATA-E1801")).expect("the failure");
    assert!(String::from_utf8_lossy(&again.stderr).contains(first), "{first}");

    let unknown = run(&["--scenario", "nope"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("journal-crash"));
}
