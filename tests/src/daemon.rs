//! A real `strata serve` for tests: started, signalled, stopped.

use std::io::Read as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `strata serve`, stopped with SIGTERM on drop.
pub struct Daemon {
    /// The daemon process.
    pub child: Child,
    /// What it wrote to `.strata/serve.json`.
    pub info: serde_json::Value,
}

impl Daemon {
    /// Starts `strata serve` in `ws` with `extra` arguments and waits until it is ready.
    pub fn start(bin: &str, ws: &Path, extra: &[&str]) -> Daemon {
        let info_path = ws.join(".strata/serve.json");
        let child = Command::new(bin)
            .arg("--dir")
            .arg(ws)
            .arg("serve")
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Ready when serve.json names this process: one a killed daemon left behind does not
        // count.
        let started = Instant::now();
        let info = loop {
            let info: Option<serde_json::Value> =
                std::fs::read_to_string(&info_path).ok().and_then(|t| serde_json::from_str(&t).ok());
            if let Some(info) = info.filter(|i| i["pid"].as_u64() == Some(u64::from(child.id()))) {
                break info;
            }
            assert!(started.elapsed() < Duration::from_secs(60), "strata serve did not become ready");
            std::thread::sleep(Duration::from_millis(20));
        };
        Daemon { child, info }
    }

    /// Sends SIGTERM.
    pub fn sigterm(&self) {
        let status = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status().unwrap();
        assert!(status.success());
    }

    /// SIGTERM, then the exit status and what the daemon wrote to stderr.
    pub fn stop(self) -> (std::process::ExitStatus, String) {
        self.sigterm();
        self.stop_after_signal()
    }

    /// Waits for a daemon already sent SIGTERM: its exit status and stderr.
    pub fn stop_after_signal(mut self) -> (std::process::ExitStatus, String) {
        let status = self.child.wait().unwrap();
        let mut err = String::new();
        self.child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        (status, err)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // A daemon a failed test left stopped would never see the SIGTERM.
            let _ = Command::new("kill").arg("-CONT").arg(self.child.id().to_string()).status();
            let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
            let _ = self.child.wait();
        }
    }
}

impl Daemon {
    /// Sends `signal` (`STOP`, `CONT`, `KILL`, …) to the daemon.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill").arg(format!("-{signal}")).arg(self.child.id().to_string()).status().unwrap();
        assert!(status.success(), "kill -{signal}");
    }
}
