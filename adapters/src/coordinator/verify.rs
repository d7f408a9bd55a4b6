//! Running a task's `verify` commands in the worker's worktree, for the runner, after a turn
//! that succeeded: each through `sh -c` in its own process group, stdin closed, with the plan's
//! time limit (then SIGKILL to the group), its output (stdout and stderr, in arrival order) kept
//! up to [`verify::LOG_BYTES_MAX`] bytes and saved whole as an artifact under
//! `.strata/artifacts/<workgroup>/` with its blake3 hash in `worker.checked`. Writes are confined
//! by Landlock to the worktree, a private temporary directory and `/dev/null` where the kernel
//! offers Landlock (the result says whether it did).
//!
//! A check must not change what the worker produced: the worktree's changed and untracked files
//! (as `git status` lists them) are read before the checks, and afterwards whatever a check
//! created, changed or removed among what git would commit is put back as the worker left it,
//! so build output a check leaves (outside `.gitignore`) never reaches the post-turn diff.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use strata_engine::workgroup::verify::{self, ArtifactRef, Check, Checked};
use tokio::io::AsyncReadExt as _;

/// Most changed files of a worktree the restore keeps (more: the checks are refused).
const RESTORE_FILES_MAX: usize = 4_096;
/// Most bytes of changed files the restore keeps.
const RESTORE_BYTES_MAX: u64 = 256 * 1024 * 1024;

/// Where and how one attempt's checks run.
pub struct Run<'a> {
    /// The workspace (artifacts go under its `.strata/artifacts/`).
    pub workspace: &'a Path,
    /// The worker's directory.
    pub workdir: &'a Path,
    /// Workgroup, task and attempt, for the artifact names.
    pub workgroup: &'a str,
    /// Task.
    pub task: &'a str,
    /// Attempt.
    pub attempt: u32,
    /// The commands.
    pub commands: &'a [String],
    /// Each command's time limit, milliseconds.
    pub timeout_ms: u64,
}

/// Runs the checks in order, stopping at the first failure; every result recorded, the
/// worktree restored to what the worker left. Also says how long the checks' own processes
/// lived (spawn to exit, the confinement trampoline included): the checks' time, which the
/// coordinator's overhead leaves out as it leaves out the worker's.
pub async fn run(r: Run<'_>) -> (Checked, Duration) {
    let mut checks = Vec::new();
    let mut processes = Duration::ZERO;
    let saved = snapshot(r.workdir);
    for (i, command) in r.commands.iter().enumerate() {
        let c = match &saved {
            Err(e) => refused(command, e),
            Ok(_) => {
                let (c, lived) = one(&r, i, command).await;
                processes += lived;
                c
            }
        };
        let passed = c.passed;
        checks.push(c);
        if !passed {
            break;
        }
    }
    if let Ok(saved) = &saved
        && let Err(e) = restore(r.workdir, saved)
        && let Some(last) = checks.last_mut()
    {
        last.passed = false;
        last.summary =
            verify::summary_of(&format!("{}\n[strata] the worktree could not be restored: {e}", last.summary));
    }
    (Checked { task: r.task.to_owned(), attempt: r.attempt, checks }, processes)
}

/// A check's private temporary directory, removed when the check is done.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn refused(command: &str, why: &str) -> Check {
    Check {
        command: command.to_owned(),
        exit_code: None,
        passed: false,
        timed_out: false,
        wall_ms: 0,
        log: None,
        summary: verify::summary_of(&format!("[strata] not run: {why}")),
        confined: false,
    }
}

/// Whether this kernel confines a process's writes with Landlock.
fn landlock_available() -> bool {
    use landlock::{ABI, Access, AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr};
    Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(ABI::V1))
        .and_then(|r| r.create())
        .is_ok()
}

/// The ruleset of a confined check: read and run anything, write only under `writable`.
fn ruleset(writable: &[&Path]) -> Result<landlock::RulesetCreated, landlock::RulesetError> {
    use landlock::{ABI, Access, AccessFs, Ruleset, RulesetAttr, RulesetCreatedAttr, path_beneath_rules};
    let abi = ABI::V5;
    let mut paths: Vec<PathBuf> = writable.iter().map(|p| p.to_path_buf()).collect();
    paths.push(PathBuf::from("/dev/null"));
    Ruleset::default()
        .handle_access(AccessFs::from_all(abi))?
        .create()?
        .add_rules(path_beneath_rules(["/"], AccessFs::from_read(abi)))?
        .add_rules(path_beneath_rules(paths, AccessFs::from_all(abi)))
}

/// What `strata confine --probe` answers.
const CONFINE_PROBE: &str = "strata-confine 1";

/// `strata confine --write DIR… -- PROGRAM ARGS…`: restricts itself with the Landlock rules
/// of a check (read anything, write under the DIRs) and execs PROGRAM; exit 126 when it cannot.
pub fn confine_main(write: &[PathBuf], probe: bool, command: &[String]) -> std::process::ExitCode {
    use std::os::unix::process::CommandExt as _;
    if probe {
        println!("{CONFINE_PROBE}");
        return std::process::ExitCode::SUCCESS;
    }
    let Some((program, args)) = command.split_first() else {
        eprintln!("[STRATA-E2118] strata confine: no command given");
        return std::process::ExitCode::from(126);
    };
    let writable: Vec<&Path> = write.iter().map(PathBuf::as_path).collect();
    let restricted =
        ruleset(&writable).map_err(|e| e.to_string()).and_then(|r| r.restrict_self().map_err(|e| e.to_string()));
    if let Err(e) = restricted {
        eprintln!("[STRATA-E2118] strata confine: its Landlock rules could not be applied: {e}");
        return std::process::ExitCode::from(126);
    }
    let e = std::process::Command::new(program).args(args).exec();
    eprintln!("[STRATA-E2118] strata confine: {program} could not be started: {e}");
    std::process::ExitCode::from(126)
}

/// The strata executable that confines a check in a process of its own (`STRATA_PROGRAM`, else
/// this one, when `confine --probe` answers): starting it is a plain spawn, where applying the
/// rules between fork and exec copies this whole process. Probed once per process.
fn confiner() -> Option<&'static Path> {
    static FOUND: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    FOUND
        .get_or_init(|| {
            let program = super::from_env::strata_program().or_else(|| std::env::current_exe().ok())?;
            let mut child = std::process::Command::new(&program)
                .args(["confine", "--probe"])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .ok()?;
            use wait_timeout::ChildExt as _;
            let answered = matches!(child.wait_timeout(Duration::from_secs(10)), Ok(Some(s)) if s.success());
            if !answered {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            let mut out = String::new();
            use std::io::Read as _;
            child.stdout.take()?.take(256).read_to_string(&mut out).ok()?;
            (out.trim() == CONFINE_PROBE).then_some(program)
        })
        .as_deref()
}

/// One check, and how long its process lived (zero when it never started).
async fn one(r: &Run<'_>, index: usize, command: &str) -> (Check, Duration) {
    let began = Instant::now();
    let tmp = match crate::providers::worker_process::private_dir(&std::env::temp_dir().join("strata-verify")) {
        Ok(t) => Scratch(t),
        Err(e) => return (refused(command, &format!("a private temporary directory: {e}")), Duration::ZERO),
    };
    let confined = landlock_available();
    let trampoline = confiner().filter(|_| confined);
    let mut cmd = match trampoline {
        Some(program) => {
            let mut c = tokio::process::Command::new(program);
            c.arg("confine").arg("--write").arg(r.workdir).arg("--write").arg(&tmp.0).args(["--", "sh", "-c", command]);
            c
        }
        None => {
            let mut c = tokio::process::Command::new("sh");
            c.arg("-c").arg(command);
            c
        }
    };
    cmd.current_dir(r.workdir).env("TMPDIR", &tmp.0);
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0).kill_on_drop(true);
    if confined && trampoline.is_none() {
        let rules = match ruleset(&[r.workdir, &tmp.0]) {
            Ok(rules) => rules,
            Err(e) => return (refused(command, &format!("its Landlock rules: {e}")), Duration::ZERO),
        };
        let mut rules = Some(rules);
        #[allow(unsafe_code)]
        // SAFETY: between fork and exec the closure only calls prctl(2) and
        // landlock_restrict_self(2) on a ruleset built before the fork.
        unsafe {
            cmd.pre_exec(move || {
                let Some(rules) = rules.take() else { return Err(std::io::Error::other("ruleset used twice")) };
                rules.restrict_self().map(|_| ()).map_err(|e| std::io::Error::other(e.to_string()))
            });
        }
    }
    let spawned = Instant::now();
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return (refused(command, &format!("sh could not be started: {e}")), Duration::ZERO),
    };
    let log = Arc::new(Mutex::new(Vec::<u8>::new()));
    let readers: Vec<_> = [
        child.stdout.take().map(|o| Box::new(o) as Box<dyn tokio::io::AsyncRead + Unpin + Send>),
        child.stderr.take().map(|e| Box::new(e) as Box<dyn tokio::io::AsyncRead + Unpin + Send>),
    ]
    .into_iter()
    .flatten()
    .map(|mut pipe| {
        let log = Arc::clone(&log);
        tokio::spawn(async move {
            let mut buf = vec![0u8; 8192];
            while let Ok(n) = pipe.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                let mut l = log.lock().unwrap_or_else(|p| p.into_inner());
                l.extend_from_slice(&buf[..n]);
                if l.len() > verify::LOG_BYTES_MAX {
                    let cut = l.len() - verify::LOG_BYTES_MAX;
                    l.drain(..cut);
                }
            }
        })
    })
    .collect();
    let pid = child.id();
    let waited = tokio::time::timeout(Duration::from_millis(r.timeout_ms), child.wait()).await;
    let (exit_code, timed_out) = match waited {
        Ok(Ok(status)) => (status.code(), false),
        Ok(Err(_)) => (None, false),
        Err(_) => {
            if let Some(pid) = pid {
                let _ = crate::providers::worker_process::signal(pid, true, libc::SIGKILL);
            }
            let _ = child.wait().await;
            (None, true)
        }
    };
    let lived = spawned.elapsed();
    // The group's leftovers hold the pipes: ended with it, and the readers given a bound.
    if let Some(pid) = pid
        && crate::providers::worker_process::group_alive(pid)
    {
        let _ = crate::providers::worker_process::signal(pid, true, libc::SIGKILL);
    }
    for reader in readers {
        let _ = tokio::time::timeout(Duration::from_secs(5), reader).await;
    }
    let bytes = std::mem::take(&mut *log.lock().unwrap_or_else(|p| p.into_inner()));
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let rel = format!("{}/{}/{}.{}.verify-{}.log", verify::ARTIFACTS_DIR, r.workgroup, r.task, r.attempt, index + 1);
    let path = r.workspace.join(&rel);
    let saved = path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| crate::files::write_replacing(&path, &bytes));
    let log = saved.ok().map(|()| ArtifactRef {
        path: rel,
        blake3: blake3::hash(&bytes).to_hex().to_string(),
        bytes: bytes.len() as u64,
    });
    let check = Check {
        command: command.to_owned(),
        exit_code,
        passed: exit_code == Some(0) && !timed_out && log.is_some(),
        timed_out,
        wall_ms: began.elapsed().as_millis() as u64,
        log,
        summary: verify::summary_of(&text),
        confined,
    };
    (check, lived)
}

/// What git would commit in `workdir`, by path: the bytes the worker left (`None`: removed).
type Saved = BTreeMap<String, Option<Vec<u8>>>;

fn status(workdir: &Path) -> Result<Vec<String>, String> {
    let out = std::process::Command::new("git")
        .args(["status", "--porcelain=v1", "-z", "--no-renames", "--untracked-files=all"])
        .current_dir(workdir)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("git status: {e}"))?;
    if !out.status.success() {
        return Err(format!("git status: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    Ok(text.split('\0').filter_map(|e| e.get(3..)).filter(|s| !s.is_empty()).map(str::to_owned).collect())
}

fn snapshot(workdir: &Path) -> Result<Saved, String> {
    if !workdir.join(".git").exists() {
        return Ok(Saved::new());
    }
    let files = status(workdir)?;
    if files.len() > RESTORE_FILES_MAX {
        return Err(format!("{} changed files; the checks keep at most {RESTORE_FILES_MAX}", files.len()));
    }
    let mut saved = Saved::new();
    let mut total = 0u64;
    for f in files {
        let bytes = crate::files::read_bounded(&workdir.join(&f), RESTORE_BYTES_MAX, "a changed file").ok();
        total += bytes.as_ref().map_or(0, |b| b.len() as u64);
        if total > RESTORE_BYTES_MAX {
            return Err(format!("the changed files pass {RESTORE_BYTES_MAX} bytes"));
        }
        saved.insert(f, bytes);
    }
    Ok(saved)
}

fn restore(workdir: &Path, saved: &Saved) -> Result<(), String> {
    if !workdir.join(".git").exists() {
        return Ok(());
    }
    let now = status(workdir)?;
    let mut touched: Vec<&String> = now.iter().collect();
    touched.extend(saved.keys());
    touched.sort();
    touched.dedup();
    let mut from_head = Vec::new();
    for f in touched {
        let file = workdir.join(f);
        match saved.get(f) {
            Some(Some(bytes)) => {
                if crate::files::read_bounded(&file, RESTORE_BYTES_MAX, "a changed file").ok().as_deref() != Some(bytes)
                {
                    if let Some(parent) = file.parent() {
                        std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
                    }
                    std::fs::write(&file, bytes).map_err(|e| format!("{}: {e}", file.display()))?;
                }
            }
            Some(None) => {
                let _ = std::fs::remove_file(&file);
            }
            // New since the worker ended: what HEAD has, or nothing.
            None => from_head.push(f.clone()),
        }
    }
    for f in from_head {
        let tracked = std::process::Command::new("git")
            .args(["checkout", "HEAD", "--", &f])
            .current_dir(workdir)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !tracked {
            let _ = std::fs::remove_file(workdir.join(&f));
        }
    }
    Ok(())
}
