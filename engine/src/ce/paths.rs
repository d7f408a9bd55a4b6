//! Writer-ownership paths: canonical, repository-relative, compared by alias and containment.
//!
//! The reference runtime canonicalises against the live filesystem (cwd, realpath, existence),
//! so the same request can route differently on two machines or at two times. strata uses a
//! deterministic model instead: a path is normalised lexically, symbolic links are facts
//! ([`Workspace::links`]: stated by a request or discovered at the edge, [`super::links`];
//! recorded as events when a journal is used), and case folding is a property of the workspace,
//! not of the host. Nothing here reads the filesystem.

use std::collections::BTreeMap;

use unicode_normalization::UnicodeNormalization as _;

use super::error::{CeError, Code, fail};

/// Most link substitutions while resolving one path (Linux's `SYMLOOP_MAX` is 40).
pub const LINK_HOPS_MAX: usize = 40;
/// Most link facts one workspace may hold.
pub const LINKS_MAX: usize = 10_000;
/// Longest ownership path, in bytes.
pub const PATH_BYTES_MAX: usize = 4096;

/// What is known about the workspace the paths live in.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Workspace {
    /// Compare paths case-sensitively. Off by default, as in the reference: a false conflict
    /// only serialises work, a missed one (on a case-insensitive filesystem) corrupts it.
    pub case_sensitive: bool,
    /// Symbolic links: canonical link path → canonical target, or `None` for a link that
    /// leaves the workspace (a path through it is refused).
    pub links: BTreeMap<String, Option<String>>,
}

/// `raw` in canonical form: NFKC, `/` separators, no empty or `.` segments, links resolved,
/// case-folded unless the workspace is case-sensitive. The workspace root is the empty string.
/// Refused with `INVALID_OWNERSHIP_PATH`: empty, surrounding whitespace, control characters,
/// `:` anywhere (drive letters, URI schemes, NTFS streams), absolute, `..`, a link loop or a link
/// out of the workspace.
pub fn canonical(ws: &Workspace, raw: &str, field: &str) -> Result<String, CeError> {
    let mut path = lexical(raw, field)?;
    if !ws.links.is_empty() {
        let segments = path.split('/').filter(|s| !s.is_empty()).map(str::to_owned).collect();
        path = resolve_links(ws, segments, field)?.join("/");
    }
    Ok(if ws.case_sensitive { path } else { fold_owned(path) })
}

/// Lexical checks and normalisation, without links or case folding: the segments joined by `/`
/// (the root is the empty string).
pub fn lexical(raw: &str, field: &str) -> Result<String, CeError> {
    let bad = |why: &str| CeError::new(Code::InvalidOwnershipPath, format!("{field}: {why}"));
    if raw.is_empty() {
        return Err(bad("empty path"));
    }
    if raw.len() > PATH_BYTES_MAX {
        return Err(bad("longer than 4096 bytes"));
    }
    if raw.trim() != raw {
        return Err(bad("leading or trailing whitespace"));
    }
    // ASCII is already NFKC: skip the normaliser for the common case.
    let normal: std::borrow::Cow<'_, str> =
        if raw.is_ascii() { raw.into() } else { raw.nfkc().collect::<String>().into() };
    let mut out = String::with_capacity(normal.len());
    for (i, seg) in normal.split(['/', '\\']).enumerate() {
        if seg.chars().any(|c| c.is_control()) {
            return Err(bad("control character"));
        }
        if seg.contains(':') {
            return Err(bad("':' (drive letter, URI scheme or alternate stream)"));
        }
        match seg {
            "" if i == 0 => return Err(bad("absolute path; give it relative to the repository root")),
            "" | "." => {}
            ".." => return Err(bad("'..' segment")),
            s => {
                if !out.is_empty() {
                    out.push('/');
                }
                out.push_str(s);
            }
        }
    }
    Ok(out)
}

fn resolve_links(ws: &Workspace, mut segs: Vec<String>, field: &str) -> Result<Vec<String>, CeError> {
    if ws.links.is_empty() {
        return Ok(segs);
    }
    for _ in 0..LINK_HOPS_MAX {
        // The longest prefix that is a link.
        let hit = (1..=segs.len()).rev().find_map(|n| {
            let prefix = fold(ws, &segs[..n].join("/"));
            ws.links.get(&prefix).map(|target| (n, target))
        });
        let Some((n, target)) = hit else { return Ok(segs) };
        let Some(target) = target else {
            return fail(
                Code::InvalidOwnershipPath,
                format!("{field}: passes through a link that leaves the workspace"),
            );
        };
        let mut next: Vec<String> = target.split('/').filter(|s| !s.is_empty()).map(str::to_owned).collect();
        next.extend(segs.drain(n..));
        segs = next;
    }
    fail(Code::InvalidOwnershipPath, format!("{field}: more than {LINK_HOPS_MAX} link hops (a loop?)"))
}

fn fold(ws: &Workspace, p: &str) -> String {
    if ws.case_sensitive { p.to_owned() } else { fold_owned(p.to_owned()) }
}

fn fold_owned(mut p: String) -> String {
    if p.is_ascii() {
        p.make_ascii_lowercase();
        p
    } else {
        p.to_lowercase()
    }
}

/// Two canonical paths overlap when they are equal or one contains the other.
pub fn overlaps(a: &str, b: &str) -> bool {
    contains(a, b) || contains(b, a)
}

/// Whether canonical path `inner` is `outer` or lies under it (the root, `""`, holds every path).
pub fn contains(outer: &str, inner: &str) -> bool {
    outer.is_empty() || inner == outer || (inner.starts_with(outer) && inner.as_bytes().get(outer.len()) == Some(&b'/'))
}

/// A link fact checked for recording: both sides lexically valid, the target `None` when the
/// link leaves the workspace. Keys and targets are stored case-folded unless case-sensitive.
pub fn link_fact(ws: &Workspace, link: &str, target: Option<&str>) -> Result<(String, Option<String>), CeError> {
    let l = lexical(link, "link")?;
    if l.is_empty() {
        return fail(Code::InvalidOwnershipPath, "link: the workspace root cannot be a link");
    }
    let t = target.map(|t| lexical(t, "link target").map(|s| fold(ws, &s))).transpose()?;
    Ok((fold(ws, &l), t))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(ws: &Workspace, p: &str) -> Result<String, Code> {
        canonical(ws, p, "p").map_err(|e| e.code)
    }

    #[test]
    fn lexical_normalisation_and_refusals() {
        let ws = Workspace::default();
        assert_eq!(c(&ws, "src\\Lib.rs").unwrap(), "src/lib.rs");
        assert_eq!(c(&ws, "./src//a/./b/").unwrap(), "src/a/b");
        assert_eq!(c(&ws, "ﬁle.rs").unwrap(), "file.rs", "NFKC folds the ligature");
        assert_eq!(c(&ws, ".").unwrap(), "", "the root");
        for bad in [
            "",
            " a",
            "a ",
            "/etc/passwd",
            "C:/x",
            "c:\\x",
            "https://x/y",
            "a/../b",
            "..",
            "a\u{0}b",
            "a\u{7f}",
            "a/b:c",
        ] {
            assert_eq!(c(&ws, bad), Err(Code::InvalidOwnershipPath), "{bad:?}");
        }
        let sensitive = Workspace { case_sensitive: true, ..Workspace::default() };
        assert_eq!(c(&sensitive, "Src/A.rs").unwrap(), "Src/A.rs");
    }

    #[test]
    fn links_resolve_by_longest_prefix_and_escapes_loops_are_refused() {
        let mut ws = Workspace::default();
        for (l, t) in [
            ("vendor/lib", Some("third_party/lib")),
            ("out", None),
            ("loop/a", Some("loop/b")),
            ("loop/b", Some("loop/a")),
        ] {
            let (k, v) = link_fact(&ws, l, t).unwrap();
            ws.links.insert(k, v);
        }
        assert_eq!(c(&ws, "Vendor/Lib/x.rs").unwrap(), "third_party/lib/x.rs");
        assert_eq!(c(&ws, "vendor/other").unwrap(), "vendor/other");
        assert_eq!(c(&ws, "out/x"), Err(Code::InvalidOwnershipPath));
        assert_eq!(c(&ws, "loop/a/x"), Err(Code::InvalidOwnershipPath));
    }

    #[test]
    fn overlap_is_equality_or_containment_on_segment_boundaries() {
        assert!(overlaps("src", "src/a.rs"));
        assert!(overlaps("src/a.rs", "src"));
        assert!(overlaps("src/a.rs", "src/a.rs"));
        assert!(!overlaps("src/a", "src/ab"));
        assert!(!overlaps("src/a.rs", "src/b.rs"));
        assert!(overlaps("", "anything"));
    }
}
