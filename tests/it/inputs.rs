//! Every command that reads a file a user names, given what is not a regular file: `/dev/zero`
//! (endless), a FIFO (opening it for reading would wait for a writer), a directory holding a
//! FIFO, a socket or a link to `/dev/zero`, and a config file that is one of those. Each must
//! answer with a typed `[STRATA-E19…]` error and exit 1, within a hard kill bound (a hung child
//! is killed and the test fails), inside a 1 GiB address-space limit (an unbounded read fails),
//! and with the journal head unmoved. Also: missing paths and bad links get a code, and a
//! refused `strata ce --journal` creates nothing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::json;
use strata_journal::{Durability, Journal};
use strata_tests::{strata_bin, strata_ok};

const BIN: &str = strata_bin!();

/// Address space a command may use, KiB: far above what a bounded read needs, far below what
/// reading `/dev/zero` to its end takes.
const ADDRESS_SPACE_KIB_MAX: u64 = 1024 * 1024;
/// A child still running after this is killed (and the test fails): a bound against hangs, not
/// a timing assertion.
const KILL_AFTER_S: u64 = 30;

/// Runs `strata --dir ws args` under the address-space limit and the kill bound.
fn strata_bounded(ws: &Path, args: &[String]) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(format!(r#"ulimit -v {ADDRESS_SPACE_KIB_MAX} && exec timeout -s KILL {KILL_AFTER_S} "$@""#))
        .arg("sh")
        .arg(BIN)
        .arg("--dir")
        .arg(ws)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("sh runs")
}

/// The journal's head (sequence and hash), read directly from the store.
fn head(ws: &Path) -> (u64, String) {
    let j =
        Journal::open(&ws.join(".strata/journal"), &strata_tests::options(Durability::Process)).expect("journal opens");
    let h = j.head();
    let head = (h.seq, format!("{:?}", h.hash));
    j.close_blocking().expect("journal closes");
    head
}

/// A temporary directory with a workspace in `ws/` (the directory lives as long as the guard).
fn workspace() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    strata_ok(BIN, &ws, &["init", "--durability", "process"]);
    (tmp, ws)
}

fn mkfifo(path: &Path) {
    let made = Command::new("mkfifo").arg(path).status().expect("mkfifo runs");
    assert!(made.success(), "mkfifo {}", path.display());
}

/// Asserts a refusal: exit 1, `code` in stderr, the head unmoved; names `what` on failure.
fn assert_refused(ws: &Path, what: &str, args: &[String], code: &str) {
    let before = head(ws);
    let out = strata_bounded(ws, args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(137), "{what}: still running after {KILL_AFTER_S} s, killed: it hung");
    assert_eq!(out.status.code(), Some(1), "{what}: {args:?}\nstderr: {stderr}");
    assert!(stderr.contains(&format!("[{code}]")), "{what}: {args:?}: {code} not in\n{stderr}");
    assert_eq!(head(ws), before, "{what}: a refusal appended something");
}

/// What a command is given in place of a file.
struct Input {
    name: &'static str,
    path: PathBuf,
    /// The code when the command reads it as a file, and when it scans it as a directory.
    as_file: &'static str,
    as_scanned: &'static str,
}

/// The file-taking commands, split at spaces: `@` is the input under test; `@json` a file holding
/// `{}`; `@pairs` valid pairs; `@out` a path that must not be written. `true` when a directory is
/// scanned. `eval sign` and `eval promote` read their files in the order given, so each row puts
/// readable files before the one under test.
const COMMANDS: &[(&str, bool)] = &[
    ("intake @", true),
    ("intake --dry-run @", true),
    ("knowledge put @", true),
    ("profile register @", false),
    ("prompt verify @", false),
    ("eval corpus check @", false),
    ("eval synthesize --corpus @", false),
    ("eval sign --pairs @ --key @json SIGN", false),
    ("eval sign --pairs @pairs --key @ SIGN", false),
    ("eval promote --corpus @ --pairs @json PROMOTE", false),
    ("eval promote --pairs @ PROMOTE", false),
    ("eval promote --pairs @json --envelope @ PROMOTE", false),
    ("eval promote --pairs @json --trusted-keys @ PROMOTE", false),
    ("eval promote --pairs @json --thresholds @ PROMOTE", false),
    ("run @", false),
    ("journal verify --checkpoint @", false),
    ("journal verify --pubkey @", false),
    ("journal verify --bundle @", false),
    ("journal export --bundle @out --pubkey @", false),
    ("journal checkpoint --key @", false),
];
/// The rest of an `eval sign` / `eval promote` command line.
const SIGN: &str = "--key-id measurement-key-t --candidate-version c1 --runtime-digest sha256:00";
const PROMOTE: &str = "--candidate-version c1 --runtime-digest sha256:00";

#[test]
fn every_file_taking_command_refuses_what_is_not_a_regular_file_promptly_and_in_bounded_memory() {
    let (tmp, ws) = workspace();
    let json_file = tmp.path().join("empty.json");
    std::fs::write(&json_file, "{}").unwrap();
    let pairs = tmp.path().join("pairs.json");
    std::fs::write(&pairs, strata_ok(BIN, &ws, &["eval", "synthesize"])).unwrap();
    let out = tmp.path().join("out.bundle");

    let fifo = tmp.path().join("fifo");
    mkfifo(&fifo);
    // A directory whose regular files come before and after the FIFO, one level down.
    let with_fifo = tmp.path().join("with-fifo");
    std::fs::create_dir_all(with_fifo.join("sub")).unwrap();
    std::fs::write(with_fifo.join("a.md"), "---\nkind: issue\n---\n").unwrap();
    mkfifo(&with_fifo.join("sub/b.md"));
    std::fs::write(with_fifo.join("sub/c.md"), "---\nkind: issue\n---\n").unwrap();
    let with_socket = tmp.path().join("with-socket");
    std::fs::create_dir_all(&with_socket).unwrap();
    let _listener = std::os::unix::net::UnixListener::bind(with_socket.join("s.md")).unwrap();
    // A link met while scanning is followed by the read, which refuses the device it points to.
    let with_link = tmp.path().join("with-link");
    std::fs::create_dir_all(&with_link).unwrap();
    std::os::unix::fs::symlink("/dev/zero", with_link.join("zero.md")).unwrap();

    let inputs = [
        Input { name: "/dev/zero", path: "/dev/zero".into(), as_file: "STRATA-E1901", as_scanned: "STRATA-E1901" },
        Input { name: "a FIFO", path: fifo, as_file: "STRATA-E1901", as_scanned: "STRATA-E1901" },
        Input {
            name: "a directory holding a FIFO",
            path: with_fifo,
            as_file: "STRATA-E1901",
            as_scanned: "STRATA-E1904",
        },
        Input {
            name: "a directory holding a socket",
            path: with_socket,
            as_file: "STRATA-E1901",
            as_scanned: "STRATA-E1904",
        },
        Input {
            name: "a directory holding a link to /dev/zero",
            path: with_link,
            as_file: "STRATA-E1901",
            as_scanned: "STRATA-E1901",
        },
    ];
    let mut checked = 0;
    for input in &inputs {
        for (template, scans) in COMMANDS {
            let line = template.replace("SIGN", SIGN).replace("PROMOTE", PROMOTE);
            let args: Vec<String> = line
                .split(' ')
                .map(|a| match a {
                    "@" => input.path.display().to_string(),
                    "@json" => json_file.display().to_string(),
                    "@pairs" => pairs.display().to_string(),
                    "@out" => out.display().to_string(),
                    other => other.to_owned(),
                })
                .collect();
            let code = if *scans { input.as_scanned } else { input.as_file };
            assert_refused(&ws, &format!("{template} given {}", input.name), &args, code);
            checked += 1;
        }
    }
    assert_eq!(checked, inputs.len() * COMMANDS.len());
    assert!(!out.exists(), "a refused export wrote its bundle");
}

/// `journal import` creates a workspace's journal, so it is tried where there is none yet: each
/// input is refused with its code and nothing is created.
#[test]
fn journal_import_refuses_what_is_not_a_regular_file_and_creates_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("fifo");
    mkfifo(&fifo);
    let dir = tmp.path().join("dir");
    std::fs::create_dir_all(&dir).unwrap();
    for (name, path) in [("/dev/zero", PathBuf::from("/dev/zero")), ("a FIFO", fifo), ("a directory", dir)] {
        let ws = tmp.path().join("fresh");
        let out = strata_bounded(&ws, &["journal".to_owned(), "import".to_owned(), path.display().to_string()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(137), "import of {name}: hung, killed");
        assert_eq!(out.status.code(), Some(1), "import of {name}: {stderr}");
        assert!(stderr.contains("[STRATA-E1901]"), "import of {name}: {stderr}");
        assert!(!ws.join(".strata/journal").exists(), "import of {name} created a journal");
    }
}

#[test]
fn a_config_file_that_is_not_a_regular_file_is_refused_by_every_command_that_reads_it() {
    let (tmp, ws) = workspace();
    let config = ws.join(".strata/config.toml");
    let _ = std::fs::remove_file(&config);
    let args = vec!["journal".to_owned(), "log".to_owned()];
    std::os::unix::fs::symlink("/dev/zero", &config).unwrap();
    assert_refused(&ws, "a config linked to /dev/zero", &args, "STRATA-E1901");
    std::fs::remove_file(&config).unwrap();
    mkfifo(&config);
    assert_refused(&ws, "a FIFO as config", &args, "STRATA-E1901");
    std::fs::remove_file(&config).unwrap();
    std::fs::create_dir_all(&config).unwrap();
    mkfifo(&config.join("inside"));
    assert_refused(&ws, "a directory holding a FIFO as config", &args, "STRATA-E1901");
    std::fs::remove_dir_all(&config).unwrap();
    std::os::unix::fs::symlink(tmp.path().join("nowhere"), &config).unwrap();
    assert_refused(&ws, "a config that is a dangling link", &args, "STRATA-E1903");
    std::fs::remove_file(&config).unwrap();
    strata_ok(BIN, &ws, &["journal", "log"]);
}

#[test]
fn a_missing_path_a_dangling_or_looping_link_and_a_missing_or_directory_plan_each_have_a_code() {
    let (tmp, ws) = workspace();
    let dangling = tmp.path().join("dangling.md");
    std::os::unix::fs::symlink(tmp.path().join("nowhere.md"), &dangling).unwrap();
    let (a, b) = (tmp.path().join("loop-a.md"), tmp.path().join("loop-b.md"));
    std::os::unix::fs::symlink(&b, &a).unwrap();
    std::os::unix::fs::symlink(&a, &b).unwrap();
    let missing = tmp.path().join("missing.md");
    let plans = tmp.path().join("plans");
    std::fs::create_dir_all(&plans).unwrap();
    let s = |p: &Path| p.display().to_string();
    let cases: [(&str, Vec<String>, &str, &str); 7] = [
        ("intake of a missing path", vec!["intake".into(), s(&missing)], "STRATA-E1903", "no such file"),
        ("intake of a dangling link", vec!["intake".into(), s(&dangling)], "STRATA-E1903", "does not exist"),
        ("intake of a looping link", vec!["intake".into(), s(&a)], "STRATA-E1903", "loop"),
        (
            "knowledge put of a missing path",
            vec!["knowledge".into(), "put".into(), s(&missing)],
            "STRATA-E1903",
            "no such file",
        ),
        (
            "run of a missing plan",
            vec!["run".into(), s(&tmp.path().join("missing.toml"))],
            "STRATA-E1903",
            "no such file",
        ),
        ("run of a directory", vec!["run".into(), s(&plans)], "STRATA-E1901", "is a directory"),
        ("run of a dangling link", vec!["run".into(), s(&dangling)], "STRATA-E1903", "does not exist"),
    ];
    for (what, args, code, reason) in cases {
        assert_refused(&ws, what, &args, code);
        let stderr = String::from_utf8_lossy(&strata_bounded(&ws, &args).stderr).into_owned();
        assert!(stderr.contains(reason), "{what}: {reason:?} not in {stderr}");
    }
}

/// `strata ce OP --journal J` with `request` on stdin: (exit code, stdout).
fn ce(op: &str, journal: &Path, request: &serde_json::Value) -> (i32, String) {
    let j = journal.display().to_string();
    let out = strata_tests::strata_with_stdin(BIN, &["ce", op, "--journal", &j], request.to_string().as_bytes());
    (out.status.code().unwrap_or(-1), String::from_utf8(out.stdout).unwrap())
}

/// The head sequence of the journal directory `dir` (the handle, and with it the lock, is
/// dropped before returning).
fn seq_at(dir: &Path) -> u64 {
    let j = Journal::open(dir, &strata_tests::options(Durability::Process)).expect("a journal is there");
    let seq = j.head().seq;
    j.close_blocking().expect("journal closes");
    seq
}

#[test]
fn a_refused_ce_request_creates_no_journal_and_an_accepted_one_does() {
    let tmp = tempfile::tempdir().unwrap();
    let typo = tmp.path().join("jornal");
    let empty = tmp.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let refused = json!({"lineage_id": "u", "input": {"owned_files": ["/etc"]}});
    for dir in [&typo, &empty] {
        let (code, line) = ce("route", dir, &refused);
        assert_eq!(code, 1, "{line}");
        assert!(line.contains("\"ok\":false") && line.contains("OWNERSHIP"), "{line}");
    }
    assert!(!typo.exists(), "a refused request created {}", typo.display());
    assert_eq!(std::fs::read_dir(&empty).unwrap().count(), 0, "a refused request wrote into an empty directory");

    let accepted = json!({"lineage_id": "L1", "input": {"owned_files": ["src/api"], "is_writer": true}});
    let (code, line) = ce("route", &typo, &accepted);
    assert_eq!(code, 0, "{line}");
    let recorded = seq_at(&typo);
    assert!(recorded > 0, "the accepted decision was recorded");
    // Once it exists, a refusal appends nothing to it.
    let (code, line) = ce("route", &typo, &refused);
    assert_eq!(code, 1, "{line}");
    assert_eq!(seq_at(&typo), recorded, "a refusal appended something");
}
