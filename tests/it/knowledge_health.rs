//! `mcp_health_ttl_minutes` in `strata run`, with the real Claude Code CLI against the fake model
//! server: before a worker that gets the Knowledge API is dispatched, the run probes the server
//! that worker starts (`strata mcp`); a healthy probe is reused within the TTL (three tasks, one
//! probe), a TTL of 0 probes before every dispatch, and a server that does not answer is probed
//! once per phase while its workers run without the Knowledge API (their requests carry no
//! knowledge tool) instead of being handed a dead server.

use std::path::{Path, PathBuf};

use serde_json::Value;
use strata_tests::fake_model::{FakeModel, Turn};
use strata_tests::real_cli::{self, CLAUDE_VAR, Scratch};
use strata_tests::{run_setting, strata_bin};

const PLAN: &str = r#"
workgroup = "probed"
parallel = 1
pipeline = "light"
retries = 0
provider = "claude"
[[task]]
id = "one"
role = "analyst"
objective = "Say what the crate does."
[[task]]
id = "two"
role = "analyst"
objective = "Say what the crate depends on."
after = ["one"]
[[task]]
id = "three"
role = "analyst"
objective = "Say what the crate exports."
after = ["two"]
"#;

struct Ran {
    ws: PathBuf,
    code: Option<i32>,
    described: String,
    /// Whether each model request offered the knowledge tool.
    offered: Vec<bool>,
    _scratch: Scratch,
}

/// Runs the plan with `config` appended to the workspace's config, `strata mcp` run through
/// `program` when given.
fn real_run(config: &str, program: Option<&Path>) -> Ran {
    let scratch = Scratch::new().expect("scratch");
    let files = [("src/lib.rs", "// the crate\n")];
    let (ws, repo, plan_path) = run_setting(strata_bin!(), scratch.root(), &files, PLAN);
    let cfg = ws.join(".strata/config.toml");
    let mut text = std::fs::read_to_string(&cfg).expect("config");
    text.push_str(config);
    std::fs::write(&cfg, text).expect("config");
    let fake = FakeModel::start(vec![Turn::text("Done.").sticky()]).expect("fake model");
    let mut cmd = real_cli::strata_run(std::path::Path::new(strata_bin!()), &ws, &plan_path, &repo, &scratch, &fake);
    let claude = real_cli::cli_path(CLAUDE_VAR).unwrap_or_else(|e| panic!("{e}"));
    cmd.env("STRATA_CLAUDE", claude).env("STRATA_CLAUDE_MODEL", real_cli::CLAUDE_MODEL);
    if let Some(p) = program {
        cmd.env("STRATA_PROGRAM", p);
    }
    let out = real_cli::run_with_timeout(cmd, std::time::Duration::from_secs(300)).expect("strata run");
    let tool = format!("mcp__{}__get_knowledge", strata_adapters::providers::worker_process::KNOWLEDGE_SERVER);
    let offered = fake.model_requests().iter().map(|r| r.text().contains(&tool)).collect();
    let code = out.status.and_then(|s| s.code());
    Ran { ws, code, described: out.describe(), offered, _scratch: scratch }
}

fn events(ws: &Path, ty: &str) -> Vec<Value> {
    strata_tests::journal_events(ws).into_iter().filter(|(_, t, _)| t == ty).map(|(_, _, v)| v).collect()
}

#[test]
#[ignore = "needs the claude CLI from npm; CI runs it"]
fn a_healthy_probe_is_reused_within_the_ttl_and_a_ttl_of_zero_probes_before_every_dispatch() {
    let reused = real_run("", None);
    assert_eq!(reused.code, Some(0), "{}", reused.described);
    let probes = events(&reused.ws, "workgroup.knowledge-probed");
    assert_eq!(probes.len(), 1, "one probe for three dispatches within 15 minutes: {probes:?}");
    assert_eq!((probes[0]["healthy"].as_bool(), probes[0]["ttl_minutes"].as_u64()), (Some(true), Some(15)));
    assert!(events(&reused.ws, "task.dispatched").iter().all(|d| d.get("without_knowledge").is_none()));
    assert!(!reused.offered.is_empty() && reused.offered.iter().all(|o| *o), "every worker got the API");

    let every = real_run("\n[context_efficiency]\nmcp_health_ttl_minutes = 0\n", None);
    assert_eq!(every.code, Some(0), "{}", every.described);
    let probes = events(&every.ws, "workgroup.knowledge-probed");
    assert_eq!(probes.len(), 3, "a probe before each of the three dispatches: {probes:?}");
    assert!(probes.iter().all(|p| p["healthy"] == true && p["ttl_minutes"] == 0), "{probes:?}");
}

#[test]
#[ignore = "needs the claude CLI from npm; CI runs it"]
fn a_knowledge_server_that_does_not_answer_is_probed_once_per_phase_and_workers_run_without_it() {
    // The strata the workers run, except that its MCP server exits at once.
    let dir = tempfile::tempdir().expect("tmp");
    let wrapper = dir.path().join("strata-broken-mcp");
    let real = std::fs::canonicalize(strata_bin!()).expect("strata");
    std::fs::write(
        &wrapper,
        format!("#!/bin/sh\nif [ \"$1\" = mcp ]; then exit 1; fi\nexec '{}' \"$@\"\n", real.display()),
    )
    .expect("wrapper");
    std::fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    let r = real_run("", Some(&wrapper));
    assert_eq!(r.code, Some(0), "the work goes on without the Knowledge API: {}", r.described);
    let probes = events(&r.ws, "workgroup.knowledge-probed");
    assert_eq!(probes.len(), 1, "a failed probe is retried only at a later phase boundary: {probes:?}");
    assert_eq!(probes[0]["healthy"], false, "{probes:?}");
    assert!(probes[0]["detail"].as_str().is_some_and(|d| d.contains("exited before it answered")), "{probes:?}");
    let dispatched = events(&r.ws, "task.dispatched");
    assert_eq!(dispatched.len(), 3);
    assert!(dispatched.iter().all(|d| d["without_knowledge"] == true), "{dispatched:?}");
    assert!(!r.offered.is_empty() && r.offered.iter().all(|o| !*o), "no worker was offered the dead server");
}
