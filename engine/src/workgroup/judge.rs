//! One ended attempt, judged whole: the post-turn check (what the worker wrote outside the files
//! it owns is a violation; `stop` fails the task, `flag` records it and discards the changes), the
//! rule that a run started on a real provider never takes a simulated worker's changes, the
//! task's outcome with its retry and backoff, the release of its claim, a completed session kept
//! warm, and its usage on the telemetry stream of the session's pseudonym. What the edge must do
//! after the append (apply the commit to the integration branch) comes back as data.
//! `strata run` and the `coordinator-faults` simulation both call [`judge`]; they differ in what
//! they observed of the worker ([`Observed`]: a git diff and the worker's stream, or a model's
//! draw) and in how they carry out the effect.

use strata_journal::{ExpectedVersion, StreamAppend};

use super::WorkgroupError;
use super::decide;
use super::events::{Violation, WorkerEnded};
use super::plan::overlaps;
use super::policy::{Handoff, TelemetryMode};
use super::state::{WorkerEnd, Workgroup};
use super::step;
use crate::ce::ledger::Ledger;
use crate::ce::ownership;
use crate::ce::router::Mode;
use crate::ports::{Clock, Ids};
use crate::telemetry::decide::{self as telemetry_decide, Request};
use crate::telemetry::events::{AccountingSource, Counters, Provider as TelemetryProvider};
use crate::telemetry::state::Telemetry;

/// The changes an attempt left in its worktree, as collected by the edge.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Repository-relative paths changed.
    pub files: Vec<String>,
    /// The commit holding them, when there is one.
    pub commit: Option<String>,
}

/// What the edge observed of an ended attempt besides the worker's own report.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    /// Writes outside the worker's directory that escaped the write guard (absolute paths).
    pub escaped: Vec<String>,
    /// Its changes inside its directory; `None` when it had no worktree.
    pub changes: Option<Changes>,
    /// A capped attempt's partial changes, saved as an artifact by the edge.
    pub partial: Option<super::verify::ArtifactRef>,
    /// Write-guard denials recorded for the attempt.
    pub denials: u64,
}

/// An ended attempt to judge.
pub struct Ending<'a> {
    /// The workgroup, as folded.
    pub group: &'a Workgroup,
    /// The dispatch ledger, as folded.
    pub ledger: &'a Ledger,
    /// The telemetry projection, as folded.
    pub telemetry: &'a Telemetry,
    /// The task.
    pub task: &'a str,
    /// Its attempt.
    pub attempt: u32,
    /// The paths the task owns.
    pub owns: &'a [String],
    /// The mode it ran as.
    pub mode: Mode,
    /// The provider that ran it.
    pub provider: &'a str,
    /// The worker's end as the runner recorded it.
    pub end: &'a WorkerEnd,
    /// What the edge observed.
    pub observed: Observed,
    /// What a write outside ownership does: `flag` or `stop`.
    pub on_violation: &'a str,
    /// The provider resumes sessions: a completed one is kept warm (when the workgroup's policy
    /// has context efficiency on).
    pub keeps_warm: bool,
    /// The coordinator's clock.
    pub now_ns: i64,
}

/// An end judged: one atomic append, then the effect.
#[derive(Clone, Debug)]
pub struct Judged {
    /// The workgroup's events (violation, outcome), the telemetry report, the ledger's release.
    pub appends: Vec<StreamAppend>,
    /// The commit to apply to the integration branch once the append is durable.
    pub integrate: Option<String>,
    /// For a failure retried: the plan's backoff, milliseconds.
    pub retry_ms: Option<u64>,
    /// The time its next attempt may be dispatched, as recorded.
    pub not_before_ns: Option<i64>,
    /// What the user is told.
    pub notes: Vec<String>,
    /// The handoff file to write before the append: workspace-relative path and text.
    pub handoff: Option<(String, String)>,
}

/// Directory of handoff files, relative to the workspace.
pub const HANDOFFS_DIR: &str = ".strata/handoffs";

/// Why the result of `task` gets a handoff file under `policy`'s threshold, if it does: every
/// result with `always`; with `material`, the work another agent or phase reads (a writer's, one
/// another task waits for or continues). A read-only side check nobody waits for keeps its
/// bounded summary in the journal only.
pub fn handoff_reason(g: &Workgroup, task: &str) -> Option<&'static str> {
    if g.policy.disk_handoff_threshold == Handoff::Always {
        return Some("always");
    }
    let t = g.plan.task(task)?;
    let read = g
        .plan
        .tasks
        .iter()
        .any(|o| o.spec.after.iter().any(|a| a == task) || o.spec.continues.as_deref() == Some(task));
    (t.writer || read).then_some("material")
}

/// The handoff text of a completed attempt: what a follow-up worker or person needs, bounded
/// (the summary is at most [`super::events::TEXT_BYTES_MAX`] bytes).
fn handoff_text(task: &str, attempt: u32, summary: &str, files: &[String]) -> String {
    let mut out = format!("# Handoff: task {task}, attempt {attempt}\n\n## Result\n\n{}\n", summary.trim());
    out.push_str("\n## Files changed\n\n");
    if files.is_empty() {
        out.push_str("none\n");
    }
    for f in files {
        out.push_str(&format!("- {f}\n"));
    }
    out
}

/// Judges `e`'s attempt; `wait_ms` turns a backoff into the wait the coordinator keeps (a
/// simulated worker's passes like its latency).
pub fn judge(
    e: Ending<'_>,
    wait_ms: impl Fn(u64) -> u64,
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<Judged, WorkgroupError> {
    let g = e.group;
    let id = e.task;
    let x = &e.end.ended;
    let mut events = Vec::new();
    let mut notes = Vec::new();
    let mut failure = if e.end.succeeded { None } else { Some(x.summary.clone()) };
    let mut retryable = true;
    let state = g.tasks.get(id);
    let capped = state.and_then(|t| t.capped.as_ref()).filter(|c| c.attempt == e.attempt).map(|c| c.reached);
    let check = state.and_then(|t| t.checked.as_ref()).filter(|c| c.attempt == e.attempt).and_then(|c| c.failed());
    let mut pause = None;
    if let Some(r) = capped {
        failure = Some(format!("capped at {}; its partial work is kept, not integrated", r.describe()));
    } else if let Some(c) = check {
        failure = Some(super::verify::failure_reason(c));
    }
    if x.authentication_failed {
        pause = Some(super::caps::Paused {
            reason: super::caps::PauseReason::Authentication,
            reached: None,
            task: Some(id.to_owned()),
            detail: super::verify::summary_of(&x.summary),
        });
    } else if e.observed.denials >= super::caps::GUARD_STORM_DENIALS {
        pause = Some(super::caps::Paused {
            reason: super::caps::PauseReason::WriteGuardStorm,
            reached: None,
            task: Some(id.to_owned()),
            detail: format!("the write guard denied {} writes of attempt {}", e.observed.denials, e.attempt),
        });
    }
    let mut outside = e.observed.escaped;
    if let Some(changes) = &e.observed.changes {
        for f in &changes.files {
            if !e.owns.iter().any(|o| overlaps(f, o)) && !outside.contains(f) {
                outside.push(f.clone());
            }
        }
    }
    if !outside.is_empty() {
        let v = Violation {
            task: id.to_owned(),
            attempt: e.attempt,
            session_id: x.session_id.clone().unwrap_or_default(),
            paths: outside.clone(),
            policy: e.on_violation.to_owned(),
        };
        events.push(decide::violation(g, &v, ids, clock)?);
        notes.push(format!("{id}: wrote outside its files: {}", outside.join(", ")));
        if e.on_violation == "stop" && failure.is_none() {
            failure = Some(format!("stopped: wrote outside its owned files ({})", outside.join(", ")));
            retryable = false;
        }
    }
    // A run started on a real provider never takes a simulated worker's changes.
    let real_run = g.started.provider.as_deref().is_some_and(|p| p != "sim");
    if real_run && e.provider == "sim" && failure.is_none() {
        failure = Some(
            "[STRATA-E2012] a simulated worker's result in a run started on a real provider; not integrated".into(),
        );
        retryable = false;
    }
    // Flagged: the owned part is not applied either; the task's changes are discarded.
    let (files, commit) = match e.observed.changes {
        Some(c) if failure.is_none() && outside.is_empty() => (c.files, c.commit),
        _ => (Vec::new(), None),
    };
    let files_changed = files.len();
    let handoff = match (&failure, handoff_reason(g, id)) {
        (None, Some(reason)) => {
            let text = handoff_text(id, e.attempt, &x.summary, &files);
            let path = format!("{HANDOFFS_DIR}/{}/{id}.{}.md", g.plan.workgroup, e.attempt);
            let r = super::events::HandoffRef {
                path: path.clone(),
                blake3: blake3::hash(text.as_bytes()).to_hex().to_string(),
                reason: reason.to_owned(),
            };
            Some((r, (path, text)))
        }
        _ => None,
    };
    let closed = step::close(
        g,
        e.ledger,
        step::End {
            task: id,
            attempt: e.attempt,
            ended: x,
            failure: failure.clone(),
            retryable,
            files,
            commit: commit.clone(),
            handoff: handoff.as_ref().map(|(r, _)| r.clone()),
            keeps_warm: e.keeps_warm && g.policy.enabled,
            now_ns: e.now_ns,
            warm_minutes: g.policy.warm_lease_minutes,
            failed_by: step::FailedBy {
                capped,
                partial: if capped.is_some() { e.observed.partial.clone() } else { None },
                check: if capped.is_none() { check.cloned() } else { None },
                authentication: x.authentication_failed,
            },
        },
        &wait_ms,
        ids,
        clock,
    )?;
    let sim = e.provider == "sim";
    let accepted_now = failure.is_none();
    notes.push(match (failure, closed.retry_ms) {
        (None, _) => format!("{id}: completed ({files_changed} files)"),
        (Some(reason), None) => format!("{id}: failed: {reason}"),
        (Some(reason), Some(0)) => format!("{id}: failed: {reason}; retrying"),
        (Some(reason), Some(ms)) if sim => {
            format!("{id}: failed: {reason}; retrying in {:.1} s (simulated time)", ms as f64 / 1000.0)
        }
        (Some(reason), Some(ms)) => format!("{id}: failed: {reason}; retrying in {:.1} s", ms as f64 / 1000.0),
    });
    events.push(closed.task_event);
    if let Some(p) = pause.filter(|_| g.paused.is_none()) {
        notes.push(format!("workgroup paused ({}): {}; {}", p.reason.as_str(), p.detail, p.reason.fix()));
        events.push(decide::event(ids, clock, super::events::PAUSED, &p)?);
    }
    let mut appends = vec![decide::append(g, events)];
    if g.policy.telemetry != TelemetryMode::Off {
        let facts = Attempt {
            group: g,
            task: id,
            provider: e.provider,
            mode: e.mode,
            accepted: accepted_now,
            checks: state.and_then(|t| t.checked.as_ref()).filter(|c| c.attempt == e.attempt).map(|c| c.tally()),
            rework_rounds: u64::from(e.attempt.saturating_sub(1)),
        };
        appends.extend(usage(e.telemetry, &facts, x, ids, clock)?);
    }
    appends.push(StreamAppend {
        stream: ownership::STREAM.to_owned(),
        expected: ExpectedVersion::Exact(e.ledger.version()),
        events: closed.ledger_events,
    });
    Ok(Judged {
        appends,
        integrate: commit,
        retry_ms: closed.retry_ms,
        not_before_ns: closed.not_before_ns,
        notes,
        handoff: handoff.map(|(_, effect)| effect),
    })
}

/// The pseudonym a session's telemetry is recorded under.
fn pseudonym(session: &str) -> String {
    format!("s-{}", &blake3::hash(session.as_bytes()).to_hex()[..20])
}

/// What the telemetry of an attempt records besides the worker's own report.
struct Attempt<'a> {
    group: &'a Workgroup,
    task: &'a str,
    provider: &'a str,
    mode: Mode,
    /// The attempt's work was accepted (its task completed).
    accepted: bool,
    /// `(passed, total)` of its checks, when it had any.
    checks: Option<(u64, u64)>,
    /// Attempts before this one.
    rework_rounds: u64,
}

/// The usage report of a worker's turn, on the telemetry stream of the session's pseudonym:
/// the session's running totals as the journal holds them plus this turn's usage (simulated
/// sessions have no totals that outlive the process, and a fork's provider totals start from
/// its parent's, which this session must not report again); then the attempt's
/// `knowzcode.efficiency-event/v1` with its three namespaces apart, and the provider's own totals
/// for the session when it reported them (what the report reconciles the deltas against).
fn usage(
    telemetry: &Telemetry,
    a: &Attempt<'_>,
    x: &WorkerEnded,
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<Option<StreamAppend>, WorkgroupError> {
    let (Some(source), Some(session)) = (x.accounting, &x.session_id) else { return Ok(None) };
    let mode = a.mode;
    let pseudonym = pseudonym(session);
    let provider = match a.provider {
        _ if x.synthetic => TelemetryProvider::Simulated,
        "claude" => TelemetryProvider::Claude,
        "codex" => TelemetryProvider::Codex,
        _ => TelemetryProvider::Other,
    };
    let prior = telemetry.sessions().get(&pseudonym).map(|s| s.highest).unwrap_or_default();
    let add = |a: Option<u64>, b: Option<u64>| Some(a.unwrap_or(0).saturating_add(b?));
    let u = &x.usage;
    let cumulative = Counters {
        input_tokens: add(prior.input_tokens, u.input_tokens),
        cache_creation_tokens: add(prior.cache_creation_tokens, u.cache_creation_tokens),
        cache_read_tokens: add(prior.cache_read_tokens, u.cache_read_tokens),
        output_tokens: add(prior.output_tokens, u.output_tokens),
        cost_micros: add(prior.cost_micros, u.cost_micros),
        wall_ms: add(prior.wall_ms, u.wall_ms),
    };
    // The model its dispatch chose, by its telemetry label: rollups per model attribute a
    // profile's cost (a tier left to the provider's default is unknown here).
    let model = a
        .group
        .tasks
        .get(a.task)
        .and_then(|t| t.dispatch.as_ref())
        .and_then(|(_, d)| d.model.as_ref()?.name.as_deref())
        .filter(|_| !x.synthetic)
        .map(crate::telemetry::events::model_label);
    let req = Request::Usage {
        session: pseudonym.clone(),
        provider,
        model: model.clone(),
        profile: Some(a.group.policy.profile.as_str().to_owned()),
        mode: Some(mode.as_str().to_owned()),
        stratum: None,
        arm: None,
        accounting_source: if x.synthetic { AccountingSource::Estimated } else { source },
        currency: cumulative.cost_micros.map(|_| "USD".to_owned()),
        cumulative,
    };
    let d = telemetry_decide::decide(telemetry, &req, ids, clock)?;
    let mut events = vec![d.event];
    let efficiency = Request::Efficiency {
        session: pseudonym.clone(),
        arm: None,
        stratum: None,
        event: efficiency_event(a, x, source, model.as_deref(), clock),
    };
    events.push(telemetry_decide::decide(telemetry, &efficiency, ids, clock)?.event);
    // The provider's own running totals: not for a fork (they start from its parent's).
    if let Some(totals) = x.cumulative.filter(|_| !matches!(mode, Mode::InheritFull | Mode::InheritRecent)) {
        let report = Request::Session {
            session: pseudonym,
            provider,
            arm: None,
            currency: totals.cost_micros.map(|_| "USD".to_owned()),
            totals,
            total_cost_usd: None,
        };
        events.push(telemetry_decide::decide(telemetry, &report, ids, clock)?.event);
    }
    Ok(Some(StreamAppend { stream: d.stream, expected: ExpectedVersion::Exact(d.expected_version), events }))
}

/// The attempt's efficiency event: logical figures strata measured itself (prompt and capsule
/// bytes, prompt tokens as the estimated context occupancy; what the stream does not show is
/// null), billed figures only as the provider reported them (a simulated worker's are estimates:
/// null here, and its cost stays an estimate in the usage report), and the outcome.
fn efficiency_event(
    a: &Attempt<'_>,
    x: &WorkerEnded,
    source: AccountingSource,
    model: Option<&str>,
    clock: &dyn Clock,
) -> serde_json::Value {
    let d = a.group.tasks.get(a.task).and_then(|t| t.dispatch.as_ref()).map(|(_, d)| d);
    let reported = !x.synthetic && matches!(a.provider, "claude" | "codex");
    let u = &x.usage;
    let billed = |v: Option<u64>| if reported { v } else { None };
    // Claude's cost is the CLI's own estimate: its tokens are the provider's, its amount is not.
    let amount =
        if reported && source != AccountingSource::Estimated { u.cost_micros.map(|c| c as f64 / 1e6) } else { None };
    let (passed, total) = a.checks.map_or((None, None), |(p, t)| (Some(p), Some(t)));
    serde_json::json!({
        "schema": crate::ce::wire::telemetry::SCHEMA_ID,
        "event": "worker_completed",
        "observed_at": crate::ce::time::format_rfc3339(clock.now_ns()),
        "task_corpus_id": null,
        "provider": match a.provider { "claude" => "claude", "codex" => "codex", _ => "other" },
        "runtime": if reported { "cli" } else { "unknown" },
        "model": model,
        "profile": a.group.policy.profile.as_str(),
        "mode": a.mode.as_str(),
        "reason_codes": d.map(|d| d.reason_codes.clone()).unwrap_or_default(),
        "logical": {
            "estimated_context_occupancy": d.map(|d| d.prompt.tokens),
            "compaction_count": null,
            "repeated_file_reads": null,
            "prompt_bytes": x.input_bytes,
            "tool_output_bytes": null,
            "capsule_bytes": d.and_then(|d| d.evidence.as_ref()).and_then(|e| e.capsule_bytes),
        },
        "billed": {
            "uncached_input_tokens": billed(u.input_tokens),
            "cache_creation_input_tokens": billed(u.cache_creation_tokens),
            "cache_read_input_tokens": billed(u.cache_read_tokens),
            "output_tokens": billed(u.output_tokens),
            "amount": amount,
            "currency": amount.map(|_| "USD"),
            "units": null,
            "accounting_source": if reported { "provider-reported" } else { "estimated" },
        },
        "outcome": {
            "accepted_workgroup": a.accepted,
            "verify_passed": passed,
            "verify_total": total,
            "rework_rounds": a.rework_rounds,
            "escaped_high_critical": null,
            "elapsed_ms": u.wall_ms,
            "audit_score": null,
        },
    })
}
