//! A writer task's two per-task git steps done in this process, with gix, instead of by five
//! `git` processes: its worktree made (what `git worktree add --detach` and the checkout it
//! spawns do) and its changes committed (what `git status`, `git add -A` and `git commit` do).
//!
//! Each function answers `None` when it cannot do its step exactly as git would (a layout or
//! configuration this code does not handle: reftable refs, a sparse checkout, filter drivers,
//! hooks a checkout would run, submodules, conflicts, intent-to-add entries, nested
//! repositories), or on any error before it has changed anything the repository reads; the
//! caller then runs the `git` commands as before. [`CLI_ENV`] set to `1` makes every call answer
//! `None` (to compare both paths, or to rule this one out).
//!
//! * A worktree is the layout `git worktree add` writes (gitrepository-layout(5)): an
//!   administrative directory `.git/worktrees/<name>/` holding `HEAD` (the detached commit),
//!   `commondir`, `gitdir` and the index, and the worktree's `.git` file naming it; the files
//!   are checked out by gix from the tree, through the repository's attributes.
//! * A commit is the tree of `HEAD` with every path `git status` would list replaced by what is
//!   on disk (through the repository's clean filters), the index written to match it, then
//!   `HEAD` moved to a commit by strata, as `git commit` makes it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use gix::bstr::ByteSlice as _;
use gix::status::index_worktree::Item as WorktreeItem;
use gix::status::plumbing::index_as_worktree::{Change, EntryStatus};

use super::Changes;

/// Set to `1`: every writer task's worktree and commit are made by `git` processes.
pub const CLI_ENV: &str = "STRATA_GIT_CLI";

fn cli_only() -> bool {
    std::env::var(CLI_ENV).is_ok_and(|v| v.trim() == "1")
}

/// Whether the repository's configuration asks for something this module does not do as git
/// does: filter drivers, a sparse checkout, hooks elsewhere than `hooks/`, no real file modes
/// or symbolic links, or worktrees with configurations of their own.
fn unusual_config(repo: &gix::Repository) -> bool {
    let config = repo.config_snapshot();
    config.plumbing().sections_by_name("filter").is_some_and(|mut s| s.next().is_some())
        || config.boolean("core.sparseCheckout") == Some(true)
        || config.string("core.hooksPath").is_some()
        || config.boolean("core.fileMode") == Some(false)
        || config.boolean("core.symlinks") == Some(false)
        || config.string("extensions.refStorage").is_some_and(|s| s.as_bytes() != b"files")
        || config.boolean("extensions.worktreeConfig") == Some(true)
        || repo.common_dir().join("reftable").exists()
}

/// Whether an index has an entry this module does not handle: a submodule or a conflict stage.
fn unusual_index(state: &gix::index::State) -> bool {
    state
        .entries()
        .iter()
        .any(|e| e.mode == gix::index::entry::Mode::COMMIT || e.stage() != gix::index::entry::Stage::Unconflicted)
}

/// The name `git worktree add` gives the administrative directory of a worktree at `path`: its
/// last component, with a number after it when that name is taken. `None` for a name this code
/// does not make (anything but ASCII letters, digits, `.`, `_` and `-`, or a leading `.`).
fn claim_admin_dir(common: &Path, path: &Path) -> Option<PathBuf> {
    let base = path.file_name()?.to_str()?;
    if base.is_empty()
        || base.starts_with('.')
        || base.ends_with(".lock")
        || !base.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return None;
    }
    let parent = common.join("worktrees");
    std::fs::create_dir_all(&parent).ok()?;
    for n in 0..100u32 {
        let name = if n == 0 { base.to_owned() } else { format!("{base}{n}") };
        let dir = parent.join(name);
        match std::fs::create_dir(&dir) {
            Ok(()) => return Some(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(_) => return None,
        }
    }
    None
}

/// Makes a worktree at `path` (which must not exist) of the repository whose top directory is
/// `root`, detached at the commit `reference` points to, and checks it out. `None`: nothing was
/// left behind, and `git worktree add` should make it.
pub fn add_worktree(root: &Path, path: &Path, reference: &str) -> Option<()> {
    if cli_only() || path.exists() {
        return None;
    }
    let repo = gix::open(root).ok()?;
    let common = std::fs::canonicalize(repo.common_dir()).ok()?;
    if std::fs::canonicalize(repo.git_dir()).ok()? != common
        || std::fs::canonicalize(root.join(".git")).ok()? != common
        || unusual_config(&repo)
        || common.join("hooks").join("post-checkout").exists()
    {
        return None;
    }
    let commit = repo.find_reference(reference).ok()?.into_fully_peeled_id().ok()?.detach();
    let tree = repo.find_commit(commit).ok()?.tree_id().ok()?.detach();
    let index = repo.index_from_tree(&tree).ok()?;
    if unusual_index(&index) {
        return None;
    }
    let parent = path.parent()?;
    std::fs::create_dir_all(parent).ok()?;
    let path = std::fs::canonicalize(parent).ok()?.join(path.file_name()?);
    let admin = claim_admin_dir(&common, &path)?;
    let made = make_worktree(&repo, &admin, &path, commit, index);
    if made.is_none() {
        let _ = std::fs::remove_dir_all(&path);
        let _ = std::fs::remove_dir_all(&admin);
    }
    made
}

/// Writes the worktree's administrative files and checks `index` out at `path`, through the
/// repository's own checkout options: a linked worktree reads the repository's configuration and
/// attributes (a configuration of its own, `extensions.worktreeConfig`, is declined by
/// [`unusual_config`]), so the worktree need not be opened as a repository of its own.
fn make_worktree(
    repo: &gix::Repository,
    admin: &Path,
    path: &Path,
    commit: gix::ObjectId,
    index: gix::index::File,
) -> Option<()> {
    // As git does: `locked` while it is made, so a concurrent `git worktree prune` leaves it.
    std::fs::write(admin.join("locked"), "initializing\n").ok()?;
    std::fs::write(admin.join("commondir"), "../..\n").ok()?;
    std::fs::write(admin.join("gitdir"), format!("{}\n", path.join(".git").display())).ok()?;
    std::fs::write(admin.join("HEAD"), format!("{commit}\n")).ok()?;
    std::fs::create_dir(path).ok()?;
    std::fs::write(path.join(".git"), format!("gitdir: {}\n", admin.display())).ok()?;
    let mut options = repo.checkout_options(gix::worktree::stack::state::attributes::Source::IdMapping).ok()?;
    options.destination_is_initially_empty = true;
    // What filter drivers would be told, as from the detached worktree (none run: see
    // `unusual_config`).
    let driver = options.filters.driver_context_mut();
    driver.ref_name = None;
    driver.treeish = Some(commit);
    let (mut state, _) = index.into_parts();
    let objects = repo.objects.clone().into_arc().ok()?;
    let discard = gix::progress::Discard;
    let outcome =
        gix::worktree::state::checkout(&mut state, path, objects, &discard, &discard, &AtomicBool::new(false), options)
            .ok()?;
    if !(outcome.collisions.is_empty()
        && outcome.errors.is_empty()
        && outcome.delayed_paths_unknown.is_empty()
        && outcome.delayed_paths_unprocessed.is_empty())
    {
        return None;
    }
    gix::index::File::from_state(state, admin.join("index")).write(Default::default()).ok()?;
    std::fs::remove_file(admin.join("locked")).ok()?;
    Some(())
}

/// The paths `git status --porcelain --no-renames --untracked-files=all` lists for `repo`'s
/// worktree, or `None` for an entry this module does not commit as git would.
fn changed_paths(repo: &gix::Repository) -> Option<BTreeSet<String>> {
    use gix::status::{Item, Submodule, UntrackedFiles, tree_index::TrackRenames};
    let items = repo
        .status(gix::progress::Discard)
        .ok()?
        .untracked_files(UntrackedFiles::Files)
        .index_worktree_rewrites(None)
        .tree_index_track_renames(TrackRenames::Disabled)
        .index_worktree_submodules(Submodule::Given { ignore: gix::submodule::config::Ignore::All, check_dirty: false })
        .into_iter(Vec::new())
        .ok()?;
    let mut paths = BTreeSet::new();
    for item in items {
        let path = match item.ok()? {
            Item::TreeIndex(change) => change.location().to_owned(),
            Item::IndexWorktree(WorktreeItem::Modification { rela_path, status, .. }) => match status {
                EntryStatus::NeedsUpdate(_) => continue,
                EntryStatus::Change(Change::Removed | Change::Type { .. } | Change::Modification { .. }) => rela_path,
                _ => return None,
            },
            Item::IndexWorktree(WorktreeItem::DirectoryContents { entry, .. }) => {
                if entry.status != gix::dir::entry::Status::Untracked {
                    continue;
                }
                match entry.disk_kind {
                    Some(gix::dir::entry::Kind::File | gix::dir::entry::Kind::Symlink) => entry.rela_path,
                    _ => return None,
                }
            }
            Item::IndexWorktree(WorktreeItem::Rewrite { .. }) => return None,
        };
        paths.insert(path.to_str().ok()?.to_owned());
    }
    Some(paths)
}

/// Commits everything changed in `worktree` (a worktree this run made) on its detached `HEAD`,
/// as `git add -A` and `git commit -m message` would; the files and the commit. `None`: `HEAD`
/// has not moved, and the `git` commands should do it.
pub fn collect(worktree: &Path, message: &str) -> Option<Changes> {
    collect_as(worktree, message, &super::Author::default())
}

/// [`collect`], the commit authored and committed by `author`.
pub fn collect_as(worktree: &Path, message: &str, author: &super::Author) -> Option<Changes> {
    if cli_only() {
        return None;
    }
    let repo = gix::open(worktree).ok()?;
    let index = repo.index_or_empty().ok()?;
    if unusual_config(&repo) || unusual_index(&index) {
        return None;
    }
    drop(index);
    let head = repo.head_id().ok()?.detach();
    let head_tree = repo.find_commit(head).ok()?.tree_id().ok()?.detach();
    let paths = changed_paths(&repo)?;
    if paths.is_empty() {
        return Some(Changes::default());
    }
    let mut editor = repo.edit_tree(head_tree).ok()?;
    let (mut pipeline, index) = repo.filter_pipeline(None).ok()?;
    // Removals first (what is gone, and files that became directories), so that a path which
    // changed from a directory to a file is emptied before the file takes its place.
    let mut present = Vec::new();
    for rela in &paths {
        let on_disk = worktree.join(rela);
        match std::fs::symlink_metadata(&on_disk) {
            Ok(m) if !m.is_dir() => present.push((rela, on_disk, m)),
            // A file that became a directory: the files in it are listed on their own.
            Ok(_) => {
                editor.remove(rela.as_str()).ok()?;
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory) => {
                editor.remove(rela.as_str()).ok()?;
            }
            Err(_) => return None,
        }
    }
    for (rela, on_disk, meta) in present {
        let (kind, bytes) = if meta.file_type().is_symlink() {
            use std::os::unix::ffi::OsStrExt as _;
            let target = std::fs::read_link(&on_disk).ok()?;
            (gix::object::tree::EntryKind::Link, target.as_os_str().as_bytes().to_vec())
        } else if meta.is_file() {
            use std::os::unix::fs::PermissionsExt as _;
            let file = std::fs::File::open(&on_disk).ok()?;
            let mut bytes = Vec::new();
            let converted = pipeline.convert_to_git(file, Path::new(rela), &index).ok()?;
            use gix::filter::plumbing::pipeline::convert::ToGitOutcome;
            match converted {
                ToGitOutcome::Unchanged(mut r) => std::io::Read::read_to_end(&mut r, &mut bytes).ok()?,
                ToGitOutcome::Buffer(b) => {
                    bytes.extend_from_slice(b);
                    b.len()
                }
                ToGitOutcome::Process(mut r) => std::io::Read::read_to_end(&mut r, &mut bytes).ok()?,
            };
            let exec = meta.permissions().mode() & 0o111 != 0;
            let kind =
                if exec { gix::object::tree::EntryKind::BlobExecutable } else { gix::object::tree::EntryKind::Blob };
            (kind, bytes)
        } else {
            return None;
        };
        let id = repo.write_blob(&bytes).ok()?.detach();
        editor.upsert(rela.as_str(), kind, id).ok()?;
    }
    let tree = editor.write().ok()?.detach();
    if tree == head_tree {
        // Listed but nothing to commit: `git commit` refuses that, and says so.
        return None;
    }
    // The index first: a stop before `HEAD` moves leaves the change staged, and the `git`
    // commands (or a later collect) commit it.
    repo.index_from_tree(&tree).ok()?.write(Default::default()).ok()?;
    let me = gix::actor::Signature {
        name: author.name.as_str().into(),
        email: author.email.as_str().into(),
        time: gix::date::Time::now_local_or_utc(),
    };
    let mut time = gix::date::parse::TimeBuf::default();
    let sig = me.to_ref(&mut time);
    let commit = repo.commit_as(sig, sig, "HEAD", format!("{message}\n"), tree, [head]).ok()?.detach();
    Some(Changes { files: paths.into_iter().collect(), commit: Some(commit.to_string()) })
}
