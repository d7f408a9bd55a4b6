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
    /// The network namespace it runs in (`None`: this process's).
    pub netns: Option<String>,
    /// The address it listens on.
    pub listen: String,
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
        Server::start_in(dir, None, "127.0.0.1")
    }

    /// [`Server::start`] inside the network namespace `netns`, listening on `listen`.
    pub fn start_in(dir: &Path, netns: Option<&str>, listen: &str) -> Server {
        let bin = PathBuf::from(std::env::var("STRATA_TEST_PG_BIN").expect("STRATA_TEST_PG_BIN (from .ci/postgres)"));
        let runas = std::env::var("STRATA_TEST_PG_RUNAS").unwrap_or_default();
        std::fs::create_dir_all(dir).unwrap();
        let s = Server {
            bin,
            runas,
            data: dir.join("data"),
            log: dir.join("server.log"),
            port: free_port(),
            netns: netns.map(str::to_owned),
            listen: listen.to_owned(),
        };
        if !s.runas.is_empty() {
            s.run("/bin/true", &[]); // runuser exists
            assert!(Command::new("chown").arg(&s.runas).arg(dir).status().unwrap().success());
        }
        let data = s.data.display().to_string();
        s.run(&s.tool("initdb"), &["-D", &data, "-U", "strata", "--auth=trust", "--no-sync", "-E", "UTF8"]);
        let conf = format!(
            "listen_addresses = '{}'\nport = {}\nunix_socket_directories = '{}'\nmax_connections = 100\n",
            s.listen, s.port, data
        );
        let mut text = std::fs::read_to_string(s.data.join("postgresql.conf")).unwrap();
        text.push_str(&conf);
        std::fs::write(s.data.join("postgresql.conf"), text).unwrap();
        // Loopback-range clients (a coordinator in another network namespace) log in like local ones.
        let mut hba = std::fs::read_to_string(s.data.join("pg_hba.conf")).unwrap();
        hba.push_str("host all all 127.0.0.0/8 trust\n");
        std::fs::write(s.data.join("pg_hba.conf"), hba).unwrap();
        s.up();
        s
    }

    fn tool(&self, name: &str) -> String {
        self.bin.join(name).display().to_string()
    }

    fn run(&self, prog: &str, args: &[&str]) {
        let mut argv: Vec<&str> = Vec::new();
        if let Some(ns) = &self.netns {
            argv.extend(["ip", "netns", "exec", ns]);
        }
        if !self.runas.is_empty() {
            argv.extend(["runuser", "-u", &self.runas, "--"]);
        }
        argv.push(prog);
        let mut c = Command::new(argv[0]);
        c.args(&argv[1..]);
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
        // Frozen first: a postmaster that sees a backend die forks a new startup process, which
        // a list of its children taken before would miss (and which then holds the shared
        // memory the restart needs).
        let _ = Command::new("kill").args(["-STOP", &pid.to_string()]).status();
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
        format!("postgresql://strata@{}:{}/postgres", self.listen, self.port)
    }

    /// The server's Unix socket (reachable from any network namespace).
    pub fn socket_url(&self) -> String {
        format!("host={} port={} user=strata dbname=postgres", self.data.display(), self.port)
    }
}

/// Runs `ip` with `args`, which must succeed.
pub fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("ip runs");
    assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Two network namespaces joined by a veth pair, loopback-range addresses only: the server's
/// side (`SERVER_ADDR`) and a coordinator's side (`CLIENT_ADDR`). [`Partition::cut`] takes the
/// server's end down, so whatever the coordinator sends is dropped without a word (as on a
/// partitioned network); [`Partition::heal`] brings it back. Removed on drop.
pub struct Partition {
    pub server_ns: String,
    pub client_ns: String,
    server_if: String,
}

impl Partition {
    pub const SERVER_ADDR: &str = "127.30.0.1";
    pub const CLIENT_ADDR: &str = "127.30.0.2";

    pub fn new() -> Partition {
        let id = std::process::id();
        let p = Partition {
            server_ns: format!("strata-s-{id}"),
            client_ns: format!("strata-c-{id}"),
            server_if: format!("sts{id}"),
        };
        let client_if = format!("stc{id}");
        for ns in [&p.server_ns, &p.client_ns] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
            ip(&["netns", "add", ns]);
        }
        ip(&["link", "add", &p.server_if, "type", "veth", "peer", "name", &client_if]);
        for (ns, dev, addr) in
            [(&p.server_ns, &p.server_if, Self::SERVER_ADDR), (&p.client_ns, &client_if, Self::CLIENT_ADDR)]
        {
            ip(&["link", "set", dev, "netns", ns]);
            // 127/8 on a device other than `lo` is routed only with route_localnet.
            for key in ["all", dev.as_str()] {
                let sysctl = format!("net.ipv4.conf.{key}.route_localnet=1");
                ip(&["netns", "exec", ns, "sysctl", "-qw", &sysctl]);
            }
            ip(&["-n", ns, "addr", "add", &format!("{addr}/30"), "dev", dev]);
            ip(&["-n", ns, "link", "set", dev, "up"]);
        }
        p
    }

    pub fn cut(&self) {
        ip(&["-n", &self.server_ns, "link", "set", &self.server_if, "down"]);
    }

    pub fn heal(&self) {
        ip(&["-n", &self.server_ns, "link", "set", &self.server_if, "up"]);
    }
}

impl Drop for Partition {
    fn drop(&mut self) {
        for ns in [&self.server_ns, &self.client_ns] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
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

/// Two workspaces (as on two machines) initialised on one fresh schema of the test server.
pub fn shared_workspaces(tmp: &Path, schema: &str) -> (PathBuf, PathBuf) {
    const BIN: &str = strata_tests::strata_bin!();
    let url = url();
    let (a, b) = (tmp.join("machine-a"), tmp.join("machine-b"));
    for ws in [&a, &b] {
        std::fs::create_dir_all(ws).unwrap();
        strata_tests::strata_ok(BIN, ws, &["init", "--backend", "postgres", "--url", &url, "--schema", schema]);
    }
    (a, b)
}

/// A fresh schema on the test server: its name and options.
pub fn fresh_schema() -> (String, PgOptions) {
    let options = fresh_options(&url());
    (options.schema.clone(), options)
}

/// One event of a workgroup's lease stream.
#[derive(Debug, Clone)]
pub struct LeaseEvent {
    pub event_type: String,
    pub epoch: u64,
    pub holder: String,
    pub at_ns: i64,
    /// The recorded end (`None` for a release).
    pub expires_at_ns: Option<i64>,
}

/// The lease stream of workgroup `wg`, folded as a coordinator lease (which refuses a takeover
/// of a live lease and a renewal or release by anyone but the holder), and its events.
pub fn lease_of(
    j: &strata_journal::Journal,
    wg: &str,
) -> (strata_engine::workgroup::lease::CoordinatorLease, Vec<LeaseEvent>) {
    use strata_engine::workgroup::lease::{self, CoordinatorLease, LeaseReleased, LeaseSet};
    let mut l = CoordinatorLease::default();
    let mut events = Vec::new();
    for e in j.read_stream(&lease::stream(wg), 1, 100_000).unwrap() {
        l.apply(wg, &e.event_type, &e.payload, e.version).expect("a lease stream coordinators wrote");
        let event_type = e.event_type.clone();
        events.push(if e.event_type == lease::RELEASED {
            let x: LeaseReleased = serde_json::from_slice(&e.payload).unwrap();
            LeaseEvent { event_type, epoch: x.epoch, holder: x.holder, at_ns: x.at_ns, expires_at_ns: None }
        } else {
            let x: LeaseSet = serde_json::from_slice(&e.payload).unwrap();
            LeaseEvent {
                event_type,
                epoch: x.epoch,
                holder: x.holder,
                at_ns: x.at_ns,
                expires_at_ns: Some(x.expires_at_ns),
            }
        });
    }
    (l, events)
}
