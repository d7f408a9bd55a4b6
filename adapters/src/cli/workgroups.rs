//! `strata workgroups`: every workgroup in the journal, one line each, with its state, its
//! tasks counted by status, its integration branch and its last activity, so a person can find
//! the one to `audit run` or `run --resume` without remembering its name.
//!
//! Read from the `workgroups` projection and the last event of each workgroup's stream; nothing
//! is appended.

use std::process::ExitCode;

use serde_json::json;
use strata_engine::workgroup::state::{Status, Workgroup, Workgroups, stream};
use strata_journal::Journal;
use strata_journal::projection::catch_up_state;

use crate::app::workspace::Workspace;
use crate::style::{Paint, tone_of};
use crate::table::Table;

/// One workgroup's line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Line {
    pub name: String,
    pub state: &'static str,
    pub tasks: usize,
    pub completed: usize,
    pub failed: usize,
    pub held: usize,
    /// Planned, dispatched or running.
    pub open: usize,
    pub branch: Option<String>,
    pub last_seq: u64,
    pub last_at_ns: i64,
}

/// The state a workgroup is in, in one word: `paused` (a safety boundary stopped it),
/// `completed`, `failed` (a task failed or conflicted) and `held` (a task could not start) once
/// every task has ended, else `unfinished` (running now, or stopped: `strata run --resume`).
pub(crate) fn state_of(g: &Workgroup) -> &'static str {
    let failed = g.count(Status::Failed) + g.count(Status::Conflicted);
    if g.paused.is_some() {
        "paused"
    } else if !(g.finished || g.all_ended()) {
        "unfinished"
    } else if failed > 0 {
        "failed"
    } else if g.count(Status::Held) > 0 {
        "held"
    } else {
        "completed"
    }
}

fn line(journal: &Journal, name: &str, g: &Workgroup) -> anyhow::Result<Line> {
    let s = stream(name);
    let last = journal.read_stream(&s, journal.stream_version(&s).max(1), 1)?;
    let (last_seq, last_at_ns) = last.first().map_or((0, 0), |e| (e.seq, e.recorded_at_ns));
    let completed = g.count(Status::Completed);
    let failed = g.count(Status::Failed) + g.count(Status::Conflicted);
    let held = g.count(Status::Held);
    let tasks = usize::try_from(g.task_count).unwrap_or(usize::MAX).max(g.tasks.len());
    Ok(Line {
        name: name.to_owned(),
        state: state_of(g),
        tasks,
        completed,
        failed,
        held,
        open: tasks.saturating_sub(completed + failed + held),
        // A workgroup whose run names a repository integrates on `strata/<name>`.
        branch: g.started.repo.as_ref().map(|_| format!("strata/{name}")),
        last_seq,
        last_at_ns,
    })
}

pub(crate) fn run(ws: &Workspace, json: bool, paint: Paint) -> anyhow::Result<ExitCode> {
    let journal = ws.open_journal("workgroups")?;
    let mut groups = Workgroups::default();
    catch_up_state(&mut groups, &journal)?;
    let lines = groups.groups().iter().map(|(name, g)| line(&journal, name, g)).collect::<anyhow::Result<Vec<_>>>()?;
    ws.finish(&journal)?;
    if json {
        let rows: Vec<_> = lines
            .iter()
            .map(|l| {
                json!({"workgroup": l.name, "state": l.state, "tasks": l.tasks, "completed": l.completed,
                    "failed": l.failed, "held": l.held, "open": l.open, "branch": l.branch,
                    "last_seq": l.last_seq,
                    "last_at": (l.last_seq > 0).then(|| strata_engine::ce::time::format_rfc3339(l.last_at_ns))})
            })
            .collect();
        outln!(ws, "{}", json!({"workgroups": rows}));
        return Ok(ExitCode::SUCCESS);
    }
    if lines.is_empty() {
        outln!(ws, "no workgroups yet: `strata run PLAN` plans and runs one (`strata run --example` shows how)");
        return Ok(ExitCode::SUCCESS);
    }
    outln!(ws, "{}", render(&lines, paint).trim_end());
    Ok(ExitCode::SUCCESS)
}

/// The table: a failed workgroup's line in red, a held or paused one's in yellow.
pub(crate) fn render(lines: &[Line], paint: Paint) -> String {
    let mut t =
        Table::new(&["workgroup", "state", "tasks", "completed", "failed", "held", "open", "branch", "last activity"]);
    for l in lines {
        let last = if l.last_seq == 0 {
            "-".to_owned()
        } else {
            // Seconds are enough to tell runs apart; the JSON keeps the full time.
            let at = strata_engine::ce::time::format_rfc3339(l.last_at_ns);
            format!("{}Z (seq {})", at.get(..19).unwrap_or(&at), l.last_seq)
        };
        t.toned_row(
            vec![
                l.name.clone(),
                l.state.to_owned(),
                l.tasks.to_string(),
                l.completed.to_string(),
                l.failed.to_string(),
                l.held.to_string(),
                l.open.to_string(),
                l.branch.clone().unwrap_or_else(|| "-".into()),
                last,
            ],
            tone_of(l.state),
        );
    }
    let total = lines.len();
    format!("{}{total} {}\n", t.render_painted(paint), crate::plural::noun(total as u64, "workgroup", "workgroups"))
}
