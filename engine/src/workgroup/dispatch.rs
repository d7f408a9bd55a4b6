//! One dispatch, decided whole: routing against the ledger (with the warm session a task
//! continues, resumable only while its lease lives and its capsule, resealed now, agrees or is
//! reconciled), the hold of a writer another lineage blocks, the one capsule rule, the
//! `task.dispatched` event, and what the edge must do before its append as data ([`Effect`]).
//! `strata run` and the `coordinator-faults` simulation both call [`route`], then (for an attempt
//! no claim blocks, once they have its prompt) [`Cleared::brief`]; they differ only in how they
//! carry out effects and where a prompt and a capsule's facts come from ([`Brief`]).

use strata_journal::{ExpectedVersion, StreamAppend};

use super::WorkgroupError;
use super::decide;
use super::events::{self, Dispatched, Held, PromptRef};
use super::plan::{CAPSULE_PHASES, Task};
use super::provider::Capabilities;
use super::state::Workgroup;
use super::step::{self, Routed};
use super::warm::{self, Warm};
use crate::ce::capsule::{self, Capsule, Failure, Sealed};
use crate::ce::ledger::{self, Ledger};
use crate::ce::ownership;
use crate::ce::router::Mode;
use crate::ports::{Clock, Ids};

/// The one capsule rule: every worker that is started, forked or resumed is briefed with its
/// own sealed capsule (schema, privacy scan, hash); only work the coordinator does itself
/// (`local`) has none.
pub fn briefed_with_capsule(mode: Mode) -> bool {
    mode != Mode::Local
}

/// What a capsule is drafted from beyond the plan and the workgroup's state: facts of the world
/// the edge knows (the knowledge a prompt was assembled from, the integration branch's tip).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CapsuleFacts {
    /// Digest of the knowledge the task's prompt was assembled from.
    pub knowledge: Option<String>,
    /// The commit the integration branch stands at.
    pub checkpoint: Option<String>,
    /// Knowledge-base nodes beyond the task's change request and specifications.
    pub nodes: Vec<String>,
    /// Facts the worker must know, each a constraint line.
    pub known: Vec<String>,
}

/// The capsule draft of `t`'s attempt `attempt`, run as `lineage` in `g`.
pub fn capsule_draft(g: &Workgroup, t: &Task, lineage: &str, attempt: u32, facts: &CapsuleFacts) -> Capsule {
    let failures: Vec<Failure> = g
        .tasks
        .get(t.id())
        .and_then(|s| s.failed.as_ref())
        .map(|(_, f)| match &f.check {
            // A failed check: its bounded summary and where its full log is, never the log (the
            // path is strata's `.strata/artifacts/`, not the capsule's artifact root, so it is
            // named in the summary).
            Some(c) => Failure {
                artifact: None,
                command: c.command.clone(),
                summary: format!("{} (last lines below)\n{}", f.reason, c.summary)
                    .chars()
                    .take(2048)
                    .collect::<String>(),
            },
            None => Failure {
                artifact: None,
                command: format!("attempt {}", f.attempt),
                summary: events::bounded(&f.reason).chars().take(2048).collect::<String>(),
            },
        })
        .into_iter()
        .collect();
    let mut nodes: Vec<String> =
        t.spec.change_request.iter().chain(&t.spec.specs).chain(&facts.nodes).cloned().collect();
    nodes.dedup();
    let mut constraints = vec!["Write only the owned files; every other write is denied and recorded.".to_owned()];
    if let Some(k) = &facts.knowledge {
        constraints.push(format!("The knowledge this capsule was sealed from has digest {k}."));
    }
    if let Some(s) = t.spec.sensitivity.as_deref().filter(|s| *s != "normal") {
        constraints.push(format!("Sensitivity {s}: share nothing from this task with other workers."));
    }
    constraints.extend(facts.known.iter().map(|k| format!("Known: {k}")));
    // The results this task builds on, by their handoff files, never their full output.
    for dep in &t.spec.after {
        if let Some(h) = g.tasks.get(dep).and_then(|s| s.completed.as_ref()).and_then(|(_, c)| c.handoff.as_ref()) {
            constraints.push(format!("Read the handoff of {dep} at {} (blake3 {}).", h.path, &h.blake3[..16]));
        }
    }
    Capsule {
        schema: capsule::SCHEMA_ID.to_owned(),
        task_id: lineage.to_owned(),
        workgroup_id: g.plan.workgroup.clone(),
        phase: CAPSULE_PHASES[t.phase].to_owned(),
        objective: t.spec.objective.clone(),
        node_ids: nodes,
        owned_files: t.spec.owns.iter().map(|o| o.trim_end_matches('/').to_owned()).collect(),
        checkpoint_sha: facts.checkpoint.clone(),
        failures,
        constraints,
        next_action: format!("Carry out task {} (attempt {attempt}) and stop.", t.id()),
        ..Capsule::default()
    }
}

/// Seals the capsule of `t`'s attempt against the published capsule schema; a refusal says why
/// (its code and message).
pub fn seal(g: &Workgroup, t: &Task, lineage: &str, attempt: u32, facts: &CapsuleFacts) -> Result<Sealed, String> {
    let req = capsule::SealRequest {
        capsule: capsule_draft(g, t, lineage, attempt, facts),
        max_bytes: capsule::MAX_BYTES_DEFAULT,
        artifact_path: None,
        artifact_roots: Vec::new(),
    };
    capsule::seal(&req, &crate::ce::wire::capsule::SCHEMA)
        .map_err(|e| format!("{} ({})", e.code.as_str(), e.code.message()))
}

/// The routing evidence of `t` in `g`, routed on `facts`, with the warm session it could reuse
/// (`candidate`, of task `candidate_task`) and the evaluator's answer for it; the prompt and
/// capsule sizes are filled in once the edge briefed it.
fn evidence(
    g: &Workgroup,
    t: &Task,
    facts: &crate::ce::router::RouteFacts,
    candidate: Option<String>,
    candidate_task: Option<&String>,
    check: Option<&events::LineageCheck>,
) -> events::Evidence {
    let node = t.spec.change_request.clone().or_else(|| t.spec.specs.first().cloned());
    let same_node = |dep: &String| {
        g.plan.task(dep).is_some_and(|d| {
            node.is_some() && d.spec.change_request.clone().or_else(|| d.spec.specs.first().cloned()) == node
        })
    };
    let expected_reuse = if candidate_task.is_some() {
        "high"
    } else if t.spec.after.iter().any(same_node) {
        "medium"
    } else {
        "low"
    };
    let waited_for = g.plan.tasks.iter().any(|o| o.spec.after.iter().any(|a| a == t.id()));
    let inherited_tokens =
        candidate_task.and_then(|c| g.tasks.get(c)).and_then(|s| s.dispatch.as_ref()).map(|(_, d)| d.prompt.tokens);
    events::Evidence {
        node,
        phase: super::plan::PHASES[t.phase].to_owned(),
        role: t.spec.role.clone(),
        owned_files: t.spec.owns.clone(),
        after: t.spec.after.clone(),
        blocking: facts.blocking,
        coupling: t.spec.coupling.clone().unwrap_or_else(|| "independent".to_owned()),
        expected_reuse: expected_reuse.to_owned(),
        sensitivity: t.spec.sensitivity.clone().unwrap_or_else(|| "normal".to_owned()),
        sensitivity_declared: t.sensitivity_declared,
        independent_reviewer: facts.independent_reviewer,
        capsule_bytes: None,
        prompt_tokens: 0,
        inherited_tokens,
        expected_output_tokens: None,
        latency_priority: if waited_for { "high" } else { "low" }.to_owned(),
        lineage_candidate: candidate,
        invalidation: check.map(|c| c.state.clone()),
        nesting_depth: facts.nesting_depth,
        max_nesting_depth: facts.max_nesting_depth,
        active_inherited_writers: facts.active_inherited_writers,
        max_active_inherited: facts.max_active_inherited,
        efficiency: g.policy.enabled,
    }
}

/// A dispatch to decide.
pub struct Request<'a> {
    /// The workgroup, as folded.
    pub group: &'a Workgroup,
    /// The dispatch ledger, as folded.
    pub ledger: &'a Ledger,
    /// The task.
    pub task: &'a Task,
    /// The provider that runs it.
    pub provider: &'a str,
    /// What that provider can run.
    pub caps: &'a Capabilities,
    /// The coordinator's clock.
    pub now_ns: i64,
    /// How deep in delegation this coordinator runs (0 at the top; a run inside a worker is one
    /// deeper), for the router's nesting limit.
    pub nesting_depth: u64,
    /// How the user frees a path another lineage holds (added to a conflict hold's reason).
    pub hold_fix: &'a str,
    /// What the knowledge base says, at dispatch time, of the change request the task implements
    /// (read by the edge with [`super::gates::build_facts`]); the build gate decides on it.
    pub build_facts: Option<&'a super::gates::BuildFacts>,
    /// Resume a stale session without reconciling it: a defect the `coordinator-faults`
    /// simulation injects to show its checker catches it; never set by `strata run`.
    pub skip_reconcile: bool,
    /// The rollout the run decides its dispatches under, as folded.
    pub rollout: Option<&'a crate::promotion::rollout::Rollout>,
    /// Its provider starts a knowledge server (`strata mcp`) for its worker: the dispatch then
    /// gives the worker the Knowledge API only on a healthy, fresh probe ([`super::health`]).
    pub attaches_knowledge: bool,
}

/// What the edge assembled for a routed attempt that was not held: its prompt and the facts of
/// its own capsule.
#[derive(Clone, Debug)]
pub struct Brief {
    /// The task's assembled prompt.
    pub prompt: PromptRef,
    /// Its text.
    pub prompt_text: String,
    /// The tokens a worker briefed with the whole base would have read.
    pub baseline_tokens: u64,
    /// The facts of this attempt's own capsule.
    pub facts: CapsuleFacts,
    /// For a prompt that adds a continuation status to the one its phase was planned with (a
    /// retry): the hash of the prompt the same assembly gives without it, as its manifest
    /// records (`continuation.basePromptHash`, which `prompt verify` recomputes). The planning
    /// gate checks that one.
    pub planned_as: Option<String>,
}

/// Something the edge does before it appends a dispatch, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Create the writer's own worktree for the attempt.
    Worktree,
    /// Write the sealed capsule beside the prompt.
    Capsule(String),
    /// Write the worker's input: the prompt, a reconciliation section for a stale warm session,
    /// and the sealed capsule.
    Input(String),
}

/// A dispatch decided.
#[derive(Clone, Debug)]
pub struct Dispatch {
    /// The ledger's append (route, claim, resume, capsule) and the workgroup's (`task.dispatched`).
    pub appends: Vec<StreamAppend>,
    /// The dispatch recorded.
    pub dispatched: Dispatched,
    /// The mode the worker runs as.
    pub runs_as: Mode,
    /// What the edge does before appending.
    pub effects: Vec<Effect>,
    /// The warm lineage it continues, and its capsule as sealed now, when it resumes one.
    pub resumed: Option<(String, Sealed)>,
    /// A stale warm session reconciled before resuming.
    pub reconciled: bool,
    /// The task continued a completed one (resumed or not).
    pub continues: bool,
    /// What the user is told.
    pub notes: Vec<String>,
}

/// What a dispatch came to.
#[derive(Clone, Debug)]
pub enum Planned {
    /// Held, not dispatched: another lineage's claim blocks it, or its capsule was refused.
    Held {
        /// The hold's appends.
        appends: Vec<StreamAppend>,
        /// The hold.
        held: Held,
    },
    /// Dispatched once the edge has carried out its effects.
    Dispatch(Box<Dispatch>),
}

/// A routed attempt no claim blocks, waiting for its [`Brief`]: what [`Cleared::brief`] turns
/// into the dispatch.
#[derive(Clone, Debug)]
pub struct Cleared {
    attempt: u32,
    lineage: String,
    provider: String,
    routed: Mode,
    runs_as: Mode,
    reasons: Vec<String>,
    ledger_events: Vec<strata_journal::EventData>,
    ledger_version: u64,
    from_session: Option<String>,
    reconciliation: Option<String>,
    resumed: Option<(String, Sealed)>,
    continues: bool,
    lineage_check: Option<events::LineageCheck>,
    gate: Option<super::gates::GateCheck>,
    evidence: events::Evidence,
    notes: Vec<String>,
    /// The cap the previous attempt reached, when this one is its fallback.
    pub fallback_after: Option<super::caps::Reached>,
    /// Under a rollout: its stream's version and the unit's `rollout.unit-routed`.
    unit_routed: Option<(u64, crate::promotion::rollout::UnitRouted)>,
    /// The worker runs without the Knowledge API its provider would attach.
    without_knowledge: bool,
    /// The model it runs on, under the policy the dispatch is decided under.
    model: Option<super::models::Choice>,
}

/// What routing an attempt came to.
#[derive(Clone, Debug)]
pub enum Routing {
    /// Another lineage's claim blocks it: held (ledger and workgroup appends).
    Held {
        /// The hold's appends.
        appends: Vec<StreamAppend>,
        /// The hold.
        held: Held,
    },
    /// Not blocked: the edge assembles its prompt, then [`Cleared::brief`] decides the rest.
    Cleared(Box<Cleared>),
}

/// Routes the next attempt of `req.task`. `prior_facts` gives the capsule facts of a completed
/// task as they stand now (the edge's port to the world a capsule is drafted from), so the warm
/// session it left can be checked against its capsule resealed now. Nothing is assembled for an
/// attempt that is held.
pub fn route(
    req: Request<'_>,
    prior_facts: &mut dyn FnMut(&Task, &str) -> Result<CapsuleFacts, String>,
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<Routing, WorkgroupError> {
    let g = req.group;
    let t = req.task;
    let id = t.id();
    let attempt = g.tasks.get(id).map_or(1, |s| s.attempts + 1);
    let lineage = super::lineage_id(&g.plan.workgroup, id);
    let mut notes = Vec::new();
    let ledger_append = |events| StreamAppend {
        stream: ownership::STREAM.to_owned(),
        expected: ExpectedVersion::Exact(req.ledger.version()),
        events,
    };

    // The build and review gates, before anything is routed or claimed: a refusal holds the task.
    let gate = super::gates::build_gate(t, req.build_facts).or_else(|| super::gates::review_gate(g, t));
    if let Some(check) = gate.as_ref().filter(|c| !c.passed) {
        let held = Held {
            task: id.to_owned(),
            blocked_by: Vec::new(),
            reason: check.summary(),
            gate: Some(Box::new(check.clone())),
        };
        let append = decide::holds(g, std::slice::from_ref(&held), ids, clock)?;
        return Ok(Routing::Held { appends: vec![append], held });
    }

    // A continuation resumes the prior session only while the ledger keeps it warm; the prior's
    // capsule as sealed now says whether its session's brief went stale. With context efficiency
    // off nothing is resumed: the task routes as the baseline would.
    let warm_minutes = g.policy.warm_lease_minutes;
    // After a cap the task falls back to a smaller mode: a fresh capsule, nothing resumed or
    // inherited.
    let fallback_after = g
        .tasks
        .get(id)
        .filter(|s| s.status == super::state::Status::Pending)
        .and_then(|s| s.failed.as_ref())
        .and_then(|(_, f)| f.capped);
    let prior = step::prior(g, t).filter(|_| g.policy.enabled && fallback_after.is_none());
    let mut lineage_check = None;
    let warm = prior.as_ref().map(|(l, session, p, a)| {
        let resealed = g
            .plan
            .task(p)
            .ok_or_else(|| format!("no task {p}"))
            .and_then(|pt| prior_facts(pt, l).and_then(|f| seal(g, pt, l, *a, &f)));
        match resealed {
            Ok(current) => {
                let next = warm::Continuation { workgroup: &g.plan.workgroup, task: t, provider: req.provider };
                let (w, check) =
                    warm::resumable(req.ledger, l, session, &next, req.now_ns, warm_minutes, Some(&current.hash));
                lineage_check = check;
                w.map(|w| (w, current))
            }
            Err(e) => Err(format!("its capsule cannot be resealed ({e})")),
        }
    });
    if let (Some((l, ..)), Some(Err(why))) = (&prior, &warm) {
        notes.push(format!("{id}: does not resume {l}: {why}"));
    }
    let candidate = match (&prior, &warm) {
        (Some((l, ..)), Some(w)) => Some((l.as_str(), w.is_ok())),
        _ => None,
    };
    // The session its affinity names, when that task completed: forkable only while the ledger
    // keeps it warm and the lineage evaluator finds the fork bound to what the session was.
    let parent = step::affinity(g, t).filter(|_| g.policy.enabled && fallback_after.is_none());
    if let Some(r) = &fallback_after {
        notes.push(format!("{id}: falls back to a fresh capsule after its {}", r.describe()));
    }
    let mut fork_check = None;
    let forkable = parent.as_ref().is_some_and(|(l, session, ..)| {
        let next = warm::Continuation { workgroup: &g.plan.workgroup, task: t, provider: req.provider };
        let (ok, check) = warm::forkable(req.ledger, l, session, &next, req.now_ns, warm_minutes);
        fork_check = check;
        if let Err(why) = &ok {
            notes.push(format!("{id}: cannot fork {l}: {why}"));
        }
        ok.is_ok()
    });
    let fork = parent.as_ref().map(|(l, _, sensitivity)| step::Fork { lineage: l, sensitivity, forkable });
    // Under a rollout the arm its stage and the unit's bucket choose decides the dispatch.
    let arms = req.rollout.map(|ro| super::rollouts::arms(ro, &lineage, &g.policy));
    let runs_under = arms.as_ref().map_or(&g.policy, |a| &a.runs_under);
    let limits = step::Limits { policy: runs_under, nesting_depth: req.nesting_depth };
    let candidates = step::Candidates { resume: candidate, fork };
    let routed: Routed = step::route(t, &lineage, candidates, req.ledger, req.caps, limits, ids, clock)?;
    let unit_routed = match (req.rollout, &arms) {
        (Some(ro), Some(a)) => super::rollouts::unit_routed(ro, &lineage, a, &g.policy, &routed.facts)
            .map_err(|e| WorkgroupError::Route { task: id.to_owned(), detail: e.to_string() })?
            .map(|u| (ro.version, u)),
        _ => None,
    };
    let mut ledger_events = routed.ledger_events.clone();
    if routed.conflicted() {
        let held = routed.conflict_hold(id, req.hold_fix);
        let append = decide::holds(g, std::slice::from_ref(&held), ids, clock)?;
        return Ok(Routing::Held { appends: vec![ledger_append(ledger_events), append], held });
    }

    let runs_as = routed.runs_as;
    let mut reconciliation = None;
    let mut resumed = None;
    if let (Mode::Resume, Some((l, ..)), Some(Ok((w, current)))) = (runs_as, &prior, &warm) {
        // A stale warm session is reconciled: briefed with its capsule as sealed now.
        let stale = match w {
            Warm::Reconcile { recorded, .. } if !req.skip_reconcile => Some((recorded.as_deref(), current)),
            _ => None,
        };
        let reconciled = stale.is_some();
        ledger_events.extend(step::resumed(l, stale, req.now_ns, warm_minutes, ids, clock)?);
        if reconciled {
            let text =
                serde_json::to_string_pretty(&current.capsule).map_err(|e| WorkgroupError::Encode(e.to_string()))?;
            reconciliation = Some(format!(
                "\n\n## Reconciliation\n\nWhat you were briefed with changed since your last turn (the integration \
                 branch moved or the knowledge base changed). Your capsule as sealed now ({}):\n\n```json\n{text}\n```\n",
                current.hash
            ));
            notes.push(format!("{id}: reconciles {l} before resuming it (its capsule went stale)"));
        }
        resumed = Some((l.clone(), current.clone()));
    }
    let candidate_lineage =
        prior.as_ref().map(|(l, ..)| l.clone()).or_else(|| parent.as_ref().map(|(l, ..)| l.clone()));
    let candidate_task = t.spec.continues.as_ref().or(t.spec.affinity.as_ref());
    // A task continues a session or forks one, never both (the plan's check): one answer.
    let lineage_check = lineage_check.or(fork_check);
    let evidence = evidence(g, t, &routed.facts, candidate_lineage, candidate_task, lineage_check.as_ref());
    Ok(Routing::Cleared(Box::new(Cleared {
        evidence,
        attempt,
        lineage,
        provider: req.provider.to_owned(),
        routed: routed.route.mode,
        runs_as,
        reasons: routed.reasons.iter().map(|r| r.as_str().to_owned()).collect(),
        ledger_events,
        ledger_version: req.ledger.version(),
        from_session: match runs_as {
            Mode::Resume => prior.as_ref().map(|(_, s, ..)| s.clone()),
            Mode::InheritFull | Mode::InheritRecent => parent.as_ref().map(|(_, s, _)| s.clone()),
            _ => None,
        },
        reconciliation,
        resumed,
        continues: prior.is_some(),
        lineage_check,
        gate,
        notes,
        fallback_after,
        unit_routed,
        without_knowledge: req.attaches_knowledge
            && !super::health::attached(g, super::plan::PHASES[t.phase], req.now_ns),
        model: super::models::choose(
            runs_under,
            &t.spec.role,
            t.spec.model.as_deref().and_then(super::models::Tier::parse),
            req.provider,
        ),
    })))
}

impl Cleared {
    /// Completes the dispatch of `t`'s attempt in `g` with what the edge assembled: the one
    /// capsule rule (a capsule the seal refuses holds the task: nothing unscanned reaches a
    /// worker), the worker's input, `task.dispatched`, and the effects before the append.
    pub fn brief(
        self,
        g: &Workgroup,
        t: &Task,
        brief: Brief,
        ids: &mut dyn Ids,
        clock: &dyn Clock,
    ) -> Result<Planned, WorkgroupError> {
        let Cleared {
            attempt,
            lineage,
            provider,
            routed,
            runs_as,
            reasons,
            mut ledger_events,
            ledger_version,
            from_session,
            reconciliation,
            resumed,
            continues,
            lineage_check,
            gate,
            mut evidence,
            notes,
            fallback_after,
            unit_routed,
            without_knowledge,
            model,
        } = self;
        let id = t.id();
        // The planning gate: the phase's prompts were all assembled and verified before its
        // first worker, and this prompt is the one its phase was planned with.
        let planned_as = brief.planned_as.as_deref().unwrap_or(&brief.prompt.prompt_hash);
        if let Some(check) = super::gates::planning_gate(g, t, planned_as) {
            let held = Held {
                task: id.to_owned(),
                blocked_by: Vec::new(),
                reason: check.summary(),
                gate: Some(Box::new(check)),
            };
            let append = decide::append(g, vec![decide::held(g, &held, ids, clock)?]);
            return Ok(Planned::Held { appends: vec![append], held });
        }
        let mut input = brief.prompt_text;
        input.push_str(reconciliation.as_deref().unwrap_or_default());
        let mut effects = Vec::new();
        if t.writer {
            effects.push(Effect::Worktree);
        }
        let capsule_hash = if briefed_with_capsule(runs_as) {
            match seal(g, t, &lineage, attempt, &brief.facts) {
                Ok(sealed) => {
                    ledger_events.push(
                        ledger::capsule_sealed(ids, clock, &sealed).map_err(|e| WorkgroupError::Encode(e.detail))?,
                    );
                    let text = serde_json::to_string_pretty(&sealed.capsule)
                        .map_err(|e| WorkgroupError::Encode(e.to_string()))?;
                    input.push_str(&format!(
                        "\n\n## Context capsule (sealed {})\n\n```json\n{text}\n```\n",
                        sealed.hash
                    ));
                    effects.push(Effect::Capsule(text));
                    Some(sealed.hash)
                }
                Err(e) => {
                    // Nothing unscanned reaches a worker: a capsule the seal refuses holds the task.
                    let held = Held {
                        task: id.to_owned(),
                        blocked_by: Vec::new(),
                        reason: format!("its capsule was refused: {e}"),
                        gate: None,
                    };
                    let append = decide::append(g, vec![decide::held(g, &held, ids, clock)?]);
                    return Ok(Planned::Held { appends: vec![append], held });
                }
            }
        } else {
            None
        };
        effects.push(Effect::Input(input));
        evidence.prompt_tokens = brief.prompt.tokens;
        evidence.capsule_bytes = effects.iter().find_map(|e| match e {
            Effect::Capsule(text) => Some(text.len() as u64),
            _ => None,
        });
        let dispatched = Dispatched {
            task: id.to_owned(),
            attempt,
            lineage_id: lineage,
            provider,
            routed,
            runs_as,
            reason_codes: reasons,
            prompt: brief.prompt,
            baseline_tokens: brief.baseline_tokens,
            from_session,
            capsule_hash,
            lineage_check,
            gate,
            evidence: Some(Box::new(evidence)),
            caps: super::caps::for_task(g, id),
            fallback_after,
            without_knowledge,
            model,
        };
        let append = decide::append(g, vec![decide::dispatched(g, &dispatched, ids, clock)?]);
        let mut appends = vec![
            StreamAppend {
                stream: ownership::STREAM.to_owned(),
                expected: ExpectedVersion::Exact(ledger_version),
                events: ledger_events,
            },
            append,
        ];
        if let Some((version, u)) = unit_routed {
            let events = crate::promotion::rollout::stamp(
                vec![(crate::promotion::rollout::UNIT_ROUTED, serde_json::json!(u))],
                ids,
                clock,
            )
            .map_err(|e| WorkgroupError::Encode(e.to_string()))?;
            appends.push(StreamAppend {
                stream: crate::promotion::rollout::stream(&u.rollout),
                expected: ExpectedVersion::Exact(version),
                events,
            });
        }
        Ok(Planned::Dispatch(Box::new(Dispatch {
            appends,
            dispatched,
            runs_as,
            effects,
            reconciled: resumed.is_some() && reconciliation.is_some(),
            resumed,
            continues,
            notes,
        })))
    }
}
