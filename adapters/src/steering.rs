//! Finding and reading a repository's steering files (`AGENTS.md`, `CLAUDE.md`, Cursor rules,
//! Kiro steering) for `strata knowledge import`; what they become is the engine's
//! (`strata_engine::knowledge::steering`).
//!
//! Nothing here can hang or read outside the repository: directories are listed, never
//! followed through symbolic links; an entry's type comes from the listing
//! (`symlink_metadata`), so a FIFO, a device or a socket under a steering file's name is refused
//! without being opened; a symbolic link is read only when it resolves to a regular file inside
//! the repository; files are opened without blocking and read up to a bound
//! ([`crate::files::read_bounded`]). The walk skips `.git`, `.strata`, `node_modules`, `target`
//! and every other hidden directory except `.claude`, `.cursor` and `.kiro`, and has bounds on its
//! depth and entries.

use std::path::{Path, PathBuf};

use strata_engine::knowledge::steering::{FILE_BYTES_MAX, FILES_MAX, SteeringFile, classify};

use crate::files::{self, InputError};

/// Entries listed in one walk, at every depth.
pub const WALK_ENTRIES_MAX: usize = 200_000;
/// Directories below the root a walk descends.
pub const WALK_DEPTH_MAX: usize = 32;

/// Why a repository's steering files could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SteeringError {
    /// The root is not a directory.
    #[error("[STRATA-E2650] knowledge import --root {0}: not a directory; give the repository's root directory")]
    NotADirectory(PathBuf),
    /// A steering file's name on something that is not a regular file.
    #[error(
        "[STRATA-E2651] knowledge import: {path} is a {kind}, not a regular file; steering files must be regular files (remove or rename it), nothing was imported"
    )]
    NotRegular {
        /// The entry.
        path: PathBuf,
        /// What it is.
        kind: &'static str,
    },
    /// A symbolic link under a steering file's name that leaves the repository.
    #[error(
        "[STRATA-E2652] knowledge import: {path} is a symbolic link to {target}, outside the repository {root}; import reads only files inside it (copy the file in, or remove the link), nothing was imported"
    )]
    LinkOutside {
        /// The link.
        path: PathBuf,
        /// Where it leads (or why it leads nowhere).
        target: String,
        /// The repository root.
        root: PathBuf,
    },
    /// A steering file that is not UTF-8.
    #[error("[STRATA-E2653] knowledge import: {0} is not UTF-8 text; save it as UTF-8, nothing was imported")]
    NotText(PathBuf),
    /// The walk met more than its bounds.
    #[error(
        "[STRATA-E2654] knowledge import --root {root}: {what}; give a smaller directory with --root, nothing was imported"
    )]
    TooLarge {
        /// The root.
        root: PathBuf,
        /// Which bound, in words.
        what: String,
    },
    /// A directory or file could not be read.
    #[error(transparent)]
    Input(#[from] InputError),
}

/// Whether the walk descends into the directory `name`.
fn descend(name: &str) -> bool {
    match name {
        ".claude" | ".cursor" | ".kiro" => true,
        "node_modules" | "target" => false,
        n => !n.starts_with('.'),
    }
}

/// The steering files under `root`, by repository-relative path.
pub fn read(root: &Path) -> Result<Vec<SteeringFile>, SteeringError> {
    if !std::fs::metadata(root).is_ok_and(|m| m.is_dir()) {
        return Err(SteeringError::NotADirectory(root.to_owned()));
    }
    let real_root = std::fs::canonicalize(root).map_err(|_| SteeringError::NotADirectory(root.to_owned()))?;
    let mut found: Vec<(String, PathBuf)> = Vec::new();
    let mut pending: Vec<(PathBuf, String, usize)> = vec![(root.to_owned(), String::new(), 0)];
    let mut listed = 0usize;
    let too_large = |what: String| SteeringError::TooLarge { root: root.to_owned(), what };
    while let Some((dir, rel, depth)) = pending.pop() {
        let unreadable = |e: std::io::Error| InputError::Unreadable {
            what: "knowledge import".into(),
            path: dir.clone(),
            reason: format!("the directory cannot be listed: {e}"),
        };
        let mut entries = Vec::new();
        for entry in std::fs::read_dir(&dir).map_err(unreadable)? {
            let entry = entry.map_err(unreadable)?;
            listed += 1;
            if listed > WALK_ENTRIES_MAX {
                return Err(too_large(format!("more than {WALK_ENTRIES_MAX} entries under it")));
            }
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else { continue };
            // The type of the entry itself, a symbolic link not followed.
            entries.push((name, entry.path(), entry.file_type().map_err(unreadable)?));
        }
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, path, t) in entries {
            let rel_path = if rel.is_empty() { name.clone() } else { format!("{rel}/{name}") };
            if t.is_dir() {
                if descend(&name) {
                    if depth >= WALK_DEPTH_MAX {
                        return Err(too_large(format!("{rel_path} is more than {WALK_DEPTH_MAX} directories deep")));
                    }
                    pending.push((path, rel_path, depth + 1));
                }
                continue;
            }
            if classify(&rel_path).is_none() {
                continue;
            }
            if t.is_symlink() {
                match std::fs::canonicalize(&path) {
                    Ok(target) if target.starts_with(&real_root) => {}
                    Ok(target) => {
                        return Err(SteeringError::LinkOutside {
                            path,
                            target: target.display().to_string(),
                            root: root.to_owned(),
                        });
                    }
                    Err(e) => {
                        return Err(SteeringError::LinkOutside {
                            path: path.clone(),
                            target: files::open_failure(&path, &e),
                            root: root.to_owned(),
                        });
                    }
                }
                // `metadata` follows the link without opening anything.
                let m = std::fs::metadata(&path).map_err(|e| InputError::Unreadable {
                    what: "knowledge import".into(),
                    path: path.clone(),
                    reason: files::open_failure(&path, &e),
                })?;
                if !m.is_file() {
                    return Err(SteeringError::NotRegular { path, kind: files::kind_name(m.file_type()) });
                }
            } else if !t.is_file() {
                return Err(SteeringError::NotRegular { path, kind: files::kind_name(t) });
            }
            found.push((rel_path, path));
            if found.len() > FILES_MAX {
                return Err(too_large(format!("more than {FILES_MAX} steering files")));
            }
        }
    }
    found.sort();
    let mut out = Vec::with_capacity(found.len());
    for (rel, path) in found {
        let bytes = files::read_bounded(&path, FILE_BYTES_MAX as u64, "steering file")?;
        let text = String::from_utf8(bytes).map_err(|_| SteeringError::NotText(path.clone()))?;
        out.push(SteeringFile { path: rel, text });
    }
    Ok(out)
}
