//! Where the CLI's output goes: the process's stdout/stderr, or, when the daemon runs a command
//! for a client, buffers sent back over the socket.
//!
//! Every command prints through [`outln!`](crate::outln) and [`errln!`](crate::errln), naming
//! where: its workspace or an [`Out`] it was given, never state of the thread it runs on, so a
//! daemon client gets everything the command prints, from whichever thread. Writing
//! to a closed pipe (`strata knowledge list | head`) is not an error: the rest of the output is
//! dropped and the command finishes normally.

use std::io::{self, Write};
use std::sync::{Arc, Mutex, PoisonError};

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

/// Where one command's output goes: this process's stdout and stderr, or buffers the daemon
/// sends back to the client it runs the command for. A command gets it with its
/// [`Workspace`](crate::app::workspace::Workspace) (or as an argument), so what it prints from
/// any thread reaches the same place.
#[derive(Clone, Debug, Default)]
pub struct Out(Option<Arc<Mutex<Captured>>>);

impl Out {
    /// This process's own stdout and stderr.
    pub fn process() -> Out {
        Out(None)
    }

    /// Buffers, read back with [`Self::take`].
    pub fn capture() -> Out {
        Out(Some(Arc::default()))
    }

    /// What was captured so far (emptied); nothing for the process's own streams.
    pub fn take(&self) -> Captured {
        self.0
            .as_ref()
            .map(|c| std::mem::take(&mut *c.lock().unwrap_or_else(PoisonError::into_inner)))
            .unwrap_or_default()
    }

    /// A writer to this output's stdout.
    pub fn stdout(&self) -> Writer {
        Writer { out: self.clone(), stream: Stream::Out }
    }

    /// A writer to this output's stderr.
    pub fn stderr(&self) -> Writer {
        Writer { out: self.clone(), stream: Stream::Err }
    }

    /// Whether this output's stderr is the process's and a terminal (a live display may redraw
    /// it).
    pub fn stderr_is_terminal(&self) -> bool {
        use std::io::IsTerminal as _;
        self.0.is_none() && io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none()
    }
}

/// What the print macros write through: an [`Out`], or what carries one.
pub trait Printer {
    /// The output.
    fn sink(&self) -> &Out;
}

impl Printer for Out {
    fn sink(&self) -> &Out {
        self
    }
}

impl<T: Printer + ?Sized> Printer for &T {
    fn sink(&self) -> &Out {
        (**self).sink()
    }
}

/// Which stream.
#[derive(Clone, Copy, Debug)]
pub enum Stream {
    /// Standard output.
    Out,
    /// Standard error.
    Err,
}

/// A writer to one stream of an [`Out`].
#[derive(Debug)]
pub struct Writer {
    out: Out,
    stream: Stream,
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
        if let Some(cap) = &self.out.0 {
            let mut cap = cap.lock().unwrap_or_else(PoisonError::into_inner);
            match self.stream {
                Stream::Out => cap.stdout.extend_from_slice(buf),
                Stream::Err => cap.stderr.extend_from_slice(buf),
            }
            return Ok(());
        }
        match self.stream {
            Stream::Out => quiet_pipe(io::stdout().lock().write_all(buf)),
            Stream::Err => quiet_pipe(io::stderr().lock().write_all(buf)),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match (&self.out.0, self.stream) {
            (Some(_), _) => Ok(()),
            (None, Stream::Out) => quiet_pipe(io::stdout().flush()),
            (None, Stream::Err) => quiet_pipe(io::stderr().flush()),
        }
    }
}

/// `println!` to a command's stdout: `outln!(ws, "…", …)`, where `ws` is a
/// [`Printer`] (the command's `Workspace` or its [`Out`]).
#[macro_export]
macro_rules! outln {
    ($o:expr) => {{
        use std::io::Write as _;
        let _ = writeln!($crate::output::Printer::sink(&$o).stdout());
    }};
    ($o:expr, $($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!($crate::output::Printer::sink(&$o).stdout(), $($t)*);
    }};
}

/// `print!` to a command's stdout.
#[macro_export]
macro_rules! out {
    ($o:expr, $($t:tt)*) => {{
        use std::io::Write as _;
        let _ = write!($crate::output::Printer::sink(&$o).stdout(), $($t)*);
    }};
}

/// `eprintln!` to a command's stderr.
#[macro_export]
macro_rules! errln {
    ($o:expr) => {{
        use std::io::Write as _;
        let _ = writeln!($crate::output::Printer::sink(&$o).stderr());
    }};
    ($o:expr, $($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!($crate::output::Printer::sink(&$o).stderr(), $($t)*);
    }};
}

/// `eprint!` to a command's stderr.
#[macro_export]
macro_rules! err {
    ($o:expr, $($t:tt)*) => {{
        use std::io::Write as _;
        let _ = write!($crate::output::Printer::sink(&$o).stderr(), $($t)*);
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_command_prints_from_any_thread_reaches_its_captured_output() {
        let o = Out::capture();
        outln!(o, "from the command's thread");
        let other = o.clone();
        std::thread::spawn(move || errln!(other, "from a thread it started")).join().expect("thread");
        let got = o.take();
        assert_eq!(String::from_utf8_lossy(&got.stdout), "from the command's thread\n");
        assert_eq!(String::from_utf8_lossy(&got.stderr), "from a thread it started\n");
        assert!(o.take().stdout.is_empty(), "taken once");
        assert!(!o.stderr_is_terminal(), "a captured stderr is never a live display");
    }
}
