//! Symbolic links of a real workspace, discovered at the edge and handed to the decision as link
//! facts ([`super::paths::Workspace::links`]), so that routing stays a pure function of recorded
//! facts while seeing what the file system holds.
//!
//! The engine reads no file system: the adapter answers a [`Probe`] (what is at one
//! workspace-relative path, without following a final link and without opening anything), and
//! [`discover`] walks each owned path through it, component by component, following the links it
//! meets as the operating system would. A probe that cannot answer (permissions, an I/O error, a
//! target that is not UTF-8) makes the discovery refuse: a guard that cannot decide denies.

use std::collections::BTreeMap;

use super::error::{CeError, Code, fail};
use super::paths::{self, LINK_HOPS_MAX};

/// Most probes one discovery may make (paths share prefixes, and each is probed once).
pub const LINK_PROBES_MAX: usize = 100_000;

/// Where a symbolic link points.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// A relative target as written, relative to the directory holding the link.
    Relative(String),
    /// An absolute target inside the workspace, given relative to the workspace root.
    FromRoot(String),
    /// An absolute target outside the workspace.
    Outside,
}

/// What is at one workspace path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    /// Nothing (or a component on the way is not a directory): the rest of the path is new.
    Absent,
    /// A directory.
    Dir,
    /// Something else that is not a link (a file, a FIFO, a socket): nothing lies under it.
    Other,
    /// A symbolic link.
    Link(Target),
}

/// The adapter's view of the workspace file system.
pub trait Probe {
    /// What is at `path` (workspace-relative, `/`-separated, never empty), the final component
    /// not followed; `Err` with the reason when that cannot be told.
    fn entry(&mut self, path: &str) -> Result<Entry, String>;
}

/// The links met along each of `raw_paths` (owned paths as a request gives them), as link facts:
/// link path → target relative to the root (`.` for the root itself), or `None` for a link that
/// leaves the workspace. A path that is not lexically valid is skipped (the decision refuses it).
/// Refused with `INVALID_OWNERSHIP_PATH`: a probe that cannot answer, more than
/// [`LINK_HOPS_MAX`] links along one path (a loop), more than [`LINK_PROBES_MAX`] probes.
pub fn discover(raw_paths: &[&str], probe: &mut dyn Probe) -> Result<BTreeMap<String, Option<String>>, CeError> {
    let mut seen: BTreeMap<String, Entry> = BTreeMap::new();
    let mut links = BTreeMap::new();
    for raw in raw_paths {
        let Ok(lexical) = paths::lexical(raw, "") else { continue };
        let mut segs: Vec<String> = lexical.split('/').filter(|s| !s.is_empty()).map(str::to_owned).collect();
        let (mut i, mut hops) = (1, 0);
        while i <= segs.len() {
            let prefix = segs[..i].join("/");
            let entry = match seen.get(&prefix) {
                Some(e) => e.clone(),
                None => {
                    if seen.len() >= LINK_PROBES_MAX {
                        return fail(Code::InvalidOwnershipPath, "workspace_root: too many paths to look up");
                    }
                    let e = probe.entry(&prefix).map_err(|why| {
                        CeError::new(
                            Code::InvalidOwnershipPath,
                            format!("workspace_root: cannot tell what {prefix} is ({why})"),
                        )
                    })?;
                    seen.insert(prefix.clone(), e.clone());
                    e
                }
            };
            match entry {
                Entry::Absent | Entry::Other => break,
                Entry::Dir => i += 1,
                Entry::Link(target) => {
                    hops += 1;
                    if hops > LINK_HOPS_MAX {
                        return fail(
                            Code::InvalidOwnershipPath,
                            format!("workspace_root: more than {LINK_HOPS_MAX} links along one path (a loop?)"),
                        );
                    }
                    let resolved = match &target {
                        Target::Relative(t) => resolve(&segs[..i - 1], t),
                        Target::FromRoot(t) => resolve(&[], t),
                        Target::Outside => None,
                    };
                    links.insert(
                        prefix,
                        resolved.as_ref().map(|r| if r.is_empty() { ".".to_owned() } else { r.join("/") }),
                    );
                    let Some(mut next) = resolved else { break };
                    next.extend(segs.drain(i..));
                    segs = next;
                    i = 1;
                }
            }
        }
    }
    Ok(links)
}

/// `target` taken from the directory `base` (segments under the root), `..` and `.` applied;
/// `None` when it climbs above the root.
fn resolve(base: &[String], target: &str) -> Option<Vec<String>> {
    let mut out = base.to_vec();
    for seg in target.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                out.pop()?;
            }
            s => out.push(s.to_owned()),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file system as a table: path → entry; anything missing is absent.
    struct Table(BTreeMap<&'static str, Result<Entry, String>>, usize);

    impl Probe for Table {
        fn entry(&mut self, path: &str) -> Result<Entry, String> {
            self.1 += 1;
            self.0.get(path).cloned().unwrap_or(Ok(Entry::Absent))
        }
    }

    fn rel(t: &str) -> Result<Entry, String> {
        Ok(Entry::Link(Target::Relative(t.to_owned())))
    }

    #[test]
    fn links_along_a_path_are_followed_as_the_system_would() {
        let mut fs = Table(
            BTreeMap::from([
                ("vendor", Ok(Entry::Dir)),
                ("vendor/lib", rel("../third_party/lib")),
                ("third_party", Ok(Entry::Dir)),
                ("third_party/lib", Ok(Entry::Dir)),
                ("third_party/lib/x.rs", rel("y.rs")),
                ("up", rel("../../etc")),
                ("abs", Ok(Entry::Link(Target::FromRoot("third_party/../vendor".to_owned())))),
                ("gone", Ok(Entry::Link(Target::Outside))),
                ("self", rel(".")),
                ("pipe", Ok(Entry::Other)),
            ]),
            0,
        );
        let found =
            discover(&["vendor/lib/x.rs", "up/x", "abs/lib", "gone/x", "self/pipe/x", "/bad", "vendor/lib"], &mut fs)
                .unwrap();
        let want: BTreeMap<String, Option<String>> = [
            ("vendor/lib", Some("third_party/lib")),
            ("third_party/lib/x.rs", Some("third_party/lib/y.rs")),
            ("up", None),
            ("abs", Some("vendor")),
            ("gone", None),
            ("self", Some(".")),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.map(str::to_owned)))
        .collect();
        assert_eq!(found, want);
        // Each path is probed once, however many owned paths pass through it.
        let probes = fs.1;
        assert!(probes <= 12, "{probes} probes");
        // The facts resolve the owned paths as the file system does.
        let mut ws = paths::Workspace::default();
        for (l, t) in &found {
            let (k, v) = paths::link_fact(&ws, l, t.as_deref()).unwrap();
            ws.links.insert(k, v);
        }
        assert_eq!(paths::canonical(&ws, "vendor/lib/x.rs", "p").unwrap(), "third_party/lib/y.rs");
        assert_eq!(paths::canonical(&ws, "gone/x", "p").map_err(|e| e.code), Err(Code::InvalidOwnershipPath));
    }

    #[test]
    fn a_probe_that_cannot_answer_or_a_loop_denies() {
        let mut fs = Table(BTreeMap::from([("locked", Err("permission denied".to_owned()))]), 0);
        assert_eq!(discover(&["locked/x"], &mut fs).map_err(|e| e.code), Err(Code::InvalidOwnershipPath));
        let mut fs = Table(BTreeMap::from([("a", rel("b")), ("b", rel("a"))]), 0);
        assert_eq!(discover(&["a/x"], &mut fs).map_err(|e| e.code), Err(Code::InvalidOwnershipPath));
    }
}
