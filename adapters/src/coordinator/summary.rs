//! A workgroup's summary, built from the `workgroups` projection alone: what `strata run`
//! prints at the end and `strata audit run` prints at any time.

use strata_engine::workgroup::plan::PHASES;
use strata_engine::workgroup::state::{Status, Workgroup};

/// A task's line in the summary.
#[derive(Clone, Debug, serde::Serialize)]
pub struct TaskLine {
    /// Task.
    pub task: String,
    /// Phase.
    pub phase: String,
    /// Status.
    pub status: Status,
    /// Attempts.
    pub attempts: u32,
    /// Provider.
    pub provider: Option<String>,
    /// Mode that ran.
    pub mode: Option<String>,
    /// Reason codes.
    pub reasons: Vec<String>,
    /// Prompt tokens.
    pub prompt_tokens: Option<u64>,
    /// Load-everything baseline tokens.
    pub baseline_tokens: Option<u64>,
    /// Cost of every attempt, micro-USD (estimated for simulated workers).
    pub cost_micros: Option<u64>,
    /// Worker wall time of every attempt, milliseconds.
    pub wall_ms: Option<u64>,
    /// Files changed.
    pub files: Vec<String>,
    /// Violations recorded.
    pub violations: usize,
    /// Why it failed or is held.
    pub problem: Option<String>,
}

/// The summary of a workgroup, from the journal.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Summary {
    /// Workgroup.
    pub workgroup: String,
    /// Tasks.
    pub tasks: Vec<TaskLine>,
    /// Counts by status.
    pub completed: usize,
    /// Failed or conflicted.
    pub failed: usize,
    /// Held.
    pub held: usize,
    /// Sum of prompt tokens.
    pub prompt_tokens: u64,
    /// Sum of baseline tokens.
    pub baseline_tokens: u64,
    /// Sum of known costs, micro-USD.
    pub cost_micros: u64,
    /// Tasks that ran (completed or failed) whose cost is unknown (Codex reports none): the sum
    /// above leaves them out, and it is not the workgroup's cost unless this is 0.
    pub cost_unknown_tasks: usize,
    /// Whether any figure is simulated.
    pub synthetic: bool,
    /// Violations.
    pub violations: usize,
    /// Finished.
    pub finished: bool,
    /// The context-efficiency policy the run worked under, as recorded.
    pub policy: strata_engine::workgroup::policy::Policy,
    /// The safety boundary that paused the workgroup, while it is paused.
    pub paused: Option<strata_engine::workgroup::caps::Paused>,
    /// The workgroup's caps and what its attempts spent against them (unknown stays unknown).
    pub caps: strata_engine::workgroup::caps::Caps,
    /// What the workgroup's attempts spent.
    pub spend: strata_engine::workgroup::caps::Spend,
    /// The plan's consolidated suite, when it has one: its last run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suite: Option<SuiteLine>,
}

/// The last run of a plan's consolidated suite, as the summary shows it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SuiteLine {
    /// Whether it ran at all.
    pub ran: bool,
    /// Whether every command passed on what the integration branch held then.
    pub passed: bool,
    /// One line: what it ran on and how it ended.
    pub detail: String,
}

/// The summary of `g`.
pub fn summary(g: &Workgroup) -> Summary {
    let mut tasks = Vec::new();
    for t in &g.plan.tasks {
        let Some(s) = g.tasks.get(t.id()) else { continue };
        let d = s.dispatch.as_ref().map(|(_, d)| d);
        let problem = match s.status {
            Status::Failed => s.failed.as_ref().map(|(_, f)| f.reason.clone()),
            Status::Conflicted => {
                s.conflicted.as_ref().map(|c| format!("conflict on {}: {}", c.branch, c.files.join(", ")))
            }
            Status::Held => s.held.as_ref().map(|h| format!("{} ({})", h.reason, h.blocked_by.join(", "))),
            _ => None,
        };
        tasks.push(TaskLine {
            task: t.id().to_owned(),
            phase: PHASES[t.phase].to_owned(),
            status: s.status,
            attempts: s.attempts,
            provider: d.map(|d| d.provider.clone()),
            mode: d.map(|d| d.runs_as.as_str().to_owned()),
            reasons: d.map(|d| d.reason_codes.clone()).unwrap_or_default(),
            prompt_tokens: d.map(|d| d.prompt.tokens),
            baseline_tokens: d.map(|d| d.baseline_tokens),
            cost_micros: s.spent.cost_micros,
            wall_ms: s.spent.wall_ms,
            files: s.completed.as_ref().map(|(_, c)| c.files.clone()).unwrap_or_default(),
            violations: s.violations.len(),
            problem,
        });
    }
    let synthetic = g.tasks.values().any(|s| s.completed.as_ref().is_some_and(|(_, c)| c.synthetic))
        || g.tasks.values().any(|s| s.dispatch.as_ref().is_some_and(|(_, d)| d.provider == "sim"));
    Summary {
        paused: g.paused.clone(),
        caps: strata_engine::workgroup::caps::for_workgroup(g),
        spend: strata_engine::workgroup::caps::workgroup_spend(g),
        policy: g.policy.clone(),
        workgroup: g.plan.workgroup.clone(),
        completed: g.count(Status::Completed),
        failed: g.count(Status::Failed) + g.count(Status::Conflicted),
        held: g.count(Status::Held),
        prompt_tokens: tasks.iter().filter_map(|t| t.prompt_tokens).sum(),
        baseline_tokens: tasks.iter().filter_map(|t| t.baseline_tokens).sum(),
        cost_micros: tasks.iter().filter_map(|t| t.cost_micros).sum(),
        cost_unknown_tasks: tasks
            .iter()
            .filter(|t| {
                t.cost_micros.is_none() && t.attempts > 0 && matches!(t.status, Status::Completed | Status::Failed)
            })
            .count(),
        violations: tasks.iter().map(|t| t.violations).sum(),
        tasks,
        synthetic,
        finished: g.finished,
        suite: (!g.plan.suite.is_empty()).then(|| match &g.suite {
            None => SuiteLine { ran: false, passed: false, detail: "not run".to_owned() },
            Some((_, s)) => {
                SuiteLine { ran: true, passed: s.passed(g.plan.suite.len()), detail: s.describe(g.plan.suite.len()) }
            }
        }),
    }
}
