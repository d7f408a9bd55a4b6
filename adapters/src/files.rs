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
        return Err(InputError::NotRegular { what: what.to_owned(), path: path.to_owned(), kind: kind_name(meta.file_type()) });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len().min(max_bytes)).unwrap_or(0));
    file.take(max_bytes.saturating_add(1)).read_to_end(&mut bytes).map_err(|e| unreadable(format!("cannot be read: {e}")))?;
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
}
