//! The `[context_efficiency]` table of `.strata/config.toml` through `strata run`: each key
//! changes what a run does (a test per key, each failing if the key were ignored), the policy is
//! recorded as its own event, and a resumed run under a changed configuration records the change.

use std::path::Path;

use serde_json::Value;
use strata_tests::{run_setting, strata, strata_bin};

/// Two writers whose sessions two continuations resume, side by side (both wait for both, so
/// they are dispatched in the same step).
const TWO_CONTINUATIONS: &str = r#"
workgroup = "keys"
pipeline = "light"
[[task]]
id = "a1"
role = "backend-builder"
objective = "Write the first module."
owns = ["src/a1.rs"]
[[task]]
id = "a2"
role = "backend-builder"
objective = "Write the second module."
owns = ["src/a2.rs"]
[[task]]
id = "b1"
role = "backend-builder"
objective = "Extend the first module."
owns = ["src/a1.rs"]
after = ["a1", "a2"]
continues = "a1"
[[task]]
id = "b2"
role = "backend-builder"
objective = "Extend the second module."
owns = ["src/a2.rs"]
after = ["a1", "a2"]
continues = "a2"
"#;

const FILES: [(&str, &str); 2] = [("src/a1.rs", "// a1\n"), ("src/a2.rs", "// a2\n")];

/// A run of `plan` in a fresh workspace whose config ends with `[context_efficiency]` holding
/// `keys`, with `env` set, which must succeed: its stdout and the journal's events `(type, payload)`.
fn run_with(plan: &str, keys: &str, env: &[(&str, &str)]) -> (String, Vec<(String, Value)>) {
    let tmp = tempfile::tempdir().expect("tmp");
    let (ws, repo, plan_path) = run_setting(strata_bin!(), tmp.path(), &FILES, plan);
    let config = ws.join(".strata/config.toml");
    let mut text = std::fs::read_to_string(&config).expect("config");
    text.push_str(&format!("\n[context_efficiency]\n{keys}\n"));
    std::fs::write(&config, text).expect("config written");
    let out = std::process::Command::new(strata_bin!())
        .arg("--dir")
        .arg(&ws)
        .args(["run", plan_path.to_str().expect("utf-8"), "--repo", repo.to_str().expect("utf-8")])
        .args(["--provider", "sim", "--time-scale", "0"])
        .env_remove("STRATA_NESTING_DEPTH")
        .envs(env.iter().copied())
        .output()
        .expect("strata runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    (stdout, events(&ws))
}

fn events(ws: &Path) -> Vec<(String, Value)> {
    let j = strata_journal::Journal::open(
        &ws.join(".strata/journal"),
        &strata_tests::options(strata_journal::Durability::Process),
    )
    .expect("journal");
    let out = j
        .read_range(1, j.head().seq as usize + 1)
        .expect("read")
        .into_iter()
        .map(|e| (e.event_type.clone(), serde_json::from_slice(&e.payload).expect("JSON payload")))
        .collect();
    j.close_blocking().expect("close");
    out
}

/// `runs_as` of each task's last dispatch.
fn modes(ev: &[(String, Value)]) -> std::collections::BTreeMap<String, (String, Vec<String>)> {
    ev.iter()
        .filter(|(t, _)| t == "task.dispatched")
        .map(|(_, v)| {
            let reasons = v["reason_codes"].as_array().expect("reasons").iter().map(|r| r.to_string()).collect();
            (v["task"].as_str().expect("task").to_owned(), (v["runs_as"].as_str().expect("mode").to_owned(), reasons))
        })
        .collect()
}

fn policy(ev: &[(String, Value)]) -> Value {
    ev.iter().rev().find(|(t, _)| t == "workgroup.policy-set").expect("a policy-set event").1["policy"].clone()
}

fn count(ev: &[(String, Value)], kind: &str) -> usize {
    ev.iter().filter(|(t, _)| t == kind).count()
}

#[test]
fn by_default_both_continuations_resume_and_the_policy_is_recorded() {
    let (stdout, ev) = run_with(TWO_CONTINUATIONS, "", &[]);
    let m = modes(&ev);
    assert_eq!((m["b1"].0.as_str(), m["b2"].0.as_str()), ("resume", "resume"), "{m:?}");
    assert_eq!(policy(&ev)["profile"], "balanced");
    assert!(stdout.contains("context efficiency on, profile balanced"), "{stdout}");
    // Every dispatch records the routing inputs it was decided on.
    let b1 = ev
        .iter()
        .find(|(t, v)| t == "task.dispatched" && v["task"] == "b1")
        .map(|(_, v)| v["evidence"].clone())
        .expect("b1 dispatched");
    assert_eq!(b1["expected_reuse"], "high", "{b1}");
    assert_eq!(b1["lineage_candidate"], "keys.a1");
    assert_eq!(b1["after"], serde_json::json!(["a1", "a2"]));
    assert_eq!((b1["coupling"].as_str(), b1["latency_priority"].as_str()), (Some("independent"), Some("low")));
    assert!(
        b1["capsule_bytes"].as_u64().is_some_and(|n| n > 0) && b1["prompt_tokens"].as_u64().is_some_and(|n| n > 0),
        "{b1}"
    );
    assert!(b1["inherited_tokens"].as_u64().is_some(), "{b1}");
    assert_eq!((b1["max_active_inherited"].as_u64(), b1["max_nesting_depth"].as_u64()), (Some(2), Some(2)));
    let a1 = ev.iter().find(|(t, v)| t == "task.dispatched" && v["task"] == "a1").map(|(_, v)| v["evidence"].clone());
    assert_eq!(a1.as_ref().map(|e| e["latency_priority"].clone()), Some("high".into()), "{a1:?}");
}

#[test]
fn audit_run_shows_the_routing_evidence_of_every_task() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (ws, repo, plan_path) = run_setting(strata_bin!(), tmp.path(), &FILES, TWO_CONTINUATIONS);
    let args =
        ["run", plan_path.to_str().expect("utf-8"), "--repo", repo.to_str().expect("utf-8"), "--time-scale", "0"];
    assert!(strata(strata_bin!(), &ws, &args).status.success());
    let out = strata(strata_bin!(), &ws, &["audit", "run", "keys", "--json"]);
    let v: Value = serde_json::from_slice(&out.stdout).expect("audit JSON");
    let tasks: Vec<&str> =
        v["routing"].as_array().expect("routing").iter().filter_map(|r| r["task"].as_str()).collect();
    assert_eq!(tasks, ["a1", "a2", "b1", "b2"]);
    let text = String::from_utf8_lossy(&strata(strata_bin!(), &ws, &["audit", "run", "keys"]).stdout).into_owned();
    assert!(
        text.contains("b1: routed on node -, build backend-builder, after [a1, a2], coupling independent, reuse high"),
        "{text}"
    );
    assert!(
        text.contains("candidate keys.a1 (RECONCILE_REQUIRED)") || text.contains("candidate keys.a1 (HOT)"),
        "{text}"
    );
}

#[test]
fn enabled_false_runs_every_task_as_the_baseline_and_says_so() {
    let (stdout, ev) = run_with(TWO_CONTINUATIONS, "enabled = false", &[]);
    let m = modes(&ev);
    assert!(m.values().all(|(mode, _)| mode == "fresh-capsule"), "{m:?}");
    assert_eq!(count(&ev, "ce.lineage-recorded"), 0, "no session is kept warm with efficiency off");
    assert_eq!(policy(&ev)["enabled"], false);
    assert!(stdout.contains("context efficiency off"), "{stdout}");
}

#[test]
fn max_active_inherited_caps_resumed_writers_running_at_once() {
    let (_, ev) = run_with(TWO_CONTINUATIONS, "max_active_inherited = 1", &[]);
    let m = modes(&ev);
    let resumed = m.values().filter(|(mode, _)| mode == "resume").count();
    assert_eq!(resumed, 1, "one resumes, the other is over the cap: {m:?}");
    let over_cap = |(id, (mode, r)): (&String, &(String, Vec<String>))| {
        id.starts_with('b') && mode == "fresh-capsule" && r.contains(&"\"CAPABILITY_FALLBACK\"".to_owned())
    };
    assert!(m.iter().any(over_cap), "{m:?}");
}

#[test]
fn warm_lease_minutes_sets_how_long_a_session_stays_resumable() {
    let (_, ev) = run_with(TWO_CONTINUATIONS, "warm_lease_minutes = 7", &[]);
    let lease = ev.iter().find(|(t, _)| t == "ce.lease-granted").expect("a lease").1.clone();
    let span = lease["expires_at_ns"].as_i64().expect("end") - lease["at_ns"].as_i64().expect("start");
    assert_eq!(span, 7 * 60 * 1_000_000_000, "{lease}");
    // No lease at all: nothing resumes.
    let (_, ev) = run_with(TWO_CONTINUATIONS, "warm_lease_minutes = 0", &[]);
    let m = modes(&ev);
    assert!(m.values().all(|(mode, _)| mode != "resume"), "{m:?}");
}

#[test]
fn max_nesting_depth_keeps_a_run_inside_a_worker_from_delegating_deeper() {
    let nested = [("STRATA_NESTING_DEPTH", "1")];
    let (_, ev) = run_with(TWO_CONTINUATIONS, "max_nesting_depth = 1", &nested);
    let m = modes(&ev);
    assert!(m.values().all(|(_, r)| r.contains(&"\"NESTING_LIMIT\"".to_owned())), "{m:?}");
    let (_, ev) = run_with(TWO_CONTINUATIONS, "max_nesting_depth = 2", &nested);
    let m = modes(&ev);
    assert!(m.values().all(|(_, r)| !r.contains(&"\"NESTING_LIMIT\"".to_owned())), "{m:?}");
}

#[test]
fn telemetry_off_records_no_usage() {
    let (_, ev) = run_with(TWO_CONTINUATIONS, "", &[]);
    assert!(count(&ev, "telemetry.usage-reported") >= 4);
    let (_, ev) = run_with(TWO_CONTINUATIONS, "telemetry = \"off\"", &[]);
    assert_eq!(count(&ev, "telemetry.usage-reported"), 0);
    assert_eq!(policy(&ev)["telemetry"], "off");
}

#[test]
fn the_profile_sets_parallel_workers_and_the_inheritance_cap() {
    let planned = |ev: &[(String, Value)]| {
        ev.iter().find(|(t, _)| t == "workgroup.planned").expect("planned").1["plan"]["parallel"].as_u64()
    };
    let (_, ev) = run_with(TWO_CONTINUATIONS, "profile = \"latency\"", &[]);
    assert_eq!(planned(&ev), Some(8));
    // quality allows one inherited writer at a time: the second continuation starts fresh.
    let (_, ev) = run_with(TWO_CONTINUATIONS, "profile = \"quality\"", &[]);
    assert_eq!(planned(&ev), Some(2));
    assert_eq!(policy(&ev)["max_active_inherited"], 1);
    assert_eq!(modes(&ev).values().filter(|(mode, _)| mode == "resume").count(), 1);
    // A plan's own parallel wins over the profile's.
    let (_, ev) = run_with(&format!("parallel = 3\n{TWO_CONTINUATIONS}"), "profile = \"latency\"", &[]);
    assert_eq!(planned(&ev), Some(3));
}

#[test]
fn a_bad_key_fails_every_command_naming_the_key_and_a_resumed_run_records_a_changed_policy() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (ws, repo, plan_path) = run_setting(strata_bin!(), tmp.path(), &FILES, TWO_CONTINUATIONS);
    let config = ws.join(".strata/config.toml");
    let original = std::fs::read_to_string(&config).expect("config");
    std::fs::write(&config, format!("{original}\n[context_efficiency]\nprofile = \"frugal\"\n")).expect("write");
    let out = strata(strata_bin!(), &ws, &["audit", "run", "keys"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("[STRATA-E0601]") && err.contains("context_efficiency.profile"),
        "{err}"
    );
    assert!(err.contains("quality, balanced, economy, latency"), "{err}");
    // A run under one profile, resumed under another: the change is its own event.
    std::fs::write(&config, format!("{original}\n[context_efficiency]\nprofile = \"economy\"\n")).expect("write");
    let args =
        ["run", plan_path.to_str().expect("utf-8"), "--repo", repo.to_str().expect("utf-8"), "--time-scale", "0"];
    assert!(strata(strata_bin!(), &ws, &args).status.success());
    std::fs::write(&config, format!("{original}\n[context_efficiency]\nprofile = \"quality\"\n")).expect("write");
    let out = strata(strata_bin!(), &ws, &["run", "--resume", "keys", "--time-scale", "0"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let ev = events(&ws);
    let sets: Vec<&Value> = ev.iter().filter(|(t, _)| t == "workgroup.policy-set").map(|(_, v)| v).collect();
    assert_eq!(sets.len(), 2, "{sets:?}");
    assert_eq!(
        (sets[0]["policy"]["profile"].as_str(), sets[1]["replaces"].as_str()),
        (Some("economy"), Some("economy"))
    );
    assert_eq!(sets[1]["policy"]["profile"], "quality");
}

#[test]
fn disk_handoff_threshold_decides_which_results_get_a_handoff_file_and_followers_get_its_path() {
    let plan = format!(
        "{TWO_CONTINUATIONS}\n[[task]]\nid = \"look\"\nrole = \"analyst\"\nobjective = \"Say what the modules do.\"\n"
    );
    let handoffs = |ev: &[(String, Value)]| -> std::collections::BTreeMap<String, Value> {
        ev.iter()
            .filter(|(t, v)| t == "task.completed" && !v["handoff"].is_null())
            .map(|(_, v)| (v["task"].as_str().expect("task").to_owned(), v["handoff"].clone()))
            .collect()
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let (ws, repo, plan_path) = run_setting(strata_bin!(), tmp.path(), &FILES, &plan);
    let args =
        ["run", plan_path.to_str().expect("utf-8"), "--repo", repo.to_str().expect("utf-8"), "--time-scale", "0"];
    assert!(strata(strata_bin!(), &ws, &args).status.success());
    let ev = events(&ws);
    let h = handoffs(&ev);
    // material (the default): the writers' results, not the side check nobody waits for.
    assert_eq!(h.keys().map(String::as_str).collect::<Vec<_>>(), ["a1", "a2", "b1", "b2"], "{h:?}");
    let a1 = &h["a1"];
    let bytes = std::fs::read(ws.join(a1["path"].as_str().expect("path"))).expect("the handoff file exists");
    assert_eq!(a1["blake3"].as_str(), Some(blake3::hash(&bytes).to_hex().as_str()));
    assert!(String::from_utf8_lossy(&bytes).contains("src/a1.rs"));
    // A follower's capsule names the handoff it builds on, not the output.
    let capsule = std::fs::read_to_string(ws.join(".strata/prompts/keys/b1.1.prompt.capsule.json")).expect("capsule");
    assert!(capsule.contains("Read the handoff of a1 at .strata/handoffs/keys/a1.1.md"), "{capsule}");
    // always: every result, the side check too.
    let (_, ev) = run_with(&plan, "disk_handoff_threshold = \"always\"", &[]);
    let h = handoffs(&ev);
    assert_eq!(h.get("look").and_then(|v| v["reason"].as_str()), Some("always"), "{h:?}");
}

/// An analyst, a builder, a test writer naming its own tier, and a reviewer after them.
const ROLES_PLAN: &str = r#"
workgroup = "models"
pipeline = "light"
[[task]]
id = "look"
role = "analyst"
objective = "Say what the modules do."
[[task]]
id = "build"
role = "backend-builder"
objective = "Write the first module."
owns = ["src/a1.rs"]
[[task]]
id = "tests"
role = "test-builder"
objective = "Test the second module."
owns = ["src/a2.rs"]
model = "strong"
[[task]]
id = "review"
role = "reviewer"
objective = "Review the modules."
after = ["build", "tests"]
"#;

/// `(tier, from, name)` of each task's last dispatch.
fn models(ev: &[(String, Value)]) -> std::collections::BTreeMap<String, (Value, Value, Value)> {
    ev.iter()
        .filter(|(t, _)| t == "task.dispatched")
        .map(|(_, v)| {
            let m = &v["model"];
            (v["task"].as_str().expect("task").to_owned(), (m["tier"].clone(), m["from"].clone(), m["name"].clone()))
        })
        .collect()
}

#[test]
fn models_follow_the_profile_per_role_a_task_may_name_its_tier_and_the_table_names_each_tier() {
    let table = "[context_efficiency.models.sim]\nfast = \"sim-small\"\nstandard = \"sim-mid\"";
    let tuple = |tier: &str, from: &str, name: Option<&str>| (Value::from(tier), Value::from(from), name.into());
    let (_, ev) = run_with(ROLES_PLAN, &format!("profile = \"economy\"\n{table}"), &[]);
    let m = models(&ev);
    assert_eq!(m["look"], tuple("fast", "profile", Some("sim-small")), "{m:?}");
    assert_eq!(m["build"], tuple("standard", "profile", Some("sim-mid")));
    assert_eq!(m["tests"], tuple("strong", "task", None), "the table names no strong model for sim");
    assert_eq!(m["review"], tuple("standard", "profile", Some("sim-mid")));
    assert_eq!(policy(&ev)["models"]["sim"]["fast"], "sim-small");
    // balanced reviews on the strong tier and reads with the standard one.
    let (_, ev) = run_with(ROLES_PLAN, table, &[]);
    let m = models(&ev);
    assert_eq!((m["look"].0.as_str(), m["review"].0.as_str()), (Some("standard"), Some("strong")), "{m:?}");
    // Off: the baseline, every worker on its provider's default.
    let (_, ev) = run_with(ROLES_PLAN, &format!("enabled = false\n{table}"), &[]);
    assert!(ev.iter().filter(|(t, _)| t == "task.dispatched").all(|(_, v)| v.get("model").is_none()));
    // An operator's STRATA_CLAUDE_MODEL names Claude Code's model for every tier, recorded in the policy.
    let (_, ev) = run_with(ROLES_PLAN, "", &[("STRATA_CLAUDE_MODEL", "claude-test-1")]);
    let claude = &policy(&ev)["models"]["claude"];
    assert_eq!((&claude["strong"], &claude["fast"]), (&Value::from("claude-test-1"), &Value::from("claude-test-1")));
    assert_eq!(policy(&ev)["models"].get("codex"), None, "no Codex names unless configured");
}

#[test]
fn audit_run_names_each_task_s_model_and_a_bad_model_table_or_tier_is_refused_naming_it() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (ws, repo, plan_path) = run_setting(strata_bin!(), tmp.path(), &FILES, ROLES_PLAN);
    let config = ws.join(".strata/config.toml");
    let original = std::fs::read_to_string(&config).expect("config");
    let args =
        ["run", plan_path.to_str().expect("utf-8"), "--repo", repo.to_str().expect("utf-8"), "--time-scale", "0"];
    for (table, said) in [
        ("[context_efficiency.models.gemini]\nfast = \"g\"\n", "names provider \"gemini\""),
        ("[context_efficiency.models.claude]\nfast = \"two words\"\n", "claude.fast is \"two words\""),
        ("[context_efficiency.models.claude]\nquick = \"h\"\n", "unknown field `quick`"),
    ] {
        std::fs::write(&config, format!("{original}\n{table}")).expect("write");
        let out = strata(strata_bin!(), &ws, &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains("[STRATA-E0601]") && err.contains(said), "{table}: {err}");
    }
    std::fs::write(&config, &original).expect("write");
    let bad_tier = ROLES_PLAN.replace("model = \"strong\"", "model = \"huge\"");
    std::fs::write(&plan_path, bad_tier).expect("plan");
    let out = strata(strata_bin!(), &ws, &[&args[..], &["--check"]].concat());
    let said = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && said.contains("task tests: model") && said.contains("\"huge\" is not a model tier"),
        "{said}"
    );
    std::fs::write(&plan_path, ROLES_PLAN).expect("plan");
    assert!(strata(strata_bin!(), &ws, &args).status.success());
    let out = strata(strata_bin!(), &ws, &["audit", "run", "models"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("review: routed on")
            && text.contains("model the provider's default (tier strong from the profile)"),
        "{text}"
    );
    assert!(text.contains("tests: routed on") && text.contains("(tier strong from the task)"), "{text}");
}
