//! Where the CLI's output goes: the process's stdout/stderr, or, when the daemon runs a command
//! for a client, buffers sent back over the socket.
//!
//! Every command prints through [`outln!`](crate::outln) and [`errln!`](crate::errln). Writing
//! to a closed pipe (`strata knowledge list | head`) is not an error: the rest of the output is
//! dropped and the command finishes normally.

use std::cell::RefCell;
use std::io::{self, Write};

thread_local! {
    static CAPTURE: RefCell<Option<Captured>> = const { RefCell::new(None) };
}

/// This process's standard input, at most `max + 1` bytes (so a caller can tell it was over
/// `max`). A command reads its input through [`Workspace::stdin_bytes`](crate::app::workspace::Workspace::stdin_bytes),
/// which gives the client's when the daemon runs it.
pub fn stdin_bytes(max: u64) -> io::Result<Vec<u8>> {
    use std::io::Read as _;
    let mut bytes = Vec::new();
    io::stdin().lock().take(max + 1).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Output captured for a daemon client.
#[derive(Debug, Default)]
pub struct Captured {
    /// What the command wrote to stdout.
    pub stdout: Vec<u8>,
    /// What the command wrote to stderr.
    pub stderr: Vec<u8>,
}

/// Captures this thread's output while `f` runs.
pub fn capture<R>(f: impl FnOnce() -> R) -> (R, Captured) {
    CAPTURE.with(|c| *c.borrow_mut() = Some(Captured::default()));
    let r = f();
    let captured = CAPTURE.with(|c| c.borrow_mut().take()).unwrap_or_default();
    (r, captured)
}

/// Which stream.
#[derive(Clone, Copy, Debug)]
pub enum Stream {
    /// Standard output.
    Out,
    /// Standard error.
    Err,
}

/// A writer to this thread's stdout or stderr (captured or real).
#[derive(Debug)]
pub struct Writer(Stream);

/// Whether this thread's stderr is the process's and a terminal (a live display may redraw it).
pub fn stderr_is_terminal() -> bool {
    use std::io::IsTerminal as _;
    CAPTURE.with(|c| c.borrow().is_none()) && io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none()
}

/// This thread's stdout.
pub fn stdout() -> Writer {
    Writer(Stream::Out)
}

/// This thread's stderr.
pub fn stderr() -> Writer {
    Writer(Stream::Err)
}

fn quiet_pipe(r: io::Result<()>) -> io::Result<()> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        r => r,
    }
}

impl Write for Writer {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_all(buf)?;
        Ok(buf.len())
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        let captured = CAPTURE.with(|c| match c.borrow_mut().as_mut() {
            Some(cap) => {
                match self.0 {
                    Stream::Out => cap.stdout.extend_from_slice(buf),
                    Stream::Err => cap.stderr.extend_from_slice(buf),
                }
                true
            }
            None => false,
        });
        if captured {
            return Ok(());
        }
        match self.0 {
            Stream::Out => quiet_pipe(io::stdout().lock().write_all(buf)),
            Stream::Err => quiet_pipe(io::stderr().lock().write_all(buf)),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self.0 {
            Stream::Out => quiet_pipe(io::stdout().flush()),
            Stream::Err => quiet_pipe(io::stderr().flush()),
        }
    }
}

/// `println!` to this thread's stdout (see the module docs).
#[macro_export]
macro_rules! outln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!($crate::output::stdout(), $($t)*);
    }};
}

/// `print!` to this thread's stdout.
#[macro_export]
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = write!($crate::output::stdout(), $($t)*);
    }};
}

/// `eprintln!` to this thread's stderr.
#[macro_export]
macro_rules! errln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!($crate::output::stderr(), $($t)*);
    }};
}

/// `eprint!` to this thread's stderr.
#[macro_export]
macro_rules! err {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = write!($crate::output::stderr(), $($t)*);
    }};
}
