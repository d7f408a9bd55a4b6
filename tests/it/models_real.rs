//! Models per role with the real Claude Code and Codex CLIs against the fake model server: under
//! the `balanced` profile a planner runs on the strong tier and an analyst on the standard one,
//! each under the name `[context_efficiency.models.<provider>]` gives that tier, and every model
//! request a worker sends names the model its dispatch recorded.

use std::path::PathBuf;

use serde_json::Value;
use strata_tests::fake_model::{FakeModel, Turn};
use strata_tests::real_cli::{self, CLAUDE_VAR, CODEX_VAR, Scratch};
use strata_tests::{run_setting, strata_bin};

fn plan(provider: &str) -> String {
    format!(
        r#"
workgroup = "tiers"
parallel = 1
pipeline = "light"
retries = 0
provider = "{provider}"
[[task]]
id = "plan"
role = "planner"
objective = "Split the work on the parser into tasks (planner-objective)."
[[task]]
id = "read"
role = "analyst"
objective = "Say what the parser does (analyst-objective)."
after = ["plan"]
"#
    )
}

struct Ran {
    ws: PathBuf,
    code: Option<i32>,
    described: String,
    /// `(model, request text)` of every model request.
    requests: Vec<(String, String)>,
    _scratch: Scratch,
}

/// Runs the plan on `provider` with `table` (the provider's model names) in the config and no
/// model variable set, so the names come from the profile and the table alone.
fn real_run(provider: &str, table: &str) -> Ran {
    let scratch = Scratch::new().expect("scratch");
    let files = [("src/lib.rs", "// the parser\n")];
    let (ws, repo, plan_path) = run_setting(strata_bin!(), scratch.root(), &files, &plan(provider));
    let cfg = ws.join(".strata/config.toml");
    let text = std::fs::read_to_string(&cfg).expect("config");
    std::fs::write(&cfg, format!("{text}\n[context_efficiency.models.{provider}]\n{table}\n")).expect("config");
    let fake = FakeModel::start(vec![Turn::text("Done.").sticky()]).expect("fake model");
    let mut cmd = real_cli::strata_run(std::path::Path::new(strata_bin!()), &ws, &plan_path, &repo, &scratch, &fake);
    if provider == "claude" {
        cmd.env("STRATA_CLAUDE", real_cli::cli_path(CLAUDE_VAR).unwrap_or_else(|e| panic!("{e}")));
    } else {
        cmd.env("STRATA_CODEX", real_cli::cli_path(CODEX_VAR).unwrap_or_else(|e| panic!("{e}")))
            .env("STRATA_CODEX_BASE_URL", format!("{}/v1", fake.base_url()));
    }
    let out = real_cli::run_with_timeout(cmd, std::time::Duration::from_secs(300)).expect("strata run");
    let requests = fake
        .model_requests()
        .iter()
        .map(|r| (r.json().and_then(|j| j["model"].as_str().map(str::to_owned)).unwrap_or_default(), r.text()))
        .collect();
    Ran { ws, code: out.status.and_then(|s| s.code()), described: out.describe(), requests, _scratch: scratch }
}

/// Checks each task's dispatch chose `(tier, name)` and every request carrying its objective
/// named that model.
fn assert_models(r: &Ran, expected: &[(&str, &str, &str, &str)]) {
    assert_eq!(r.code, Some(0), "{}", r.described);
    let dispatched: Vec<Value> = strata_tests::journal_events(&r.ws)
        .into_iter()
        .filter(|(_, t, _)| t == "task.dispatched")
        .map(|(_, _, v)| v)
        .collect();
    for (task, marker, tier, name) in expected {
        let d = dispatched.iter().find(|d| d["task"] == *task).unwrap_or_else(|| panic!("{task} dispatched"));
        assert_eq!((d["model"]["tier"].as_str(), d["model"]["name"].as_str()), (Some(*tier), Some(*name)), "{d}");
        let asked: Vec<&str> =
            r.requests.iter().filter(|(_, text)| text.contains(marker)).map(|(m, _)| m.as_str()).collect();
        assert!(!asked.is_empty() && asked.iter().all(|m| m == name), "{task}: requests named {asked:?}, not {name}");
    }
}

#[test]
#[ignore = "needs the claude CLI from npm; CI runs it"]
fn claude_code_workers_run_on_the_model_the_profile_gives_their_role() {
    let r = real_run("claude", "strong = \"claude-opus-5-5\"\nstandard = \"claude-sonnet-4-5\"");
    assert_models(
        &r,
        &[
            ("plan", "planner-objective", "strong", "claude-opus-5-5"),
            ("read", "analyst-objective", "standard", "claude-sonnet-4-5"),
        ],
    );
}

#[test]
#[ignore = "needs the codex CLI from npm; CI runs it"]
fn codex_workers_run_on_the_model_the_profile_gives_their_role() {
    let r = real_run("codex", "strong = \"gpt-5.5-pro\"\nstandard = \"gpt-5.5\"");
    assert_models(
        &r,
        &[("plan", "planner-objective", "strong", "gpt-5.5-pro"), ("read", "analyst-objective", "standard", "gpt-5.5")],
    );
}
