//! `strata eval run`: the paired measurement runner. Every chosen corpus task runs once under
//! the baseline policy and once under the candidate, each arm in a fresh workspace of its own
//! (`strata init`, the arm's policy as its `[context_efficiency]` table, a new git repository
//! made from the task's self-contained inputs: its `files`, a TASK.md, its `verify` checks), by the same `strata run` every plan goes through
//! (this binary, run as a child process, so an arm is exactly a run a person could repeat). Each
//! pair is then read from the arm's own journal: the usage reports, the provider's session
//! totals, the efficiency events' outcome, the task's end and any write outside its ownership.
//!
//! What a pair's fields are, from which events:
//!
//! | field | events |
//! |---|---|
//! | `cost_micros` | the provider's own totals per session (`telemetry.session-reported`), else the session's usage deltas (`telemetry.usage-reported`): billed tokens (`--cost-basis tokens`) or cost in micro-units (`amount`, only where the provider bills it) |
//! | `telemetry_cost_micros` | the same figure as the attempts' efficiency events accounted it (`telemetry.efficiency-recorded`, billed namespace); null when none reported it |
//! | `wall_ms` | the attempts' `outcome.elapsed_ms` |
//! | `quality` | 0 unless `task.completed`; then 100 × checks passed / run of the accepted attempt (100 without checks) |
//! | `rework` | the largest `outcome.rework_rounds` |
//! | `findings` | every path of a `task.write-violation`, severity high |
//!
//! The document states its basis (`cost_basis`: `tokens` or `amount`), so a reader of the pairs
//! can tell billed tokens from micro-units.
//!
//! Provenance: a pair is `measured` (empirical, authorised) only when neither arm's journal
//! holds a simulated usage report; on the simulated provider every pair is `synthetic`, so
//! `eval sign` says `promotion_authorized: false` and `eval promote` refuses it.
//!
//! A POLICY is `fresh` (context efficiency off: every task a fresh worker with its own capsule,
//! as the baseline routes), a profile name (`quality`, `balanced`, `economy`, `latency`), or a
//! JSON object of `[context_efficiency]` keys (`{"profile": "economy", "max_nesting_depth": 3}`);
//! it is checked as the configuration would be before anything runs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use anyhow::{Context as _, bail};
use clap::Args;
use serde_json::{Value, json};
use strata_engine::promotion::corpus::{self, Corpus, Task};
use strata_engine::promotion::pairs::{self, ArmDoc, CorpusRef, CostBasis, FindingDoc, PairDoc, PairsDoc, Provenance};
use strata_engine::telemetry::events as tel;
use strata_engine::workgroup::events as wg;
use strata_engine::workgroup::plan::{self, OBJECTIVE_BYTES_MAX};

use crate::app::workspace::Workspace;
use crate::config::Config;

/// Largest POLICY argument, bytes.
pub const POLICY_BYTES_MAX: usize = 4_096;
/// Most tasks one `eval run` measures.
pub const TASKS_RUN_MAX: usize = 1_000;
/// Most events read from one arm's journal.
pub const ARM_EVENTS_MAX: u64 = 1_000_000;
/// The file that marks a directory as an arm `eval run` made (and may replace).
const ARM_MARK: &str = ".strata-eval-arm";

/// `strata eval run`'s arguments.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// Corpus file (default: the bundled synthetic corpus).
    #[arg(long, value_parser = crate::cli::path_arg)]
    pub corpus: Option<PathBuf>,
    /// The baseline policy: `fresh`, a profile name, or a JSON object of `[context_efficiency]` keys.
    #[arg(long)]
    pub baseline: String,
    /// The candidate policy, as --baseline.
    #[arg(long)]
    pub candidate: String,
    /// Provider every task runs on: sim, claude or codex.
    #[arg(long, value_parser = ["sim", "claude", "codex"])]
    pub provider: String,
    /// Write the pairs here (default: print them).
    #[arg(long, value_parser = crate::cli::path_arg)]
    pub out: Option<PathBuf>,
    /// Only these corpus tasks (repeatable).
    #[arg(long, value_name = "ID")]
    pub only: Vec<String>,
    /// At most N tasks, taken in turn from each stratum in corpus order.
    #[arg(long, value_name = "N")]
    pub tasks: Option<usize>,
    /// What a pair's cost counts: `tokens` (billed tokens, the four classes) or `amount` (billed
    /// cost, micro-units, where the provider bills one).
    #[arg(long, default_value = "tokens", value_parser = ["tokens", "amount"])]
    pub cost_basis: String,
    /// Seed of the simulated provider; task N of the run uses seed + N in both arms.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
}

/// An arm's policy: its name as given and the `[context_efficiency]` table it becomes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArmPolicy {
    /// As given on the command line.
    pub name: String,
    /// The TOML of the `[context_efficiency]` table.
    pub section: String,
}

/// Reads POLICY `s` of flag `flag`, checked as the workspace configuration would check it.
pub fn parse_policy(flag: &str, s: &str) -> anyhow::Result<ArmPolicy> {
    let s = s.trim();
    if s.is_empty() || s.len() > POLICY_BYTES_MAX {
        bail!(
            "[STRATA-E2200] {flag}: 1 to {POLICY_BYTES_MAX} bytes; give `fresh`, a profile name or a JSON object of [context_efficiency] keys"
        );
    }
    let keys: Value = match s {
        "fresh" => json!({"enabled": false}),
        p if strata_engine::workgroup::policy::Profile::parse(p).is_some() => json!({"profile": p}),
        j if j.starts_with('{') => serde_json::from_str(j).map_err(|e| {
            anyhow::anyhow!("[STRATA-E2200] {flag}: not a JSON object ({e}); e.g. '{{\"profile\": \"economy\"}}'")
        })?,
        other => bail!(
            "[STRATA-E2200] {flag} {other:?}: give `fresh`, one of quality, balanced, economy, latency, or a JSON object of [context_efficiency] keys"
        ),
    };
    let table = toml::Value::try_from(json!({ "context_efficiency": keys })).map_err(|e| {
        anyhow::anyhow!("[STRATA-E2200] {flag}: {e}; values are strings, numbers, booleans or tables (no null)")
    })?;
    let section = toml::to_string(&table).map_err(|e| anyhow::anyhow!("[STRATA-E2200] {flag}: {e}"))?;
    Config::parse(&format!("{}\n{section}", Config::default().render()), flag)
        .map_err(|e| anyhow::anyhow!("[STRATA-E2200] {flag} is not a valid policy: {e:#}"))?;
    Ok(ArmPolicy { name: s.to_owned(), section })
}

/// The tasks a run measures: `only` in corpus order when given, else every task; at most `n`,
/// taken in turn from each stratum (first of each, then second of each, …).
pub fn choose<'a>(c: &'a Corpus, only: &[String], n: Option<usize>) -> anyhow::Result<Vec<&'a Task>> {
    if let Some(missing) = only.iter().find(|id| !c.tasks.iter().any(|t| &t.id == *id)) {
        bail!(
            "[STRATA-E2201] --only {missing}: not a task of corpus {}; `strata eval corpus check` lists them",
            c.name
        );
    }
    let pool: Vec<&Task> = c.tasks.iter().filter(|t| only.is_empty() || only.contains(&t.id)).collect();
    let n = n.unwrap_or(pool.len());
    if n == 0 || n > TASKS_RUN_MAX {
        bail!("[STRATA-E2201] --tasks {n}: 1 to {TASKS_RUN_MAX}");
    }
    let mut by_stratum: BTreeMap<&str, std::collections::VecDeque<&Task>> = BTreeMap::new();
    let mut order = Vec::new();
    for t in &pool {
        if !by_stratum.contains_key(t.stratum.as_str()) {
            order.push(t.stratum.as_str());
        }
        by_stratum.entry(t.stratum.as_str()).or_default().push_back(t);
    }
    let mut chosen = Vec::new();
    while chosen.len() < n.min(pool.len()) {
        for s in &order {
            if let Some(t) = by_stratum.get_mut(s).and_then(std::collections::VecDeque::pop_front)
                && chosen.len() < n
            {
                chosen.push(t);
            }
        }
    }
    if chosen.len() > TASKS_RUN_MAX {
        bail!(
            "[STRATA-E2201] {} tasks; one run measures at most {TASKS_RUN_MAX} (use --tasks or --only)",
            chosen.len()
        );
    }
    Ok(chosen)
}

/// The one-task plan an arm runs for corpus task `t`: a writer (`ui-builder` in the
/// ui-integration stratum, else `backend-builder`) owning the task's `owned_files` (else
/// `src/`), with its `trivial` and `sensitivity` routing facts.
pub fn plan_for(t: &Task, workgroup: &str, provider: &str) -> String {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array().map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_owned)).collect()).unwrap_or_default()
    };
    let mut owns = strings(&t.routing["owned_files"]);
    if owns.is_empty() {
        owns.push("src/".to_owned());
    }
    let role = if t.stratum == "ui-integration" { "ui-builder" } else { "backend-builder" };
    let mut objective =
        format!("{}\n\n{}\n\nThe task is described in TASK.md at the repository's root.", t.title, t.objective);
    if objective.len() > OBJECTIVE_BYTES_MAX {
        objective = format!("{}\n\nThe whole task is in TASK.md at the repository's root; read it first.", t.title);
    }
    let id = if plan::is_name(&t.id) { t.id.as_str() } else { "task" };
    let mut task = toml::map::Map::new();
    task.insert("id".into(), id.into());
    task.insert("role".into(), role.into());
    task.insert("objective".into(), objective.into());
    task.insert("owns".into(), toml::Value::Array(owns.into_iter().map(toml::Value::String).collect()));
    if t.routing["trivial"].as_bool() == Some(true) {
        task.insert("trivial".into(), true.into());
    }
    if let Some(s) = t.routing["sensitivity"].as_str().filter(|s| plan::SENSITIVITIES.contains(s)) {
        task.insert("sensitivity".into(), s.into());
    }
    if !t.verify.is_empty() {
        task.insert("verify".into(), toml::Value::Array(t.verify.iter().cloned().map(toml::Value::String).collect()));
    }
    let mut doc = toml::map::Map::new();
    doc.insert("workgroup".into(), workgroup.into());
    doc.insert("parallel".into(), 1.into());
    doc.insert("pipeline".into(), "light".into());
    doc.insert("provider".into(), provider.into());
    doc.insert("task".into(), toml::Value::Array(vec![toml::Value::Table(task)]));
    toml::to_string(&toml::Value::Table(doc)).unwrap_or_default()
}

/// What one arm's journal says about its task.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Measured {
    /// The task completed.
    pub accepted: bool,
    /// Checks passed and run in the accepted attempt (none: it had none).
    pub checks: Option<(u64, u64)>,
    /// Rework rounds.
    pub rework: u32,
    /// The bill: provider totals per session, else its usage deltas (basis units).
    pub cost: Option<u64>,
    /// What the efficiency events accounted (basis units).
    pub telemetry_cost: Option<u64>,
    /// Attempts' elapsed time, ms.
    pub wall_ms: u64,
    /// Writes outside ownership.
    pub findings: Vec<FindingDoc>,
    /// A usage report came from the simulated provider.
    pub synthetic: bool,
    /// Efficiency events read.
    pub efficiency_events: u64,
}

/// The figure of counters `c` (a `Counters` object) on `basis`.
fn basis_figure(c: &Value, basis: &str) -> Option<u64> {
    if basis == "amount" {
        return c["cost_micros"].as_u64();
    }
    let parts: Vec<u64> = ["input_tokens", "cache_creation_tokens", "cache_read_tokens", "output_tokens"]
        .iter()
        .filter_map(|k| c[*k].as_u64())
        .collect();
    (!parts.is_empty()).then(|| parts.iter().sum())
}

/// Measures an arm from its journal's events `(type, payload)` in journal order.
pub fn measure(events: &[(String, Value)], basis: &str) -> Measured {
    let mut m = Measured::default();
    let mut usage: BTreeMap<String, Option<u64>> = BTreeMap::new();
    let mut totals: BTreeMap<String, Option<u64>> = BTreeMap::new();
    let mut telemetry: Option<u64> = None;
    let mut dispatches = 0u32;
    for (ty, p) in events {
        match ty.as_str() {
            tel::USAGE_REPORTED => {
                let session = p["session"].as_str().unwrap_or_default().to_owned();
                m.synthetic |= p["provider"] == "simulated";
                let billed = p["provider"] == "simulated"
                    || basis == "tokens"
                    || matches!(p["accounting_source"].as_str(), Some("authoritative" | "provider-reported"));
                let d = if billed { basis_figure(&p["delta"], basis) } else { None };
                let e = usage.entry(session).or_insert(Some(0));
                *e = match (*e, d) {
                    (Some(a), Some(b)) => Some(a.saturating_add(b)),
                    _ => None,
                };
            }
            tel::SESSION_REPORTED => {
                let session = p["session"].as_str().unwrap_or_default().to_owned();
                totals.insert(session, basis_figure(&p["totals"], basis));
            }
            tel::EFFICIENCY_RECORDED => {
                m.efficiency_events += 1;
                let e = &p["event"];
                let b = &e["billed"];
                let figure = if basis == "amount" {
                    b["amount"].as_f64().map(|a| (a * 1e6).round() as u64)
                } else {
                    let parts: Vec<u64> = [
                        "uncached_input_tokens",
                        "cache_creation_input_tokens",
                        "cache_read_input_tokens",
                        "output_tokens",
                    ]
                    .iter()
                    .filter_map(|k| b[*k].as_u64())
                    .collect();
                    (!parts.is_empty()).then(|| parts.iter().sum())
                };
                if let Some(f) = figure {
                    telemetry = Some(telemetry.unwrap_or(0).saturating_add(f));
                }
                let o = &e["outcome"];
                m.wall_ms = m.wall_ms.saturating_add(o["elapsed_ms"].as_u64().unwrap_or(0));
                let rework = u32::try_from(o["rework_rounds"].as_u64().unwrap_or(0)).unwrap_or(u32::MAX);
                m.rework = m.rework.max(rework);
                if o["accepted_workgroup"] == true {
                    m.checks = o["verify_total"].as_u64().map(|t| (o["verify_passed"].as_u64().unwrap_or(0), t));
                }
            }
            wg::DISPATCHED => dispatches += 1,
            wg::COMPLETED => m.accepted = true,
            wg::VIOLATION => {
                for path in p["paths"].as_array().into_iter().flatten().filter_map(Value::as_str) {
                    let fingerprint: String = format!("write-outside-ownership:{path}").chars().take(128).collect();
                    if !m.findings.iter().any(|f| f.fingerprint == fingerprint) {
                        m.findings.push(FindingDoc { fingerprint, severity: "high".to_owned() });
                    }
                }
            }
            _ => {}
        }
    }
    m.rework = m.rework.max(dispatches.saturating_sub(1));
    // The bill: each session's provider totals where it reported them, else its usage deltas.
    let mut cost = Some(0u64);
    for (session, u) in &usage {
        let s = totals.get(session).copied().flatten().or(*u);
        cost = match (cost, s) {
            (Some(a), Some(b)) => Some(a.saturating_add(b)),
            _ => None,
        };
    }
    m.cost = if usage.is_empty() { None } else { cost.filter(|c| *c > 0) };
    m.telemetry_cost = telemetry;
    m
}

impl Measured {
    /// Quality points: 0 unless accepted, then the share of its checks passed.
    pub fn quality(&self) -> f64 {
        match (self.accepted, self.checks) {
            (false, _) => 0.0,
            (true, Some((p, t))) if t > 0 => (100.0 * p as f64 / t as f64).clamp(0.0, 100.0),
            (true, _) => 100.0,
        }
    }

    fn arm_doc(&self, cost: u64) -> ArmDoc {
        ArmDoc {
            cost_micros: cost.clamp(1, pairs::COST_MICROS_MAX),
            wall_ms: self.wall_ms.clamp(1, pairs::WALL_MS_MAX),
            quality: self.quality(),
            rework: self.rework.min(pairs::REWORK_MAX),
            findings: self.findings.iter().take(pairs::FINDINGS_MAX).cloned().collect(),
            telemetry_cost_micros: self.telemetry_cost.map(|t| t.min(pairs::COST_MICROS_MAX)),
        }
    }
}

/// One corpus task's pair, or why it has none.
pub fn pair(t: &Task, baseline: &Measured, candidate: &Measured) -> Result<PairDoc, String> {
    let (Some(b), Some(c)) = (baseline.cost, candidate.cost) else {
        let which = if baseline.cost.is_none() { "baseline" } else { "candidate" };
        return Err(format!("{}: the {which} arm's journal holds no billed figure on this cost basis", t.id));
    };
    let measured = !(baseline.synthetic || candidate.synthetic);
    Ok(PairDoc {
        task_id: t.id.clone(),
        stratum: t.stratum.clone(),
        provenance: Provenance {
            kind: if measured { "measured" } else { "synthetic" }.to_owned(),
            empirical: measured,
            promotion_authorized: measured,
        },
        baseline: baseline.arm_doc(b),
        candidate: candidate.arm_doc(c),
    })
}

/// Where the arms of a run on corpus `c` live under workspace directory `dir`.
fn arms_root(dir: &Path, c: &Corpus) -> PathBuf {
    Workspace::at(dir).strata_dir().join("eval").join(&c.name)
}

/// A fresh, empty arm directory (an earlier arm `eval run` made there is replaced).
fn fresh_dir(at: &Path) -> anyhow::Result<()> {
    if at.exists() {
        if !at.join(ARM_MARK).is_file() {
            bail!(
                "[STRATA-E2202] {} exists and is not an arm `strata eval run` made; move it away or run in another --dir",
                at.display()
            );
        }
        std::fs::remove_dir_all(at).with_context(|| format!("cannot remove the earlier arm {}", at.display()))?;
    }
    std::fs::create_dir_all(at).with_context(|| format!("cannot create {}", at.display()))?;
    std::fs::write(at.join(ARM_MARK), "made by strata eval run; replaced by the next run\n")?;
    Ok(())
}

fn git(repo: &Path, args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .context("[STRATA-E2203] cannot run git to make an arm's repository; install git")?;
    if !out.status.success() {
        bail!(
            "[STRATA-E2203] git {} in {} failed: {}",
            args.join(" "),
            repo.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Makes the arm's repository from the task's self-contained inputs: its `files` and TASK.md
/// (title and objective, unless the files hold one) in one first commit on `main`. The corpus
/// check has bounded the files and refused any path that leaves the repository.
fn materialize(repo: &Path, t: &Task) -> anyhow::Result<()> {
    std::fs::create_dir_all(repo)?;
    if !t.files.contains_key("TASK.md") {
        std::fs::write(repo.join("TASK.md"), format!("# {}\n\n{}\n", t.title, t.objective))?;
    }
    for (path, text) in &t.files {
        if !corpus::is_input_path(path) {
            bail!("[STRATA-E2201] task {}: input file {path:?} is not a plain relative path", t.id);
        }
        let at = repo.join(path);
        if let Some(parent) = at.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&at, text).with_context(|| format!("cannot write the input file {}", at.display()))?;
    }
    git(repo, &["init", "-q", "-b", "main"])?;
    git(repo, &["add", "-A"])?;
    git(repo, &["-c", "user.name=strata eval", "-c", "user.email=eval@localhost", "commit", "-q", "-m", "task inputs"])
}

/// Runs this binary with `args` in `cwd`, stdout to `out` and stderr to `log`; its exit code.
fn strata(exe: &Path, args: &[&std::ffi::OsStr], out: &Path, log: &Path) -> anyhow::Result<Option<i32>> {
    let status = Command::new(exe)
        .args(args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(out)?)
        .stderr(std::fs::File::create(log)?)
        .status()
        .with_context(|| format!("[STRATA-E2204] cannot start {}", exe.display()))?;
    Ok(status.code())
}

/// Runs one arm of task `t` (the `index`-th of the run) at `at`; its measurement.
#[allow(clippy::too_many_arguments)]
fn run_arm(
    exe: &Path,
    at: &Path,
    t: &Task,
    arm: &str,
    policy: &ArmPolicy,
    provider: &str,
    seed: u64,
    basis: &str,
) -> anyhow::Result<Measured> {
    fresh_dir(at)?;
    let (repo, ws_dir, plan_path) = (at.join("repo"), at.join("ws"), at.join("plan.toml"));
    materialize(&repo, t)?;
    std::fs::create_dir_all(&ws_dir)?;
    let o = |s: &str| std::ffi::OsString::from(s);
    let init = [o("--dir"), ws_dir.clone().into_os_string(), o("init"), o("--durability"), o("process")];
    let refs: Vec<&std::ffi::OsStr> = init.iter().map(|s| s.as_os_str()).collect();
    if strata(exe, &refs, &at.join("init.out"), &at.join("init.log"))? != Some(0) {
        bail!("[STRATA-E2204] `strata init` of arm {} failed; see {}", at.display(), at.join("init.log").display());
    }
    let ws = Workspace::at(&ws_dir);
    let config = std::fs::read_to_string(ws.config_path())
        .with_context(|| format!("cannot read {}", ws.config_path().display()))?;
    std::fs::write(
        ws.config_path(),
        format!("{config}\n# The policy of this arm (strata eval run {arm}: {}).\n{}", policy.name, policy.section),
    )?;
    std::fs::write(&plan_path, plan_for(t, &format!("eval-{arm}"), provider))?;
    let run = [
        o("--dir"),
        ws_dir.clone().into_os_string(),
        o("--json"),
        o("run"),
        plan_path.clone().into_os_string(),
        o("--repo"),
        repo.clone().into_os_string(),
        o("--provider"),
        o(provider),
        o("--seed"),
        o(&seed.to_string()),
        o("--time-scale"),
        o("0"),
    ];
    let refs: Vec<&std::ffi::OsStr> = run.iter().map(|s| s.as_os_str()).collect();
    let (out, log) = (at.join("run.json"), at.join("run.log"));
    match strata(exe, &refs, &out, &log)? {
        // Completed, or a task failed: both are outcomes to measure.
        Some(0 | 3) => {}
        code => bail!(
            "[STRATA-E2204] `strata run` of task {} under the {arm} policy ended with {}; see {} and {}",
            t.id,
            code.map_or_else(|| "a signal".to_owned(), |c| format!("exit code {c}")),
            log.display(),
            out.display()
        ),
    }
    let journal = ws.open_journal("eval run")?;
    let mut events = Vec::new();
    let head = journal.head().seq;
    let mut from = 1;
    while from <= head.min(ARM_EVENTS_MAX) {
        let batch = journal.read_range(from, strata_journal::limits::READ_EVENTS_MAX)?;
        let Some(last) = batch.last().map(|e| e.seq) else { break };
        for e in batch {
            let payload: Value = serde_json::from_slice(&e.payload).unwrap_or(Value::Null);
            events.push((e.event_type, payload));
        }
        from = last + 1;
    }
    journal.close_blocking()?;
    Ok(measure(&events, basis))
}

/// `strata eval run`: measures every chosen task under both policies; writes or prints the pairs.
pub fn run(
    o: &crate::output::Out,
    dir: &Path,
    args: RunArgs,
    corpus_value: &Value,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let baseline = parse_policy("--baseline", &args.baseline)?;
    let candidate = parse_policy("--candidate", &args.candidate)?;
    let report = corpus::check(corpus_value).map_err(|e| anyhow::anyhow!("[STRATA-E1404] {e}"))?;
    if !report.ok {
        bail!(
            "[STRATA-E2201] corpus {} has {} problems; `strata eval corpus check` lists them, and pairs are measured only on a corpus without any",
            report.name,
            report.problems.len()
        );
    }
    let c = corpus::parse(corpus_value).map_err(|e| anyhow::anyhow!("[STRATA-E1404] {e}"))?;
    let chosen = choose(&c, &args.only, args.tasks)?;
    // clap has already held --cost-basis to these names.
    let basis = CostBasis::parse(&args.cost_basis).ok_or_else(|| {
        anyhow::anyhow!("[STRATA-E2206] --cost-basis {:?}: one of {}", args.cost_basis, CostBasis::NAMES.join(", "))
    })?;
    let exe = std::env::current_exe().context("[STRATA-E2204] cannot find strata's own executable to run the arms")?;
    let root = arms_root(dir, &c);
    let n = chosen.len();
    let mut pairs_out = Vec::new();
    let mut rows = Vec::new();
    let mut unmeasured = Vec::new();
    for (i, t) in chosen.iter().enumerate() {
        let seed = args.seed.wrapping_add(i as u64);
        let at = root.join(&t.id);
        let mut arms = Vec::new();
        for (arm, policy) in [("baseline", &baseline), ("candidate", &candidate)] {
            errln!(o, "[{}/{n}] {} under the {arm} policy ({}) on {}", i + 1, t.id, policy.name, args.provider);
            arms.push(run_arm(&exe, &at.join(arm), t, arm, policy, &args.provider, seed, basis.as_str())?);
        }
        let row = json!({
            "task_id": t.id, "stratum": t.stratum, "dir": at.display().to_string(),
            "baseline": arm_json(&arms[0]), "candidate": arm_json(&arms[1]),
        });
        match pair(t, &arms[0], &arms[1]) {
            Ok(p) => pairs_out.push(p),
            Err(why) => {
                errln!(o, "  not measured: {why}");
                unmeasured.push(why);
            }
        }
        rows.push(row);
    }
    if pairs_out.is_empty() {
        bail!(
            "[STRATA-E2205] no task could be measured on cost basis {}: {}; the provider reports no such figure (Codex and Claude Code report tokens: use --cost-basis tokens)",
            args.cost_basis,
            unmeasured.join("; ")
        );
    }
    let synthetic = pairs_out.iter().any(|p| !p.provenance.promotes());
    let doc = PairsDoc {
        schema: pairs::SCHEMA.to_owned(),
        corpus: CorpusRef { name: c.name.clone(), version: c.version.clone(), digest: report.digest.clone() },
        cost_basis: Some(basis),
        pairs: pairs_out,
    };
    let text = serde_json::to_string_pretty(&doc)?;
    let Some(out) = &args.out else {
        outln!(o, "{text}");
        return Ok(exit(&unmeasured));
    };
    crate::cli::write_private_file(out, text.as_bytes())?;
    if synthetic {
        errln!(o, "note: the pairs are synthetic (the {} provider); they never promote", args.provider);
    }
    let summary = json!({
        "pairs_file": out.display().to_string(),
        "corpus": {"name": c.name, "version": c.version, "digest": report.digest, "synthetic": c.synthetic},
        "baseline": baseline.name,
        "candidate": candidate.name,
        "provider": args.provider,
        "cost_basis": basis.as_str(),
        "provenance": if synthetic { "synthetic" } else { "measured" },
        "pairs": doc.pairs.len(),
        "unmeasured": unmeasured,
        "tasks": rows,
    });
    if json {
        outln!(o, "{}", serde_json::to_string_pretty(&summary)?);
    } else {
        let mut table =
            crate::table::Table::new(&["task", "arm", "accepted", "cost", "telemetry", "wall ms", "quality", "rework"]);
        for r in &rows {
            for arm in ["baseline", "candidate"] {
                let a = &r[arm];
                let f = |v: &Value| v.as_u64().map_or_else(|| "unknown".to_owned(), |x| x.to_string());
                table.row(vec![
                    r["task_id"].as_str().unwrap_or_default().to_owned(),
                    arm.to_owned(),
                    a["accepted"].to_string(),
                    f(&a["cost"]),
                    f(&a["telemetry_cost"]),
                    f(&a["wall_ms"]),
                    a["quality"].to_string(),
                    a["rework"].to_string(),
                ]);
            }
        }
        out!(o, "{}", table.render());
        outln!(
            o,
            "wrote {} pairs ({}, cost_basis {}: cost in {}) to {}",
            doc.pairs.len(),
            if synthetic { "synthetic" } else { "measured" },
            basis.as_str(),
            match basis {
                CostBasis::Tokens => "billed tokens",
                CostBasis::Amount => "billed micro-units",
            },
            out.display()
        );
    }
    Ok(exit(&unmeasured))
}

fn exit(unmeasured: &[String]) -> ExitCode {
    if unmeasured.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(crate::cli::EXIT_PROBLEMS) }
}

fn arm_json(m: &Measured) -> Value {
    json!({
        "accepted": m.accepted,
        "checks": m.checks.map(|(p, t)| json!({"passed": p, "total": t})),
        "cost": m.cost,
        "telemetry_cost": m.telemetry_cost,
        "wall_ms": m.wall_ms,
        "quality": m.quality(),
        "rework": m.rework,
        "findings": m.findings.len(),
        "synthetic": m.synthetic,
        "efficiency_events": m.efficiency_events,
    })
}
