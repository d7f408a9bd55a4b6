//! On-demand context through a real MCP client (rmcp's, over `strata mcp` on stdio): a prompt
//! offers its profile's `onDemand` items instead of including them; a worker's `get_context`
//! for a never-listed item is refused and recorded; an item beyond the remaining budget is
//! refused with the exact shortfall; a served item is in the prompt's bill of materials as
//! fetched later (`strata audit context`), in `strata audit session` for a worker of a run, and
//! `strata prompt verify` re-renders it byte for byte.

use std::path::Path;

use serde_json::{Value, json};
use strata_tests::{strata_bin, strata_ok};

use crate::mcp::{client, ok, refused, rt};

const BIN: &str = strata_bin!();

fn cli_json(ws: &Path, args: &[&str]) -> Value {
    strata_tests::strata_json(BIN, ws, args)
}

/// Assembles task `task`'s prompt under `profile` for `plan`; returns its manifest and prompt.
fn assemble(ws: &Path, task: &str, profile: &str, plan: &str) -> (Value, String) {
    let out = ws.join(format!("{task}.prompt.md"));
    strata_ok(
        BIN,
        ws,
        &["prompt", "assemble", "--task", task, "--profile", profile, "--plan", plan, "--out", out.to_str().unwrap()],
    );
    let manifest = ws.join(format!("{task}.prompt.md.manifest.json"));
    (serde_json::from_slice(&std::fs::read(manifest).unwrap()).unwrap(), std::fs::read_to_string(out).unwrap())
}

/// The event at `seq` (its type and payload), read once no `strata mcp` holds the journal.
fn event_at(ws: &Path, seq: u64) -> (String, Value) {
    let events = strata_tests::journal_events(ws);
    let (_, t, v) = events.into_iter().nth(seq as usize - 1).expect("the recorded event");
    (t, v)
}

/// The sequence a refusal says it was recorded at.
fn recorded_at(message: &str) -> u64 {
    let tail = message.rsplit("recorded at journal sequence ").next().unwrap();
    tail.trim_end_matches(|c: char| !c.is_ascii_digit()).parse().unwrap_or_else(|_| panic!("{message}"))
}

#[test]
fn get_context_serves_what_is_on_demand_refuses_never_and_over_budget_and_records_every_request() {
    let tmp = tempfile::tempdir().unwrap();
    let (ws, _) = strata_tests::seed_workspace(BIN, tmp.path());
    let (m, prompt) = assemble(&ws, "T-od", "ui-developer", "CR-4");
    // onDemand items are offered, not included: one line each in the last section.
    let offered = m["offered"].as_array().expect("the prompt offers its onDemand items").clone();
    assert!(!offered.is_empty(), "{m:#}");
    assert!(m["included"].as_array().unwrap().iter().all(|i| !i["reason"].as_str().unwrap().starts_with("onDemand")));
    assert!(prompt.contains("\n## On demand\n"), "{prompt}");
    let domain =
        offered.iter().find(|i| i["section"] == "On demand" && i["path"].as_str().unwrap().contains("/domains/"));
    let domain = domain.expect("the domain of CR-4 is on demand for ui-developer").clone();
    let id = domain["item"].as_str().unwrap().to_owned();
    assert!(prompt.contains(&format!("- {id} at L1, {} tokens", domain["tokens"])), "{prompt}");
    assert_eq!(m["sections"].as_array().unwrap().last().unwrap(), "On demand");

    // A never-listed backend module, asked for by its virtual path.
    let paths = cli_json(&ws, &["prompt", "paths", "specs/*/backend/**"]);
    let never_path = paths["paths"][0].as_str().unwrap().to_owned();
    let budget = m["tokenBudget"].as_u64().unwrap();
    let total = m["totalTokens"].as_u64().unwrap();
    let (never_seq, served) = rt().block_on(async {
        let c = client(&ws).await;
        let text = refused(
            &c,
            "get_context",
            json!({"task": "T-od", "item": never_path, "reason": "the screen calls this module"}),
        )
        .await;
        assert!(text.contains("[STRATA-E2705]") && text.contains("specs/*/backend/**"), "{text}");
        let never_seq = recorded_at(&text);
        // Something already in the prompt is not on demand.
        let included = m["included"].as_array().unwrap().iter().find(|i| i["section"] == "Change request").unwrap();
        let text =
            refused(&c, "get_context", json!({"task": "T-od", "item": included["item"], "reason": "again"})).await;
        assert!(text.contains("[STRATA-E2706]") && text.contains("it is in the prompt at L1"), "{text}");
        // Finer than offered.
        if let Some(research) = offered.iter().find(|i| i["level"] == "L2") {
            let text = refused(
                &c,
                "get_context",
                json!({"task": "T-od", "item": research["item"], "level": "L1", "reason": "the detail"}),
            )
            .await;
            assert!(text.contains("[STRATA-E2707]"), "{text}");
        }
        // At L1 it would be a fourth specification at L1: ui-developer's maxFullSpecs is 3, and
        // the prompt has 3.
        let text = refused(&c, "get_context", json!({"task": "T-od", "item": id, "reason": "all of it"})).await;
        assert!(text.contains("[STRATA-E2708]") && text.contains("more than maxFullSpecs 3 (3 already"), "{text}");
        // Served: the offered domain at L2, within the budget.
        let served = ok(
            &c,
            "get_context",
            json!({"task": "T-od", "item": id, "level": "L2", "reason": "the domain's rounding rules", "session": "worker-1"}),
        )
        .await;
        let item = &served["items"][0];
        assert_eq!((item["item"].as_str(), item["level"].as_str()), (Some(id.as_str()), Some("L2")));
        assert_eq!(item["content_hash"], domain["contentHash"], "the artifact the prompt offered");
        let content = item["content"].as_str().unwrap();
        assert!(content.len() > 50 && !prompt.contains(content.trim()), "served, and not in the prompt: {content}");
        let tokens = item["tokens"].as_u64().unwrap();
        assert!(tokens > 0 && tokens < domain["tokens"].as_u64().unwrap(), "L2 is smaller than the L1 offered");
        assert_eq!(served["tokens"].as_u64().unwrap(), tokens);
        assert_eq!(served["remaining"].as_u64().unwrap(), budget - total - tokens);
        // A malformed request, or one naming no prompt, records nothing.
        let text = refused(&c, "get_context", json!({"task": "T-od", "item": id, "reason": ""})).await;
        assert!(text.contains("[STRATA-E2702]"), "{text}");
        let text = refused(&c, "get_context", json!({"task": "nope", "item": id, "reason": "x"})).await;
        assert!(text.contains("[STRATA-E2700]"), "{text}");
        c.cancel().await.unwrap();
        (never_seq, served)
    });
    let (ty, e) = event_at(&ws, never_seq);
    assert_eq!(
        (ty.as_str(), e["rule"].as_str(), e["asked"].as_str()),
        ("context.fetch-refused", Some("never"), Some(never_path.as_str()))
    );
    let logged = served["logged_at"].as_u64().unwrap();
    let (ty, e) = event_at(&ws, logged);
    assert_eq!(ty, "context.fetched");
    assert_eq!(
        e["items"][0]["reason"],
        format!("fetched later: the domain's rounding rules ({})", domain["reason"].as_str().unwrap())
    );
    assert_eq!(strata_tests::head_seq(BIN, &ws), logged, "the refused malformed requests recorded nothing");

    // The bill of materials: what the prompt offered, what was fetched later and why, what was refused.
    let audit = cli_json(&ws, &["audit", "context", "--task", "T-od"]);
    let p = &audit["prompts"][0];
    let fetched = p["fetched_later"].as_array().unwrap();
    assert_eq!(fetched.len(), 1);
    assert_eq!(fetched[0]["fetch"]["items"][0]["item"], id.as_str());
    assert_eq!(fetched[0]["fetch"]["session"], "worker-1");
    let rules: Vec<&str> =
        p["refused_fetches"].as_array().unwrap().iter().map(|r| r["refusal"]["rule"].as_str().unwrap()).collect();
    assert_eq!(rules.first(), Some(&"never"), "{rules:?}");
    assert!(rules.contains(&"not-on-demand") && rules.contains(&"max-full-specs"), "{rules:?}");
    let text = strata_ok(BIN, &ws, &["audit", "context", "--task", "T-od"]);
    assert!(text.contains("fetched later (get_context):") && text.contains(&id), "{text}");
    // prompt verify recomputes the prompt and every item fetched later.
    let manifest = ws.join("T-od.prompt.md.manifest.json");
    let v = cli_json(&ws, &["prompt", "verify", manifest.to_str().unwrap()]);
    assert_eq!(v["ok"], true, "{v:#}");
    assert!(
        strata_ok(BIN, &ws, &["prompt", "verify", manifest.to_str().unwrap()])
            .contains("and the 1 serve fetched later")
    );
}

#[test]
fn an_on_demand_item_beyond_the_remaining_budget_is_refused_with_the_shortfall() {
    let tmp = tempfile::tempdir().unwrap();
    let (ws, _) = strata_tests::seed_workspace(BIN, tmp.path());
    let (m, _) = assemble(&ws, "T-wide", "ui-developer", "CR-4");
    let domain = m["offered"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["path"].as_str().unwrap().contains("/domains/"))
        .unwrap()
        .clone();
    let tokens = domain["tokens"].as_u64().unwrap();
    // A profile like ui-developer whose budget leaves one token too few for the domain. Its
    // prompt differs only in the budget the header states, so a second pass settles the budget.
    let mut profile: Value = serde_json::from_str(include_str!("../../profiles/ui-developer.json")).unwrap();
    profile["agentId"] = "ui-tight".into();
    profile["contextProfile"]["maxFullSpecs"] = 10.into();
    // First with the largest budget (nothing degrades), then one token short of the domain.
    let mut budget: u64 = 100_000;
    let mut found = None;
    for pass in 0..4 {
        profile["contextProfile"]["tokenBudget"] = budget.into();
        let file = ws.join(format!("ui-tight-{pass}.json"));
        std::fs::write(&file, profile.to_string()).unwrap();
        strata_ok(BIN, &ws, &["profile", "register", file.to_str().unwrap()]);
        let (t, _) = assemble(&ws, "T-tight", "ui-tight", "CR-4");
        let total = t["totalTokens"].as_u64().unwrap();
        if budget.checked_sub(total) == Some(tokens - 1) {
            found = Some(total);
            break;
        }
        budget = total + tokens - 1;
    }
    let total = found.expect("a budget one token short of the domain");
    let refused_seq = rt().block_on(async {
        let c = client(&ws).await;
        let text = refused(
            &c,
            "get_context",
            json!({"task": "T-tight", "item": domain["item"], "reason": "the domain's rules"}),
        )
        .await;
        assert!(text.contains("[STRATA-E2709]"), "{text}");
        assert!(
            text.contains(&format!(
                "needs {tokens} tokens but only {} of the prompt's budget of {budget} are left",
                tokens - 1
            )),
            "{text}"
        );
        assert!(text.contains(&format!("the prompt used {total}, earlier fetches 0): 1 tokens short")), "{text}");
        // At a coarser level it fits.
        let served = ok(
            &c,
            "get_context",
            json!({"task": "T-tight", "item": domain["item"], "level": "L3", "reason": "just what it is"}),
        )
        .await;
        assert_eq!(served["items"][0]["level"], "L3");
        assert_eq!(served["remaining"].as_u64().unwrap(), tokens - 1 - served["tokens"].as_u64().unwrap());
        c.cancel().await.unwrap();
        recorded_at(&text)
    });
    let (ty, e) = event_at(&ws, refused_seq);
    assert_eq!(
        (ty.as_str(), e["rule"].as_str(), e["shortfall"].as_u64()),
        ("context.fetch-refused", Some("over-budget"), Some(1))
    );
}

#[test]
fn a_run_workers_fetch_is_in_audit_session_and_its_prompt_still_verifies() {
    let tmp = tempfile::tempdir().unwrap();
    let at = tmp.path().join("example");
    let out = strata_tests::strata(
        BIN,
        tmp.path(),
        &["run", "--example", "--at", at.to_str().unwrap(), "--time-scale", "0", "--json"],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let run = cli_json(&at, &["audit", "run", "cr-1-rollout"]);
    let session =
        run["sessions"].as_array().unwrap().iter().find(|x| x["task"] == "invoice-screen").unwrap()["session"]
            .as_str()
            .unwrap()
            .to_owned();
    let by_session = cli_json(&at, &["audit", "session", &session]);
    let task = &by_session["tasks"][0];
    assert_eq!(task["fetched_later"].as_array().unwrap().len(), 0);
    let prompt_task = task["prompt"]["prompt_task"].as_str().unwrap().to_owned();
    // The worker's prompt offers the domains of CR-1 (ui-developer lists them on demand).
    let ctx = cli_json(&at, &["audit", "context", "--task", &prompt_task]);
    let m = &ctx["prompts"].as_array().unwrap().last().unwrap()["manifest"];
    let offered: Vec<&Value> = m["offered"]
        .as_array()
        .expect("offered items")
        .iter()
        .filter(|i| i["path"].as_str().unwrap().contains("/domains/"))
        .collect();
    assert!(!offered.is_empty(), "{m:#}");
    let served = rt().block_on(async {
        let c = client(&at).await;
        let served = ok(
            &c,
            "get_context",
            json!({"task": prompt_task, "item": "{functionalDomainSpec}", "level": "L2", "reason": "the ledger rules", "session": session}),
        )
        .await;
        c.cancel().await.unwrap();
        served
    });
    let items: Vec<&str> = served["items"].as_array().unwrap().iter().map(|i| i["item"].as_str().unwrap()).collect();
    let want: Vec<&str> = offered.iter().map(|i| i["item"].as_str().unwrap()).collect();
    assert_eq!(items, want, "the entry gives everything it offered");
    let by_session = cli_json(&at, &["audit", "session", &session]);
    let fetched = by_session["tasks"][0]["fetched_later"].as_array().unwrap();
    assert_eq!(fetched.iter().map(|f| f["item"].as_str().unwrap()).collect::<Vec<_>>(), want);
    assert!(fetched.iter().all(|f| f["reason"].as_str().unwrap().starts_with("fetched later: the ledger rules")));
    let text = strata_ok(BIN, &at, &["audit", "session", &session]);
    assert!(text.contains("fetched"), "{text}");
    // The prompt file the run wrote still verifies, with what was fetched later.
    let manifest = find_manifest(&at, "invoice-screen").expect("the run wrote the task's manifest");
    let v = cli_json(&at, &["prompt", "verify", manifest.to_str().unwrap()]);
    assert_eq!(v["ok"], true, "{v:#}");
}

fn find_manifest(dir: &Path, task: &str) -> Option<std::path::PathBuf> {
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let p = e.path();
        if p.is_dir() {
            if let Some(found) = find_manifest(&p, task) {
                return Some(found);
            }
        } else if p
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(&format!("{task}.")) && n.ends_with(".manifest.json"))
        {
            return Some(p);
        }
    }
    None
}

/// A real Claude Code worker of `strata run` (against the fake model server) asks for an item
/// its prompt offers on demand through the MCP server strata starts for it: served, recorded on
/// its prompt's stream, in `strata audit session`, and its prompt still verifies.
#[test]
#[ignore = "needs the claude CLI from npm; CI runs it"]
fn a_real_claude_worker_fetches_an_on_demand_item_through_get_context() {
    use strata_tests::fake_model::{FakeModel, Turn};
    use strata_tests::real_cli::{self, CLAUDE_VAR, Scratch};
    let scratch = Scratch::new().expect("scratch");
    let at = scratch.root().join("example");
    let out = strata_tests::strata(
        BIN,
        scratch.root(),
        &["run", "--example", "--at", at.to_str().unwrap(), "--time-scale", "0"],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let plan = at.join("look.toml");
    std::fs::write(
        &plan,
        "workgroup = \"look\"\nparallel = 1\npipeline = \"light\"\nretries = 0\nprovider = \"claude\"\n[[task]]\nid = \"domains\"\nrole = \"analyst\"\nprofile = \"ui-developer\"\nchange_request = \"CR-1\"\nobjective = \"Say which domain rules apply.\"\n",
    )
    .unwrap();
    let lineage = "look.domains";
    let ask = json!({"task": lineage, "item": "{functionalDomainSpec}", "level": "L2", "reason": "the domain rules"});
    let fake = FakeModel::start(vec![
        Turn::claude_mcp(strata_adapters::providers::worker_process::KNOWLEDGE_SERVER, "get_context", ask),
        Turn::text("Done.").sticky(),
    ])
    .expect("fake model");
    let mut cmd = real_cli::strata_run(Path::new(BIN), &at, &plan, &at, &scratch, &fake);
    cmd.env("STRATA_CLAUDE", real_cli::cli_path(CLAUDE_VAR).unwrap_or_else(|e| panic!("{e}")))
        .env("STRATA_CLAUDE_MODEL", real_cli::CLAUDE_MODEL);
    let out = real_cli::run_with_timeout(cmd, std::time::Duration::from_secs(300)).expect("strata run");
    assert_eq!(out.status.and_then(|s| s.code()), Some(0), "{}", out.describe());
    // The tool's answer went back to the model, served.
    let results: Vec<String> =
        fake.model_requests().iter().flat_map(|r| r.tool_results()).map(|t| format!("{t:?}")).collect();
    assert!(results.iter().any(|t| t.contains("items") && !t.contains("is_error: true")), "{results:?}");
    let events = strata_tests::journal_events(&at);
    let fetched: Vec<&Value> = events
        .iter()
        .filter(|(_, t, v)| t == "context.fetched" && v.to_string().contains(lineage))
        .map(|(_, _, v)| v)
        .collect();
    assert_eq!(fetched.len(), 1, "{:?}", events.iter().map(|(_, t, _)| t).collect::<Vec<_>>());
    let run = cli_json(&at, &["audit", "run", "look"]);
    let session = run["sessions"][0]["session"].as_str().expect("the worker's session").to_owned();
    let by_session = cli_json(&at, &["audit", "session", &session]);
    let later = by_session["tasks"][0]["fetched_later"].as_array().expect("fetched_later");
    assert!(
        !later.is_empty() && later.iter().all(|f| f["reason"].as_str().unwrap().contains("the domain rules")),
        "{by_session:#}"
    );
    let manifest =
        find_manifest(&at.join(".strata/prompts/look"), "domains").expect("the run wrote the task's manifest");
    let v = cli_json(&at, &["prompt", "verify", manifest.to_str().unwrap()]);
    assert_eq!(v["ok"], true, "{v:#}");
}
