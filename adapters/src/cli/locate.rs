//! Which workspace a command works on when `--dir` is not given: the nearest directory at or
//! above the current one that holds `.strata/`, as git finds `.git/`. `--dir` (or `STRATA_DIR`)
//! names the workspace outright and nothing is searched; `strata init` works where it is run.
//!
//! When no directory up to the root holds `.strata/`, the workspace is the current directory,
//! and a command that needs one says there is none (`STRATA-E0204`).

use std::path::{Path, PathBuf};

/// How many directories the search climbs at most (a path deeper than this is not searched to
/// its root).
pub const DISCOVERY_DEPTH_MAX: usize = 256;

/// The workspace root for a command: `explicit` when given; else, unless `here_only`, the
/// nearest of `cwd` and its ancestors holding a `.strata/` directory. A workspace found in `cwd`
/// itself is `.` (so paths print as they did before discovery), one found above is absolute.
pub fn workspace_root(explicit: Option<&Path>, cwd: Option<&Path>, here_only: bool) -> PathBuf {
    if let Some(dir) = explicit {
        return dir.to_owned();
    }
    let here = PathBuf::from(".");
    if here_only {
        return here;
    }
    let Some(cwd) = cwd else { return here };
    match cwd.ancestors().take(DISCOVERY_DEPTH_MAX).find(|d| d.join(".strata").is_dir()) {
        Some(found) if found == cwd => here,
        Some(found) => {
            tracing::debug!(workspace = %found.display(), from = %cwd.display(), "found the workspace above");
            found.to_owned()
        }
        None => {
            tracing::debug!(from = %cwd.display(), "no .strata/ here or above; using the current directory");
            here
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nearest_strata_directory_above_wins_and_dir_overrides_it() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let outer = tmp.path();
        let inner = outer.join("a");
        let deep = inner.join("b/c");
        std::fs::create_dir_all(&deep).expect("dirs");
        std::fs::create_dir_all(outer.join(".strata")).expect("outer");
        assert_eq!(workspace_root(None, Some(&deep), false), outer);
        std::fs::create_dir_all(inner.join(".strata")).expect("inner");
        assert_eq!(workspace_root(None, Some(&deep), false), inner, "the nearest one");
        assert_eq!(workspace_root(None, Some(&inner), false), Path::new("."), "found here is `.`");
        assert_eq!(workspace_root(Some(Path::new("/elsewhere")), Some(&deep), false), Path::new("/elsewhere"));
        assert_eq!(workspace_root(None, Some(&deep), true), Path::new("."), "init works where it is run");
    }

    #[test]
    fn no_workspace_anywhere_is_the_current_directory() {
        let tmp = tempfile::tempdir().expect("tempdir");
        // A temporary directory may sit under a directory holding `.strata/`; start from one
        // that cannot: the search stops at the first `.strata/` it meets, here or above.
        let found = workspace_root(None, Some(tmp.path()), false);
        assert!(found == Path::new(".") || tmp.path().starts_with(&found), "{found:?}");
    }
}
