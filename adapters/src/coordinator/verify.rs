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
//!
//! Around the checks the worktree is also listed with each file's stamp (inode, size, mode,
//! modification and change times): when nothing a check could change differs
//! afterwards, nothing is restored and `git status` is not run again, and otherwise only the
//! files whose stamps differ are put back. A file's change time moves with every write, so an
//! equal stamp is an untouched file, unless the earlier write fell in the same tick of the
//! filesystem's clock (git calls such entries racily clean): a file or link changed in the last
//! [`RECENT`] is also listed with its content's blake3 hash, so a worker's fresh worktree is
//! compared by what its new files hold (up to [`RECENT_BYTES_MAX`] of them; past that, or on
//! anything but a file, link or directory changed that recently, the listing is not used). A
//! directory needs no hash: what it holds is the names the listing has. A snapshot is kept for the next checks in the same
//! directory (a reader's checks all run in the one checkout) and used again while the listing
//! and the repository's own state (HEAD, its ref, the index, the config and exclude files, the
//! user's git config and ignore files) have the same stamps. Past [`LISTED_MAX`] entries, or
//! on anything unreadable, the listing is not used and every check pays for `git status`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use strata_engine::workgroup::verify::{self, ArtifactRef, Check, Checked};

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
    let workdir = r.workdir.to_path_buf();
    let saved = blocking(move || snapshot(&workdir)).await;
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
    let restored = match saved {
        Ok(saved) => {
            let workdir = r.workdir.to_path_buf();
            blocking(move || restore(&workdir, &saved.files, saved.listed.as_deref())).await
        }
        Err(_) => Ok(()),
    };
    if let Err(e) = restored
        && let Some(last) = checks.last_mut()
    {
        last.passed = false;
        last.summary =
            verify::summary_of(&format!("{}\n[strata] the worktree could not be restored: {e}", last.summary));
    }
    (Checked { task: r.task.to_owned(), attempt: r.attempt, checks }, processes)
}

/// Runs `f` (file system walks, `git` processes) on the blocking pool, not on the runtime's
/// workers, which the other attempts' tasks need meanwhile.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T, String> + Send + 'static) -> Result<T, String> {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| Err(format!("the worktree's snapshot stopped: {e}")))
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

/// How much lower than strata's own a check's scheduling priority is (`nice(2)`): a check is
/// batch work, and the coordinator dispatching and recording the other tasks goes first.
pub const CHECK_NICENESS: i32 = 10;

/// `confine …` exactly as the coordinator starts it (`confine --probe`, or `confine --write
/// DIR… -- PROGRAM ARGS…` right after the program's name), answered before the command line is
/// parsed as a whole, which costs a check's start more than the rest of it; `None` for any
/// other command line, which the CLI's parser then takes, `confine` included.
pub fn confine_from_args(args: &[std::ffi::OsString]) -> Option<std::process::ExitCode> {
    let mut rest = args.iter().skip(1);
    if rest.next()?.to_str()? != "confine" {
        return None;
    }
    let (mut write, mut probe) = (Vec::new(), false);
    loop {
        match rest.next().map(|a| a.to_str()) {
            Some(Some("--probe")) => probe = true,
            Some(Some("--write")) => write.push(PathBuf::from(rest.next()?)),
            Some(Some("--")) => break,
            None if probe => break,
            _ => return None,
        }
    }
    let command: Option<Vec<String>> = rest.map(|a| a.to_str().map(str::to_owned)).collect();
    Some(confine_main(&write, probe, &command?))
}

/// `strata confine --write DIR… -- PROGRAM ARGS…`: restricts itself with the Landlock rules
/// of a check (read anything, write under the DIRs), lowers its priority by
/// [`CHECK_NICENESS`] and execs PROGRAM; exit 126 when it cannot.
pub fn confine_main(write: &[PathBuf], probe: bool, command: &[String]) -> std::process::ExitCode {
    use std::os::unix::process::CommandExt as _;
    if probe {
        println!("{CONFINE_PROBE}");
        return std::process::ExitCode::SUCCESS;
    }
    lower_priority();
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

/// Lowers this process's scheduling priority by [`CHECK_NICENESS`] (best effort: a check at
/// strata's own priority is still a check).
fn lower_priority() {
    #[allow(unsafe_code)]
    // SAFETY: nice(2) takes an integer and changes only this process's priority; it is
    // async-signal-safe, so it may run between fork and exec.
    unsafe {
        libc::nice(CHECK_NICENESS);
    }
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
                lower_priority();
                rules.restrict_self().map(|_| ()).map_err(|e| std::io::Error::other(e.to_string()))
            });
        }
    }
    let spawned = Instant::now();
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return (refused(command, &format!("sh could not be started: {e}")), Duration::ZERO),
    };
    let log = Mutex::new(Vec::<u8>::new());
    // Both pipes are read in this task, beside the wait: no other task has to be woken for them.
    let (out, err) = (child.stdout.take(), child.stderr.take());
    let reading = async { tokio::join!(pump(out, &log), pump(err, &log)) };
    let mut reading = std::pin::pin!(reading);
    let mut read = false;
    let pid = child.id();
    let waiting = async {
        loop {
            tokio::select! {
                status = child.wait() => break status,
                _ = &mut reading, if !read => read = true,
            }
        }
    };
    let waited = tokio::time::timeout(Duration::from_millis(r.timeout_ms), waiting).await;
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
    // The group's leftovers hold the pipes: ended with it, and the reading given a bound.
    if !read {
        if let Some(pid) = pid
            && crate::providers::worker_process::group_alive(pid)
        {
            let _ = crate::providers::worker_process::signal(pid, true, libc::SIGKILL);
        }
        let _ = tokio::time::timeout(Duration::from_secs(5), &mut reading).await;
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

/// Reads `pipe` to its end into `log`, keeping its last [`verify::LOG_BYTES_MAX`] bytes.
async fn pump(pipe: Option<impl tokio::io::AsyncRead + Unpin>, log: &Mutex<Vec<u8>>) {
    if let Some(pipe) = pipe {
        crate::providers::worker_process::keep_last(pipe, log, verify::LOG_BYTES_MAX).await;
    }
}

/// What git would commit in `workdir`, by path: the bytes the worker left (`None`: removed).
type Files = BTreeMap<String, Option<Vec<u8>>>;

/// Most entries a worktree's listing holds (more: no listing, and `git status` decides alone).
pub const LISTED_MAX: usize = 20_000;
/// How recent a change makes a listing unusable: longer than the coarsest timestamps of the
/// filesystems strata runs on (a tick of the kernel's clock; a second on ext3; two on FAT).
pub const RECENT: Duration = Duration::from_millis(2_500);
/// Most bytes of changed files a kept snapshot holds (more: it is not kept).
const KEPT_BYTES_MAX: u64 = 1024 * 1024;
/// Most snapshots kept at once, one per directory.
const KEPT_MAX: usize = 16;
/// Most bytes of recently changed files a listing reads to hash (more: no listing).
pub const RECENT_BYTES_MAX: u64 = 4 * 1024 * 1024;

/// What a change to a file changes: equal stamps, an untouched file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mode: u32,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Stamp {
        use std::os::unix::fs::MetadataExt as _;
        Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mode: meta.mode(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }

    /// The stamp of `path` (not followed if a link); `None` when there is nothing there.
    fn at(path: &Path) -> Result<Option<Stamp>, ()> {
        match std::fs::symlink_metadata(path) {
            Ok(m) => Ok(Some(Stamp::of(&m))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(_) => Err(()),
        }
    }
}

/// One listed entry: its stamp and, when it changed in the last [`RECENT`] and is not a
/// directory, the blake3 hash of its content (a link's: its target).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    stamp: Stamp,
    content: Option<[u8; 32]>,
}

/// Every entry under a worktree but its `.git` (and `.strata/` where the repository excludes
/// it, as `strata run` makes it), by the path git names it with.
type Listing = BTreeMap<String, Entry>;

/// The saved files, and the listing taken with them (`None`: too large or unreadable).
struct Saved {
    files: Arc<Files>,
    listed: Option<Arc<Listing>>,
}

/// A snapshot kept for the next checks in its directory.
struct Kept {
    listed: Arc<Listing>,
    repository: Vec<(PathBuf, Option<Stamp>)>,
    files: Arc<Files>,
    taken: u64,
}

fn kept() -> &'static Mutex<BTreeMap<PathBuf, Kept>> {
    static KEPT: std::sync::OnceLock<Mutex<BTreeMap<PathBuf, Kept>>> = std::sync::OnceLock::new();
    KEPT.get_or_init(Default::default)
}

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

/// The repository's administrative directory and its common directory, for a checkout
/// (`.git` a directory) or a linked worktree (`.git` a file naming it).
fn git_dirs(workdir: &Path) -> Option<(PathBuf, PathBuf)> {
    let dot = workdir.join(".git");
    let meta = std::fs::symlink_metadata(&dot).ok()?;
    if meta.is_dir() {
        return Some((dot.clone(), dot));
    }
    if !meta.is_file() || meta.len() > 4096 {
        return None;
    }
    // Read as bounded text (never waiting on a FIFO put there since): a check may rewrite it.
    let read = |p: &Path| crate::files::read_text_bounded(p, 4096, "a git administrative file").ok();
    let text = read(&dot)?;
    let admin = workdir.join(text.strip_prefix("gitdir:")?.trim());
    let common = match std::fs::symlink_metadata(admin.join("commondir")) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => admin.clone(),
        _ => admin.join(read(&admin.join("commondir"))?.trim()),
    };
    Some((admin, common))
}

/// The stamps of what besides the worktree's files decides what `git status` lists: HEAD and
/// the ref it names, the index, the repository's config and exclude files, and the user's.
fn repository_state(workdir: &Path) -> Option<Vec<(PathBuf, Option<Stamp>)>> {
    let (admin, common) = git_dirs(workdir)?;
    let head = crate::files::read_text_bounded(&admin.join("HEAD"), 4096, "a git HEAD file").ok()?;
    let mut paths = vec![
        admin.join("HEAD"),
        admin.join("index"),
        admin.join("config.worktree"),
        common.join("packed-refs"),
        common.join("config"),
        common.join("info").join("exclude"),
    ];
    if let Some(name) = head.trim().strip_prefix("ref: ") {
        if !name.starts_with("refs/") || name.split('/').any(|s| s.is_empty() || s == "." || s == "..") {
            return None;
        }
        paths.push(common.join(name));
    }
    if let Some(home) = std::env::var_os("HOME") {
        let home = PathBuf::from(home);
        paths.push(home.join(".gitconfig"));
        paths.push(home.join(".config").join("git").join("config"));
        paths.push(home.join(".config").join("git").join("ignore"));
    }
    if let Some(xdg) = std::env::var_os("XDG_CONFIG_HOME") {
        let git = PathBuf::from(xdg).join("git");
        paths.push(git.join("config"));
        paths.push(git.join("ignore"));
    }
    for var in ["GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM"] {
        if let Some(p) = std::env::var_os(var) {
            paths.push(PathBuf::from(p));
        }
    }
    paths.push(PathBuf::from("/etc/gitconfig"));
    paths.into_iter().map(|p| Stamp::at(&p).ok().map(|s| (p, s))).collect()
}

/// Whether the repository's own exclude file keeps `.strata/` out of git's view.
fn excludes_strata(workdir: &Path) -> bool {
    git_dirs(workdir)
        .and_then(|(_, common)| {
            crate::files::read_text_bounded(&common.join("info").join("exclude"), 1 << 20, "the exclude file").ok()
        })
        .is_some_and(|t| t.lines().any(|l| l.trim() == ".strata/"))
}

/// The blake3 hash of the regular file `path` whose stamp is `stamp`, read without following a
/// link or waiting on a FIFO put there since; `None` when it is no longer that file or its
/// content would take `budget` past [`RECENT_BYTES_MAX`].
fn content_hash(path: &Path, stamp: &Stamp, budget: &mut u64) -> Option<[u8; 32]> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    *budget = budget.checked_add(stamp.len).filter(|b| *b <= RECENT_BYTES_MAX)?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || Stamp::of(&meta) != *stamp {
        return None;
    }
    let mut bytes = Vec::with_capacity(usize::try_from(stamp.len).ok()?);
    file.take(stamp.len.saturating_add(1)).read_to_end(&mut bytes).ok()?;
    (bytes.len() as u64 == stamp.len).then(|| *blake3::hash(&bytes).as_bytes())
}

/// The worktree's listing, or `None` past [`LISTED_MAX`] entries or [`RECENT_BYTES_MAX`] of
/// recently changed files, on an entry changed in the last [`RECENT`] that is not a file, link
/// or directory, on a name that is not UTF-8 or on anything unreadable. An entry `like` holds
/// with a hash and this very stamp is hashed again however old it is now: a check's write in the
/// tick of the worker's last one leaves the stamp as it was.
fn listing(workdir: &Path, like: Option<&Listing>) -> Option<Listing> {
    let skip_strata = excludes_strata(workdir);
    let recent = std::time::SystemTime::now().checked_sub(RECENT)?.duration_since(std::time::UNIX_EPOCH).ok()?;
    let recent = (i64::try_from(recent.as_secs()).ok()?, i64::from(recent.subsec_nanos()));
    let mut listed = Listing::new();
    let mut budget = 0u64;
    let mut dirs = vec![(workdir.to_path_buf(), String::new())];
    while let Some((dir, rel)) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).ok()? {
            let entry = entry.ok()?;
            let name = entry.file_name().into_string().ok()?;
            if rel.is_empty() && name == ".git" {
                continue;
            }
            let meta = entry.metadata().ok()?;
            if meta.is_dir() && name == ".strata" && skip_strata {
                continue;
            }
            let path = if rel.is_empty() { name } else { format!("{rel}/{name}") };
            if meta.is_dir() {
                dirs.push((entry.path(), path.clone()));
            }
            let stamp = Stamp::of(&meta);
            // Hashed before with this very stamp: hashed again to compare (a changed stamp
            // already differs, and an old file that changed since is settled again).
            let hashed_before =
                like.and_then(|l| l.get(&path)).is_some_and(|e| e.content.is_some() && e.stamp == stamp);
            let settled = stamp.ctime < recent && stamp.mtime < recent && !hashed_before;
            let content = if settled || meta.is_dir() {
                None
            } else if meta.is_file() {
                Some(content_hash(&entry.path(), &stamp, &mut budget)?)
            } else if meta.file_type().is_symlink() {
                use std::os::unix::ffi::OsStrExt as _;
                let target = std::fs::read_link(entry.path()).ok()?;
                Some(*blake3::hash(target.as_os_str().as_bytes()).as_bytes())
            } else {
                return None;
            };
            listed.insert(path, Entry { stamp, content });
            if listed.len() > LISTED_MAX {
                return None;
            }
        }
    }
    Some(listed)
}

fn snapshot(workdir: &Path) -> Result<Saved, String> {
    if !workdir.join(".git").exists() {
        return Ok(Saved { files: Arc::default(), listed: None });
    }
    let was = kept().lock().unwrap_or_else(|p| p.into_inner()).get(workdir).map(|k| Arc::clone(&k.listed));
    let listed = listing(workdir, was.as_deref()).map(Arc::new);
    let repository = repository_state(workdir);
    if let (Some(l), Some(r)) = (&listed, &repository) {
        let kept = kept().lock().unwrap_or_else(|p| p.into_inner());
        if let Some(k) = kept.get(workdir)
            && *k.listed == **l
            && k.repository == *r
        {
            return Ok(Saved { files: Arc::clone(&k.files), listed });
        }
    }
    let files = status(workdir)?;
    if files.len() > RESTORE_FILES_MAX {
        return Err(format!("{} changed files; the checks keep at most {RESTORE_FILES_MAX}", files.len()));
    }
    let mut saved = Files::new();
    let mut total = 0u64;
    for f in files {
        let bytes = crate::files::read_bounded(&workdir.join(&f), RESTORE_BYTES_MAX, "a changed file").ok();
        total += bytes.as_ref().map_or(0, |b| b.len() as u64);
        if total > RESTORE_BYTES_MAX {
            return Err(format!("the changed files pass {RESTORE_BYTES_MAX} bytes"));
        }
        saved.insert(f, bytes);
    }
    // `git status` may refresh the index: the state is the one after it, as is the listing
    // (status writes nothing in the worktree itself).
    let saved = Arc::new(saved);
    if let (Some(l), Some(r)) = (&listed, repository_state(workdir))
        && total <= KEPT_BYTES_MAX
    {
        keep(workdir, Arc::clone(l), r, Arc::clone(&saved));
    }
    Ok(Saved { files: saved, listed })
}

/// Keeps a snapshot for `workdir`, dropping the oldest past [`KEPT_MAX`].
fn keep(workdir: &Path, listed: Arc<Listing>, repository: Vec<(PathBuf, Option<Stamp>)>, files: Arc<Files>) {
    static TAKEN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let taken = TAKEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut kept = kept().lock().unwrap_or_else(|p| p.into_inner());
    kept.insert(workdir.to_path_buf(), Kept { listed, repository, files, taken });
    while kept.len() > KEPT_MAX {
        let Some(oldest) = kept.iter().min_by_key(|(_, k)| k.taken).map(|(p, _)| p.clone()) else { break };
        kept.remove(&oldest);
    }
}

/// Puts back what the checks changed among what git would commit. With the listing from
/// before the checks, nothing is done when the listing after them is the same, and otherwise
/// only the paths whose stamps differ (or that neither listing names) are touched.
fn restore(workdir: &Path, saved: &Files, before: Option<&Listing>) -> Result<(), String> {
    if !workdir.join(".git").exists() {
        return Ok(());
    }
    let after = before.and_then(|b| listing(workdir, Some(b)));
    if let (Some(b), Some(a)) = (before, &after)
        && b == a
    {
        return Ok(());
    }
    let changed = |f: &str| match (before, &after) {
        (Some(b), Some(a)) => b.get(f) != a.get(f) || (!b.contains_key(f) && !a.contains_key(f)),
        _ => true,
    };
    let now = status(workdir)?;
    let mut touched: Vec<&String> = now.iter().collect();
    touched.extend(saved.keys());
    touched.sort();
    touched.dedup();
    touched.retain(|f| changed(f));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn git(dir: &Path, args: &[&str]) {
        let ok = std::process::Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=main"])
            .args(args)
            .current_dir(dir)
            .output()
            .expect("git runs");
        assert!(ok.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&ok.stderr));
    }

    /// A repository whose worker changed `a` and left `b` untracked; `c` is committed and clean.
    fn worked(dir: &Path) {
        git(dir, &["init", "-q"]);
        std::fs::write(dir.join("a"), "a0").expect("a");
        std::fs::write(dir.join("c"), "c0").expect("c");
        git(dir, &["add", "-A"]);
        git(dir, &["commit", "-qm", "base"]);
        std::fs::write(dir.join("a"), "a-worker").expect("a");
        std::fs::write(dir.join("b"), "b-worker").expect("b");
    }

    fn checks(dir: &Path, commands: &[&str]) -> Checked {
        let commands: Vec<String> = commands.iter().map(|c| (*c).to_owned()).collect();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        rt.block_on(run(Run {
            workspace: dir,
            workdir: dir,
            workgroup: "g",
            task: "t",
            attempt: 1,
            commands: &commands,
            timeout_ms: 30_000,
        }))
        .0
    }

    /// Waits until the worktree's last writes are older than [`RECENT`], so its listing is used.
    fn settled() {
        std::thread::sleep(RECENT + Duration::from_millis(200));
    }

    fn read(dir: &Path, f: &str) -> Option<String> {
        std::fs::read_to_string(dir.join(f)).ok()
    }

    /// A worked worktree in a fresh directory (kept while the `TempDir` lives), its path
    /// canonical, and `exclude` as its exclude file when given.
    fn worktree(exclude: Option<&str>) -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = std::fs::canonicalize(tmp.path()).expect("canonical");
        worked(&dir);
        if let Some(text) = exclude {
            std::fs::write(dir.join(".git/info/exclude"), text).expect("exclude");
        }
        (tmp, dir)
    }

    #[test]
    fn what_checks_change_is_put_back_and_an_untouched_worktree_is_left_as_it_is() {
        let (_tmp, dir) = worktree(Some(".strata/\n"));
        let c0 = std::fs::symlink_metadata(dir.join("c")).expect("c");
        settled();
        assert!(checks(&dir, &["true"]).checks[0].passed);
        let same = std::fs::symlink_metadata(dir.join("c")).expect("c");
        assert_eq!(Stamp::of(&c0), Stamp::of(&same), "an untouched file is not rewritten");
        assert!(kept().lock().expect("kept").contains_key(&dir), "the snapshot is kept for the next checks");
        // The kept snapshot, used again: the checks' changes among git's files are put back.
        let done = checks(&dir, &["echo x > a && rm b && echo y > new && echo z > c && mkdir -p d && echo w > d/e"]);
        assert!(done.checks[0].passed, "{:?}", done.checks[0]);
        assert_eq!(read(&dir, "a").as_deref(), Some("a-worker"));
        assert_eq!(read(&dir, "b").as_deref(), Some("b-worker"));
        assert_eq!(read(&dir, "c").as_deref(), Some("c0"));
        assert_eq!((read(&dir, "new"), read(&dir, "d/e")), (None, None));
    }

    #[test]
    fn a_fresh_worktree_is_compared_by_content_and_a_same_size_rewrite_is_still_put_back() {
        let (_tmp, dir) = worktree(Some(".strata/\n"));
        let listed = listing(&dir, None).expect("a worktree written just now is listed");
        assert!(listed["a"].content.is_some() && listed["b"].content.is_some(), "{listed:?}");
        assert!(checks(&dir, &["true"]).checks[0].passed);
        assert!(kept().lock().expect("kept").contains_key(&dir), "the snapshot is kept for the next checks");
        // Same sizes, within the worker's second: only the content tells these apart.
        let done = checks(&dir, &["printf a-WORKER > a && printf B-worker > b && printf C0 > c"]);
        assert!(done.checks[0].passed, "{:?}", done.checks[0]);
        assert_eq!(read(&dir, "a").as_deref(), Some("a-worker"));
        assert_eq!(read(&dir, "b").as_deref(), Some("b-worker"));
        assert_eq!(read(&dir, "c").as_deref(), Some("c0"));
    }

    #[test]
    fn a_fifo_in_the_worktree_is_never_opened_and_the_checks_fall_back_to_git_status() {
        let (_tmp, dir) = worktree(None);
        use std::os::unix::fs::FileTypeExt as _;
        let made = std::process::Command::new("mkfifo").arg(dir.join("pipe")).status().expect("mkfifo runs");
        assert!(made.success(), "mkfifo");
        assert!(listing(&dir, None).is_none(), "a FIFO changed just now cannot be compared by content");
        let done = checks(&dir, &["echo x > a"]);
        assert!(done.checks[0].passed, "{:?}", done.checks[0]);
        assert_eq!(read(&dir, "a").as_deref(), Some("a-worker"));
        assert!(!kept().lock().expect("kept").contains_key(&dir), "no listing, nothing kept");
        assert!(std::fs::symlink_metadata(dir.join("pipe")).is_ok_and(|m| m.file_type().is_fifo()), "left alone");
    }

    #[test]
    fn only_the_confinement_the_coordinator_starts_is_taken_before_the_parser() {
        let args = |a: &[&str]| a.iter().map(std::ffi::OsString::from).collect::<Vec<_>>();
        for other in [
            &["strata", "run", "--example"][..],
            &["strata", "--dir", "w", "confine", "--probe"],
            &["strata", "confine", "--write", "/w"],
            &["strata", "confine", "--write"],
            &["strata", "confine", "--help"],
            &["strata"],
        ] {
            assert!(confine_from_args(&args(other)).is_none(), "{other:?} is left to the parser");
        }
    }

    #[test]
    fn a_kept_snapshot_is_not_used_once_what_git_ignores_has_changed() {
        let (_tmp, dir) = worktree(Some(".strata/\nkeep.me\n"));
        std::fs::write(dir.join("keep.me"), "mine").expect("ignored file");
        settled();
        assert!(checks(&dir, &["true"]).checks[0].passed);
        assert!(kept().lock().expect("kept").contains_key(&dir), "the snapshot is kept for the next checks");
        // No longer ignored: the file is the worker's now and a check's edit of it is undone,
        // not "restored" by removing it as something new.
        std::fs::write(dir.join(".git/info/exclude"), ".strata/\n").expect("exclude");
        assert!(checks(&dir, &["echo theirs > keep.me"]).checks[0].passed);
        assert_eq!(read(&dir, "keep.me").as_deref(), Some("mine"));
    }
}
