//! Reading files a user names, with a bound on the bytes actually read.
//!
//! Why this exists: a limit checked against a file's metadata size does not hold for a FIFO, a
//! device or a file that grows while it is read (`/dev/zero` reports size 0 and never ends), and
//! opening a FIFO for reading blocks until a writer comes. Every file input goes through
//! [`read_bounded`]: the file is opened without blocking, must be a regular file (checked on the
//! open handle, so a path swapped after a check is still caught), and at most `max_bytes` are
//! read; one byte more is a refusal, never a truncation.

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
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len().min(max_bytes)).unwrap_or(0));
    file.take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| unreadable(format!("cannot be read: {e}")))?;
    if bytes.len() as u64 > max_bytes {
        return Err(InputError::TooLarge { what: what.to_owned(), path: path.to_owned(), max_bytes });
    }
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
}
