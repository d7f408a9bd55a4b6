//! Pipeline gates a dispatch passes before a worker starts, as decisions over facts.
//!
//! The build gate: a build-phase task that implements a change request runs only while that
//! change request is `approved` or `in-progress`, nothing upstream of it changed without a review
//! (it is not suspect), and no artifact its impact closure reaches has a validation finding. The
//! edge reads those facts from the knowledge base at dispatch time ([`build_facts`]); the rule
//! ([`build_gate`]) is the same in `strata run` and the simulation, and its answer is recorded:
//! passed, in `task.dispatched` (`gate`); refused, in `task.held` (`gate`), with the reasons, and
//! the task and its dependants wait.
//!
//! The review gate: a review-phase task starts only when every build task of its change request
//! (of the whole plan, for a reviewer that names none) completed with its `verify` checks
//! passed, and, when the plan has a consolidated `suite`, that suite passed on the integration
//! branch holding every change that landed so far ([`super::verify::suite_due`] runs it first).
//! The gate records the build tasks it checked with their checks, and the suite's result, so
//! `audit run` shows what a review stood on; a failed suite holds the reviews.
//!
//! The planning gate: before a phase's first worker starts, the prompt of every task of that
//! phase is assembled, written and passes `prompt verify` (re-assembled from the journal at its
//! position, byte for byte), recorded as `workgroup.phase-planned` ([`PhasePlanned`]) with each
//! prompt's hash or the problems found. A phase with a problem is held whole; a dispatch whose
//! prompt differs from the one its phase was planned with is held too.

use serde::{Deserialize, Serialize};

use super::plan::{PHASES, Task};
use crate::kb::graph::{Finding, Graph};
use crate::kb::kind::{ArtifactKey, ArtifactKind};

/// The states of a change request a build task may implement.
pub const BUILDABLE: [&str; 2] = ["approved", "in-progress"];
/// Most reasons one gate decision lists (the rest are counted).
pub const REASONS_MAX: usize = 16;

/// What the knowledge base says about a change request when a task implementing it is
/// dispatched.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BuildFacts {
    /// The change request.
    pub change_request: String,
    /// Its lifecycle state (`None`: not in the knowledge base).
    pub state: Option<String>,
    /// The changes upstream of it not reviewed since (it is suspect because of each).
    pub suspect_because: Vec<String>,
    /// Validation findings on artifacts its impact closure reaches.
    pub findings: Vec<String>,
}

/// A gate's decision, as recorded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GateCheck {
    /// The gate (`build`).
    pub gate: String,
    /// Whether the task may run.
    pub passed: bool,
    /// Why not (empty when passed).
    pub reasons: Vec<String>,
    /// The facts it decided on.
    pub facts: BuildFacts,
    /// For the review gate: each build task it checked, with its status (`billing-api
    /// completed`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub builds: Vec<String>,
    /// For the review gate: the `verify` checks of each build task that declares some
    /// (`billing-api: checks 2/2 passed`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<String>,
    /// For the review gate of a plan with a consolidated suite: its last result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suite: Option<String>,
}

impl GateCheck {
    /// The reasons in one line (a hold's reason).
    pub fn summary(&self) -> String {
        format!("the {} gate holds it: {}", self.gate, self.reasons.join("; "))
    }
}

/// `workgroup.phase-planned` v1: the prompts of a phase's tasks, assembled and verified before
/// its first worker starts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PhasePlanned {
    /// The phase (one of [`PHASES`]).
    pub phase: String,
    /// Each task's prompt, as assembled and verified, in plan order.
    pub prompts: Vec<PlannedPrompt>,
    /// What failed (a prompt that cannot be assembled, or does not verify); empty: passed.
    pub problems: Vec<String>,
}

/// One task's prompt in a planned phase.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlannedPrompt {
    /// The task.
    pub task: String,
    /// Its prompt.
    pub prompt: super::events::PromptRef,
    /// The journal position it was assembled at (where a process that cannot read the planned
    /// file, another machine on a shared journal, assembles it again; 0: not recorded).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub position: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The phases of `tasks` (about to be dispatched) not planned yet, in phase order.
pub fn unplanned_phases<'t>(
    g: &super::state::Workgroup,
    tasks: impl IntoIterator<Item = &'t String>,
) -> Vec<&'static str> {
    let mut out: Vec<usize> = tasks.into_iter().filter_map(|id| g.plan.task(id)).map(|t| t.phase).collect();
    out.sort_unstable();
    out.dedup();
    out.into_iter().map(|p| PHASES[p]).filter(|p| !g.planned.contains_key(*p)).collect()
}

/// The planning gate's decision for dispatching `task` with the prompt `prompt_hash`: `None`
/// when it passes; the refusal otherwise.
pub fn planning_gate(g: &super::state::Workgroup, task: &Task, prompt_hash: &str) -> Option<GateCheck> {
    let phase = PHASES[task.phase];
    let mut reasons = Vec::new();
    match g.planned.get(phase) {
        None => reasons.push(format!("the {phase} phase was never planned; no worker of it starts")),
        Some(p) if !p.problems.is_empty() => {
            reasons.push(format!("the {phase} phase's prompts did not all verify"));
            reasons.extend(p.problems.iter().cloned());
        }
        Some(p) => match p.prompts.iter().find(|x| x.task == task.id()) {
            None => reasons.push(format!("the {phase} phase was planned without a prompt for {}", task.id())),
            Some(x) if x.prompt.prompt_hash != prompt_hash => reasons.push(format!(
                "its prompt {prompt_hash} is not the one its phase was planned with ({})",
                x.prompt.prompt_hash
            )),
            Some(_) => {}
        },
    }
    reasons.truncate(REASONS_MAX);
    (!reasons.is_empty()).then(|| GateCheck {
        gate: "planning".to_owned(),
        passed: false,
        reasons,
        facts: BuildFacts::default(),
        builds: Vec::new(),
        checks: Vec::new(),
        suite: None,
    })
}

/// The facts [`build_gate`] decides `change_request` on, read from `g`, whose validation
/// findings are `findings` (what `g.validate()` returns: the caller computes them once per graph,
/// not once per dispatch).
pub fn build_facts(g: &Graph, findings: &[Finding], change_request: &str) -> BuildFacts {
    let key = ArtifactKey::new(ArtifactKind::ChangeRequest, change_request);
    let mut facts = BuildFacts { change_request: change_request.to_owned(), ..BuildFacts::default() };
    let (Some(node), Some(n)) = (g.get(&key), g.node_id(&key)) else { return facts };
    facts.state = Some(node.state.clone());
    facts.suspect_because = g
        .suspects()
        .get(&n)
        .into_iter()
        .flatten()
        .map(|s| format!("{} changed (journal sequence {})", g.node(s.cause).key, s.seq))
        .collect();
    let reached: std::collections::BTreeSet<ArtifactKey> =
        g.impact(n).into_iter().map(|r| r.key).chain([key.clone()]).collect();
    facts.findings = findings
        .iter()
        .filter(|f| reached.contains(&f.artifact))
        .map(|f| format!("{} ({}): {}", f.artifact, f.rule, f.detail))
        .collect();
    facts.suspect_because.truncate(REASONS_MAX);
    facts.findings.truncate(REASONS_MAX);
    facts
}

/// The build gate's decision for `task` on `facts` (`None`: the gate does not apply, the task
/// is not in the build phase or implements no change request).
pub fn build_gate(task: &Task, facts: Option<&BuildFacts>) -> Option<GateCheck> {
    let cr = task.spec.change_request.as_deref()?;
    if PHASES[task.phase] != "build" {
        return None;
    }
    let facts = facts.cloned().unwrap_or_else(|| BuildFacts { change_request: cr.to_owned(), ..BuildFacts::default() });
    let mut reasons = Vec::new();
    match facts.state.as_deref() {
        None => reasons.push(format!("change request {cr} is not in the knowledge base")),
        Some(s) if !BUILDABLE.contains(&s) => reasons.push(format!(
            "change request {cr} is {s}; a build task implements one that is {} (`strata artifact transition {cr} --to approved`)",
            BUILDABLE.join(" or ")
        )),
        Some(_) => {}
    }
    for s in &facts.suspect_because {
        reasons.push(format!("{cr} is suspect: {s}; review it (`strata artifact review {cr}`)"));
    }
    for f in &facts.findings {
        reasons.push(format!("its impact closure has a validation finding: {f}"));
    }
    Some(GateCheck {
        gate: "build".to_owned(),
        passed: reasons.is_empty(),
        reasons,
        facts,
        builds: Vec::new(),
        checks: Vec::new(),
        suite: None,
    })
}

/// The review gate's decision for `task` in `g` (`None`: the task is not in the review phase).
pub fn review_gate(g: &super::state::Workgroup, task: &Task) -> Option<GateCheck> {
    if PHASES[task.phase] != "review" {
        return None;
    }
    let cr = task.spec.change_request.clone();
    let mut builds = Vec::new();
    let mut checks = Vec::new();
    let mut reasons = Vec::new();
    for b in g.plan.tasks.iter().filter(|b| PHASES[b.phase] == "build") {
        if cr.is_some() && b.spec.change_request != cr {
            continue;
        }
        let state = g.tasks.get(b.id());
        let status = state.map_or(super::state::Status::Pending, |s| s.status);
        if status != super::state::Status::Completed {
            reasons.push(format!(
                "build task {} is {}; a review starts once every build task completed",
                b.id(),
                status.as_str()
            ));
        }
        let n = b.spec.verify.len();
        let passed = state.and_then(|s| s.checked.as_ref()).map_or(0, |c| c.tally().0 as usize);
        if n > 0 && status == super::state::Status::Completed && passed < n {
            reasons.push(format!("build task {} completed with {passed} of its {n} checks passed", b.id()));
        }
        if builds.len() < REASONS_MAX * 4 {
            builds.push(format!("{} {}", b.id(), status.as_str()));
            if n > 0 {
                checks.push(format!("{}: checks {passed}/{n} passed", b.id()));
            }
        }
    }
    let of = g.plan.suite.len();
    let suite = (of > 0).then(|| match &g.suite {
        None => {
            reasons.push("the consolidated suite has not run; a review starts once it passed".to_owned());
            "not run".to_owned()
        }
        Some((_, s)) => {
            let covers = super::verify::integrated(g);
            if !s.passed(of) {
                reasons.push(format!("the consolidated suite {}", s.describe(of)));
            } else if s.covers != covers {
                reasons.push(format!(
                    "the consolidated suite passed on the changes of [{}], not on what the branch holds now ([{}])",
                    s.covers.join(", "),
                    covers.join(", ")
                ));
            }
            s.describe(of)
        }
    });
    reasons.truncate(REASONS_MAX);
    let facts = BuildFacts { change_request: cr.unwrap_or_default(), ..BuildFacts::default() };
    Some(GateCheck { gate: "review".to_owned(), passed: reasons.is_empty(), reasons, facts, builds, checks, suite })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(phase: &str, cr: Option<&str>) -> Task {
        let mut plan = serde_json::json!({"workgroup": "wg", "pipeline": "light",
            "task": [{"id": "a", "role": "backend-builder", "objective": "x", "owns": ["src/a/"], "phase": phase}]});
        if let Some(cr) = cr {
            plan["task"][0]["change_request"] = cr.into();
        }
        let plan: super::super::plan::Plan = serde_json::from_value(plan).expect("plan");
        super::super::plan::check(&plan).expect("checks").tasks.remove(0)
    }

    #[test]
    fn the_build_gate_passes_an_approved_sound_change_request_and_says_every_reason_it_holds_another() {
        let t = task("build", Some("CR-1"));
        assert!(build_gate(&task("build", None), None).is_none());
        assert!(build_gate(&task("verify", Some("CR-1")), None).is_none());
        let sound =
            BuildFacts { change_request: "CR-1".into(), state: Some("in-progress".into()), ..Default::default() };
        let passed = build_gate(&t, Some(&sound)).expect("applies");
        assert!(passed.passed && passed.reasons.is_empty());
        let unsound = BuildFacts {
            change_request: "CR-1".into(),
            state: Some("proposed".into()),
            suspect_because: vec!["brd-requirement:BRD-1 changed (journal sequence 9)".into()],
            findings: vec!["module:api (dangling): …".into()],
        };
        let held = build_gate(&t, Some(&unsound)).expect("applies");
        assert!(!held.passed);
        assert_eq!(held.reasons.len(), 3, "{:?}", held.reasons);
        assert!(held.reasons[0].contains("CR-1 is proposed"), "{:?}", held.reasons);
        assert!(build_gate(&t, None).is_some_and(|g| !g.passed && g.reasons[0].contains("not in the knowledge base")));
    }
}
