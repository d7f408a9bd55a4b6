//! Reading files a user names, with a bound on the bytes actually read.
//!
//! Why this exists: a limit checked against a file's metadata size does not hold for a FIFO, a
//! device or a file that grows while it is read (`/dev/zero` reports size 0 and never ends), and
//! opening a FIFO for reading blocks until a writer comes. Every file input goes through
//! [`read_bounded`]: the file is opened without blocking, must be a regular file (checked on the
//! open handle, so a path swapped after a check is still caught), and at most `max_bytes` are
//! read; one byte more is a refusal, never a truncation.
//!
//! A directory given as input is listed with [`scan_dir`], which opens nothing but directories:
//! each entry's type comes from the listing itself (symbolic links not followed), so a FIFO, a
//! device or a socket met while scanning is refused without blocking, and the scan has a bound
//! on its entries and its depth.

use std::io::Read as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

/// Why a file input was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InputError {
    /// A FIFO, device, socket or directory where a regular file was expected.
    #[error(
        "[STRATA-E1901] {what} {path}: is a {kind}, not a regular file; strata reads only regular files (give the path of a file)"
    )]
    NotRegular {
        /// What the file was for (`intake file`, `--pubkey`, …).
        what: String,
        /// The path given.
        path: PathBuf,
        /// What it is instead.
        kind: &'static str,
    },
    /// More bytes than the input's limit.
    #[error("[STRATA-E1902] {what} {path}: more than {max_bytes} bytes; this input is at most {max_bytes} bytes")]
    TooLarge {
        /// What the file was for.
        what: String,
        /// The path given.
        path: PathBuf,
        /// The limit.
        max_bytes: u64,
    },
    /// Missing, a dangling or looping symbolic link, or unreadable.
    #[error("[STRATA-E1903] {what} {path}: {reason}")]
    Unreadable {
        /// What the file was for.
        what: String,
        /// The path given.
        path: PathBuf,
        /// The cause, with what to do.
        reason: String,
    },
    /// A FIFO, device or socket met while scanning a directory given as input.
    #[error(
        "[STRATA-E1904] {what} {dir}: {path} is a {kind}; a directory given as input may hold only regular files, directories and hidden entries (remove it, or name the files one by one)"
    )]
    SpecialInScan {
        /// What the directory was for.
        what: String,
        /// The directory given.
        dir: PathBuf,
        /// The entry met.
        path: PathBuf,
        /// What it is.
        kind: &'static str,
    },
    /// A directory scan listed more entries than its bound.
    #[error(
        "[STRATA-E1905] {what} {dir}: more than {entries_max} entries under it (hidden ones included); give a smaller directory, or its parts one by one"
    )]
    ScanTooLarge {
        /// What the directory was for.
        what: String,
        /// The directory given.
        dir: PathBuf,
        /// The bound.
        entries_max: usize,
    },
    /// A directory scan went deeper than its bound.
    #[error(
        "[STRATA-E1906] {what} {dir}: {path} is more than {depth_max} directories deep; give the deeper directory on its own"
    )]
    ScanTooDeep {
        /// What the directory was for.
        what: String,
        /// The directory given.
        dir: PathBuf,
        /// The directory past the bound.
        path: PathBuf,
        /// The bound.
        depth_max: usize,
    },
}

/// What kind of file `t` is, in words.
pub fn kind_name(t: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt as _;
    if t.is_dir() {
        "directory"
    } else if t.is_fifo() {
        "FIFO (named pipe)"
    } else if t.is_char_device() {
        "character device"
    } else if t.is_block_device() {
        "block device"
    } else if t.is_socket() {
        "socket"
    } else if t.is_symlink() {
        "symbolic link"
    } else {
        "special file"
    }
}

/// Why opening `path` failed, in words that say what to do.
pub fn open_failure(path: &Path, e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ELOOP) => "a symbolic link loop; point the link at a real file".to_owned(),
        _ if e.kind() == std::io::ErrorKind::NotFound => {
            if std::fs::symlink_metadata(path).is_ok() {
                "a symbolic link to a file that does not exist; fix or remove the link".to_owned()
            } else {
                "no such file; check the path".to_owned()
            }
        }
        _ => format!("cannot be read: {e}"),
    }
}

/// Reads the regular file at `path`, at most `max_bytes` of it; `what` names the input in errors.
pub fn read_bounded(path: &Path, max_bytes: u64, what: &str) -> Result<Vec<u8>, InputError> {
    let bytes = read_prefix(path, max_bytes.saturating_add(1), what)?;
    if bytes.len() as u64 > max_bytes {
        return Err(InputError::TooLarge { what: what.to_owned(), path: path.to_owned(), max_bytes });
    }
    Ok(bytes)
}

/// The first `prefix_bytes` of the regular file at `path` (all of it when shorter), for a caller
/// that reports an oversize file itself; checked and opened as [`read_bounded`] does.
pub fn read_prefix(path: &Path, prefix_bytes: u64, what: &str) -> Result<Vec<u8>, InputError> {
    let unreadable = |reason: String| InputError::Unreadable { what: what.to_owned(), path: path.to_owned(), reason };
    // O_NONBLOCK: opening a FIFO for reading does not wait for a writer; it is refused below.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| unreadable(open_failure(path, &e)))?;
    let meta = file.metadata().map_err(|e| unreadable(format!("cannot be read: {e}")))?;
    if !meta.is_file() {
        return Err(InputError::NotRegular {
            what: what.to_owned(),
            path: path.to_owned(),
            kind: kind_name(meta.file_type()),
        });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len().min(prefix_bytes)).unwrap_or(0));
    file.take(prefix_bytes).read_to_end(&mut bytes).map_err(|e| unreadable(format!("cannot be read: {e}")))?;
    Ok(bytes)
}

/// [`read_bounded`], as UTF-8 text.
pub fn read_text_bounded(path: &Path, max_bytes: u64, what: &str) -> Result<String, InputError> {
    let bytes = read_bounded(path, max_bytes, what)?;
    String::from_utf8(bytes).map_err(|_| InputError::Unreadable {
        what: what.to_owned(),
        path: path.to_owned(),
        reason: "is not UTF-8 text; give a UTF-8 file".to_owned(),
    })
}

/// Most symbolic links followed while resolving one path (Linux's own limit is 40).
pub const LINKS_FOLLOWED_MAX: usize = 40;

/// The path an access to `path` (absolute) would really reach, as the file system resolves it:
/// every existing component that is a symbolic link is replaced by its target (a dangling link
/// too, since a write through it creates the target), `..` steps back from the resolved
/// directory (and what follows it is probed again), and components under one that does not exist
/// yet are kept as written. An error (a loop, a
/// component that cannot be read) means the path cannot be placed; callers deny.
pub fn resolve_links(path: &Path) -> Result<PathBuf, String> {
    use std::ffi::OsString;
    use std::path::Component;
    if !path.is_absolute() {
        return Err(format!("{} is not absolute", path.display()));
    }
    // Components still to walk, the next one last.
    let mut rest: Vec<OsString> = path.components().rev().filter_map(|c| normal_or_parent(&c)).collect();
    let mut out = PathBuf::from("/");
    let mut followed = 0;
    let mut exists = true;
    while let Some(c) = rest.pop() {
        if c == ".." {
            // Tools normalise `a/../b` before they write, so what follows is probed again.
            out.pop();
            exists = true;
            continue;
        }
        let next = out.join(&c);
        if !exists {
            out = next;
            continue;
        }
        match std::fs::symlink_metadata(&next) {
            Ok(m) if m.file_type().is_symlink() => {
                followed += 1;
                if followed > LINKS_FOLLOWED_MAX {
                    return Err(format!(
                        "more than {LINKS_FOLLOWED_MAX} symbolic links (a loop?) under {}",
                        path.display()
                    ));
                }
                let target =
                    std::fs::read_link(&next).map_err(|e| format!("cannot read the link {}: {e}", next.display()))?;
                if target.is_absolute() {
                    out = PathBuf::from("/");
                }
                rest.extend(target.components().rev().filter_map(|c| normal_or_parent(&c)));
            }
            Ok(_) => out = next,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                exists = false;
                out = next;
            }
            Err(e) => return Err(format!("cannot inspect {}: {e}", next.display())),
        }
    }
    return Ok(out);

    fn normal_or_parent(c: &Component<'_>) -> Option<OsString> {
        match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        }
    }
}

/// Bounds on one [`scan_dir`].
#[derive(Clone, Copy, Debug)]
pub struct ScanLimits {
    /// Entries listed, at every depth, hidden ones and directories included.
    pub entries_max: usize,
    /// Directories below the one given.
    pub depth_max: usize,
}

/// The files under the directory `dir`, recursively, sorted by path; entries whose name starts
/// with `.` are skipped (and not descended into). Only directories are opened: every entry's type
/// comes from the listing, without following symbolic links, so a FIFO, device or socket is
/// refused (E1904) without being opened, and a symbolic link is returned as a file for
/// [`read_bounded`] to follow (which refuses what is not a regular file, without blocking).
pub fn scan_dir(dir: &Path, limits: ScanLimits, what: &str) -> Result<Vec<PathBuf>, InputError> {
    let mut out = Vec::new();
    scan_counted(dir, limits, what, &mut 0, &mut out)?;
    out.sort();
    Ok(out)
}

/// [`scan_dir`] into `out`, counting listed entries in `listed` (shared by several scans).
fn scan_counted(
    dir: &Path,
    limits: ScanLimits,
    what: &str,
    listed: &mut usize,
    out: &mut Vec<PathBuf>,
) -> Result<(), InputError> {
    let mut pending = vec![(dir.to_owned(), 0usize)];
    while let Some((d, depth)) = pending.pop() {
        let unreadable = |e: std::io::Error| InputError::Unreadable {
            what: what.to_owned(),
            path: d.clone(),
            reason: format!("the directory cannot be listed: {e}"),
        };
        let mut entries = Vec::new();
        for entry in std::fs::read_dir(&d).map_err(unreadable)? {
            let entry = entry.map_err(unreadable)?;
            *listed += 1;
            if *listed > limits.entries_max {
                return Err(InputError::ScanTooLarge {
                    what: what.to_owned(),
                    dir: dir.to_owned(),
                    entries_max: limits.entries_max,
                });
            }
            if !entry.file_name().as_encoded_bytes().starts_with(b".") {
                entries.push((entry.path(), entry.file_type().map_err(unreadable)?));
            }
        }
        // In name order, so the same tree always meets its first problem at the same entry.
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        let mut children = Vec::new();
        for (path, t) in entries {
            if t.is_dir() {
                if depth >= limits.depth_max {
                    return Err(InputError::ScanTooDeep {
                        what: what.to_owned(),
                        dir: dir.to_owned(),
                        path,
                        depth_max: limits.depth_max,
                    });
                }
                children.push(path);
            } else if t.is_file() || t.is_symlink() {
                out.push(path);
            } else {
                return Err(InputError::SpecialInScan {
                    what: what.to_owned(),
                    dir: dir.to_owned(),
                    path,
                    kind: kind_name(t),
                });
            }
        }
        pending.extend(children.into_iter().rev().map(|c| (c, depth + 1)));
    }
    Ok(())
}

/// The files `paths` name: a directory (a symbolic link to one included) stands for the files
/// [`scan_dir`] finds under it, anything else for itself (to be read with [`read_bounded`], which
/// reports what is missing or not a regular file). Sorted, without duplicates; the scans share
/// one bound on entries.
pub fn input_files(paths: &[PathBuf], limits: ScanLimits, what: &str) -> Result<Vec<PathBuf>, InputError> {
    let mut files = Vec::new();
    let mut listed = 0;
    for p in paths {
        // `metadata` follows links without opening anything, so it cannot block on a FIFO.
        if std::fs::metadata(p).is_ok_and(|m| m.is_dir()) {
            scan_counted(p, limits, what, &mut listed, &mut files)?;
        } else {
            files.push(p.clone());
        }
    }
    files.sort();
    files.dedup();
    Ok(files)
}

/// Writes `bytes` to `path` whole, by a sibling temporary file renamed over it: whatever was at
/// `path` (a file, a FIFO, a device node, a link) is replaced without being opened, so an odd
/// file there can neither block the write nor receive it, and a reader never sees half a file.
pub fn write_replacing(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    // A stale temporary (of a crashed run) is removed, never opened.
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp)?;
    f.write_all(bytes)?;
    drop(f);
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_what_is_not_a_regular_file_and_reads_no_more_than_the_bound() {
        let dir = tempfile::tempdir().expect("tempdir");
        let zero = read_bounded(Path::new("/dev/zero"), 1024, "test input");
        assert!(matches!(zero, Err(InputError::NotRegular { kind: "character device", .. })), "{zero:?}");
        let d = read_bounded(dir.path(), 1024, "test input");
        assert!(matches!(d, Err(InputError::NotRegular { kind: "directory", .. })), "{d:?}");
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
        assert!(made.success());
        let p = read_bounded(&fifo, 1024, "test input");
        assert!(matches!(p, Err(InputError::NotRegular { kind: "FIFO (named pipe)", .. })), "{p:?}");
        let f = dir.path().join("f");
        std::fs::write(&f, b"12345").expect("write");
        assert_eq!(read_bounded(&f, 5, "test input").expect("fits"), b"12345");
        let over = read_bounded(&f, 4, "test input");
        assert!(matches!(over, Err(InputError::TooLarge { max_bytes: 4, .. })), "{over:?}");
        let dangling = dir.path().join("dangling");
        std::os::unix::fs::symlink(dir.path().join("nowhere"), &dangling).expect("link");
        let e = read_bounded(&dangling, 4, "test input").expect_err("dangling").to_string();
        assert!(e.contains("E1903") && e.contains("does not exist"), "{e}");
        let a = dir.path().join("a");
        let b = dir.path().join("b");
        std::os::unix::fs::symlink(&b, &a).expect("link");
        std::os::unix::fs::symlink(&a, &b).expect("link");
        let e = read_bounded(&a, 4, "test input").expect_err("loop").to_string();
        assert!(e.contains("E1903") && e.contains("loop"), "{e}");
    }

    #[test]
    fn links_resolve_as_the_file_system_would() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = std::fs::canonicalize(dir.path()).expect("canonical");
        let outside = root.join("outside");
        std::fs::create_dir(&outside).expect("outside");
        let work = root.join("work");
        std::fs::create_dir(&work).expect("work");
        std::os::unix::fs::symlink(&outside, work.join("out")).expect("link");
        std::os::unix::fs::symlink(outside.join("new.txt"), work.join("dangling")).expect("link");
        std::os::unix::fs::symlink("../outside", work.join("relative")).expect("link");
        let r = |p: PathBuf| resolve_links(&p).expect("resolves");
        assert_eq!(r(work.join("out/a/b.txt")), outside.join("a/b.txt"), "through a link to a directory");
        assert_eq!(r(work.join("dangling")), outside.join("new.txt"), "a dangling link is followed");
        assert_eq!(r(work.join("relative/x")), outside.join("x"), "a relative link");
        assert_eq!(r(work.join("plain/../y")), work.join("y"), "components that do not exist stay as written");
        assert_eq!(r(work.join("out/../z")), root.join("z"), ".. steps back from the link's target");
        std::os::unix::fs::symlink(work.join("loop2"), work.join("loop1")).expect("link");
        std::os::unix::fs::symlink(work.join("loop1"), work.join("loop2")).expect("link");
        assert!(resolve_links(&work.join("loop1/f")).is_err());
    }

    #[test]
    fn a_scan_refuses_special_files_without_opening_them_and_holds_its_bounds() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        std::fs::create_dir_all(root.join("a/b")).expect("dirs");
        std::fs::write(root.join("a/one.md"), b"1").expect("write");
        std::fs::write(root.join("a/b/two.md"), b"2").expect("write");
        std::fs::write(root.join(".hidden"), b"h").expect("write");
        std::os::unix::fs::symlink("/dev/zero", root.join("link.md")).expect("link");
        let wide = ScanLimits { entries_max: 100, depth_max: 8 };
        let found = scan_dir(root, wide, "test scan").expect("scan");
        assert_eq!(found, vec![root.join("a/b/two.md"), root.join("a/one.md"), root.join("link.md")]);
        // Entries are counted as listed, hidden ones and directories included: six here.
        let e = scan_dir(root, ScanLimits { entries_max: 5, depth_max: 8 }, "test scan").expect_err("entries");
        assert!(matches!(e, InputError::ScanTooLarge { entries_max: 5, .. }), "{e:?}");
        assert!(scan_dir(root, ScanLimits { entries_max: 6, depth_max: 8 }, "test scan").is_ok());
        let e = scan_dir(root, ScanLimits { entries_max: 100, depth_max: 1 }, "test scan").expect_err("depth");
        assert!(matches!(&e, InputError::ScanTooDeep { path, .. } if path.ends_with("a/b")), "{e:?}");
        // A FIFO a scan meets is refused by its listed type (opening it would block the test).
        let made = std::process::Command::new("mkfifo").arg(root.join("a/fifo.md")).status().expect("mkfifo");
        assert!(made.success());
        let e = scan_dir(root, wide, "test scan").expect_err("fifo").to_string();
        assert!(e.starts_with("[STRATA-E1904] test scan") && e.contains("fifo.md is a FIFO"), "{e}");
        std::fs::remove_file(root.join("a/fifo.md")).expect("remove");
        let _socket = std::os::unix::net::UnixListener::bind(root.join("a/b/s.sock")).expect("bind");
        let e = scan_dir(root, wide, "test scan").expect_err("socket").to_string();
        assert!(e.contains("s.sock is a socket"), "{e}");
        std::fs::remove_file(root.join("a/b/s.sock")).expect("remove");
        // `input_files` shares one entry bound across the directories it is given: 3 + 1 here.
        let both = [root.join("a"), root.join("a/b")];
        let e = input_files(&both, ScanLimits { entries_max: 3, depth_max: 8 }, "test scan").expect_err("shared");
        assert!(matches!(e, InputError::ScanTooLarge { .. }), "{e:?}");
        let found = input_files(&both, ScanLimits { entries_max: 4, depth_max: 8 }, "test scan").expect("fits");
        assert_eq!(found, vec![root.join("a/b/two.md"), root.join("a/one.md")], "sorted, without duplicates");
        // A hidden FIFO is skipped unopened, like every hidden entry.
        let made = std::process::Command::new("mkfifo").arg(root.join(".fifo")).status().expect("mkfifo");
        assert!(made.success());
        assert_eq!(scan_dir(root, wide, "test scan").expect("scan").len(), 3);
    }

    #[test]
    fn read_prefix_stops_at_its_bound_even_on_an_endless_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("f");
        std::fs::write(&f, b"123456").expect("write");
        assert_eq!(read_prefix(&f, 4, "test input").expect("prefix"), b"1234");
        assert_eq!(read_prefix(&f, 10, "test input").expect("all"), b"123456");
        let zero = read_prefix(Path::new("/dev/zero"), 4, "test input");
        assert!(matches!(zero, Err(InputError::NotRegular { .. })), "{zero:?}");
    }
}
