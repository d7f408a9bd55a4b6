//! Shared by the PostgreSQL tests: the server `.ci/postgres` started (its URL from
//! `STRATA_TEST_PG_URL`), a fresh schema per test so tests run in parallel without seeing each
//! other, and private servers for the fault tests that kill them.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use strata_journal::pg::PgOptions;

/// The URL of the test server; the tests needing it are ignored unless CI (or
/// `.ci/postgres cargo test … -- --include-ignored`) provides it.
pub fn url() -> String {
    std::env::var("STRATA_TEST_PG_URL")
        .expect("STRATA_TEST_PG_URL is not set: run these tests through `.ci/postgres cargo test …`")
}

/// Options for a schema of its own on `url`.
pub fn fresh_options(url: &str) -> PgOptions {
    let schema = format!("t_{}", uuid::Uuid::now_v7().simple());
    let mut o = PgOptions::new(url, "the test URL").unwrap().with_schema(&schema).unwrap();
    o.env = strata_journal::pg::PgEnv::from_vars(|k| std::env::var(k).ok());
    o
}

/// Runs `psql` on the test server (for tampering as an attacker with SQL access would).
pub fn psql(url: &str, sql: &str) -> String {
    let bin =
        std::env::var("STRATA_TEST_PG_BIN").map(PathBuf::from).unwrap_or_else(|_| "/usr/lib/postgresql/15/bin".into());
    let out = Command::new(bin.join("psql"))
        .args([url, "-v", "ON_ERROR_STOP=1", "-Atq", "-c", sql])
        .output()
        .expect("psql runs");
    assert!(out.status.success(), "psql {sql}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A PostgreSQL server of a test's own (data directory under `dir`), which the test may kill.
pub struct Server {
    pub bin: PathBuf,
    pub runas: String,
    pub data: PathBuf,
    pub log: PathBuf,
    pub port: u16,
}

/// Pids whose parent is `pid` (from /proc).
pub fn children_of(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        // Fields after the parenthesised command: state, ppid, ...
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r.to_owned()) else { continue };
        let ppid = rest.split_whitespace().nth(1).and_then(|p| p.parse::<i32>().ok());
        if ppid == Some(pid) {
            out.push(child);
        }
    }
    out
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

impl Server {
    /// `initdb` and start, as `.ci/postgres` does.
    pub fn start(dir: &Path) -> Server {
        let bin = PathBuf::from(std::env::var("STRATA_TEST_PG_BIN").expect("STRATA_TEST_PG_BIN (from .ci/postgres)"));
        let runas = std::env::var("STRATA_TEST_PG_RUNAS").unwrap_or_default();
        std::fs::create_dir_all(dir).unwrap();
        let s = Server { bin, runas, data: dir.join("data"), log: dir.join("server.log"), port: free_port() };
        if !s.runas.is_empty() {
            s.run("/bin/true", &[]); // runuser exists
            assert!(Command::new("chown").arg(&s.runas).arg(dir).status().unwrap().success());
        }
        let data = s.data.display().to_string();
        s.run(&s.tool("initdb"), &["-D", &data, "-U", "strata", "--auth=trust", "--no-sync", "-E", "UTF8"]);
        let conf = format!(
            "listen_addresses = '127.0.0.1'\nport = {}\nunix_socket_directories = '{}'\nmax_connections = 100\n",
            s.port, data
        );
        let mut text = std::fs::read_to_string(s.data.join("postgresql.conf")).unwrap();
        text.push_str(&conf);
        std::fs::write(s.data.join("postgresql.conf"), text).unwrap();
        s.up();
        s
    }

    fn tool(&self, name: &str) -> String {
        self.bin.join(name).display().to_string()
    }

    fn run(&self, prog: &str, args: &[&str]) {
        let mut c = if self.runas.is_empty() {
            Command::new(prog)
        } else {
            let mut c = Command::new("runuser");
            c.args(["-u", &self.runas, "--", prog]);
            c
        };
        let out = c.args(args).output().expect("runs");
        assert!(out.status.success(), "{prog} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// Starts the server and waits until it accepts connections (`pg_ctl -w`).
    pub fn up(&self) {
        let (data, log) = (self.data.display().to_string(), self.log.display().to_string());
        self.run(&self.tool("pg_ctl"), &["-D", &data, "-l", &log, "-w", "-t", "60", "start"]);
    }

    /// The postmaster's pid.
    pub fn pid(&self) -> i32 {
        let text = std::fs::read_to_string(self.data.join("postmaster.pid")).unwrap();
        text.lines().next().unwrap().trim().parse().unwrap()
    }

    /// SIGKILL of the postmaster and all its backends (a crash of the whole server), by pid.
    pub fn kill9(&self) {
        let pid = self.pid();
        let mut victims = children_of(pid);
        victims.push(pid);
        for v in &victims {
            let _ = Command::new("kill").args(["-KILL", &v.to_string()]).status();
        }
        // Bounded wait until every one is gone, so the restart does not find them.
        for v in victims {
            for _ in 0..5_000_000 {
                if !Path::new(&format!("/proc/{v}")).exists() {
                    break;
                }
                std::thread::yield_now();
            }
        }
    }

    pub fn url(&self) -> String {
        format!("postgresql://strata@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let data = self.data.display().to_string();
        let mut c = if self.runas.is_empty() {
            Command::new(self.tool("pg_ctl"))
        } else {
            let mut c = Command::new("runuser");
            c.args(["-u", &self.runas, "--", &self.tool("pg_ctl")]);
            c
        };
        let _ = c.args(["-D", &data, "-m", "immediate", "stop"]).output();
    }
}
