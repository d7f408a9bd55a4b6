//! Warm workers. A completed task's session is recorded on the dispatch ledger as the task's
//! lineage (`ce.lineage-recorded` with a `knowzcode.agent-lineage/v1` record, the first time)
//! with a lease (`ce.lease-granted`, or `ce.lease-renewed` when the lineage is known), warm for
//! the warm-lease time. A task that `continues` it resumes that session only while the ledger
//! says so: the lineage is recorded, never invalidated, its lease is live at the decision's
//! time, and it ran on the same platform with the same session; the resume renews the lease.
//! Anything else routes as if there were no warm worker (the router picks a fresh capsule).
//!
//! A warm session's capsule goes stale when what it was briefed with changed since (the
//! knowledge its capsule was sealed from, a failure to carry): resealed now, the prior's capsule
//! hashes differently from the one its record names. Such a lineage is resumed only reconciled
//! (`ce.lineage-reconciled`, appended with the dispatch, after which the record names the
//! current capsule and the session is given it), never silently hot.

use strata_journal::EventData;

use super::WorkgroupError;
use super::events::{Dispatched, LineageCheck};
use super::plan::{CAPSULE_PHASES, PHASES, Task};
use crate::ce::digest::sha256_tagged;
use crate::ce::ledger::{self, LeaseSet, Ledger, LineageRecorded};
use crate::ce::lineage::{Current, LineageRecord};
use crate::ce::time::format_rfc3339;
use crate::ports::{Clock, Ids};

/// The agent-lineage schema id.
pub const SCHEMA: &str = crate::ce::lineage::SCHEMA_ID;

/// The lineage platform of a provider.
pub fn platform(provider: &str) -> &'static str {
    match provider {
        "claude" => "claude",
        "codex" => "codex",
        _ => "other",
    }
}

/// What a completed attempt leaves warm.
#[derive(Clone, Copy, Debug)]
pub struct Completion<'a> {
    /// Workgroup.
    pub workgroup: &'a str,
    /// The task as planned.
    pub task: &'a Task,
    /// Its dispatch.
    pub dispatch: &'a Dispatched,
    /// The session that completed it.
    pub session: &'a str,
    /// The lineage it continued, if any.
    pub parent: Option<&'a str>,
    /// The integration branch's tip the worker started from, when there is a repository.
    pub checkpoint: Option<&'a str>,
    /// The decision's time, ns since the epoch.
    pub now_ns: i64,
    /// The warm-lease time, minutes.
    pub warm_minutes: u64,
}

fn warm_end(now_ns: i64, warm_minutes: u64) -> i64 {
    let warm = i64::try_from(warm_minutes).unwrap_or(i64::MAX).saturating_mul(60_000_000_000);
    now_ns.saturating_add(warm)
}

fn tagged(parts: &[&str]) -> String {
    sha256_tagged(parts.join("\n").as_bytes())
}

/// What a lineage's session is bound to, in the agent-lineage record's terms, for task `t` of
/// `workgroup` run on `provider`: its specifications and change request (`spec_hash`), the
/// workgroup and role it works for (`scope_hash`), the files it may write (`permissions_hash`),
/// the provider's tools with strata's guard and MCP server (`tools_hash`), the runtime and
/// profile it starts with (`runtime_prefix_hash`), its phase and sensitivity (fix loop, model,
/// effort and baseline are not known: null). A completed attempt's record states them; a
/// continuation's `current` states them for the lineage evaluator
/// ([`crate::ce::lineage::evaluate`]), which refuses a resume when any differs.
struct Bound {
    workgroup_id: String,
    platform: &'static str,
    role: String,
    phase: &'static str,
    runtime_prefix_hash: String,
    tools_hash: String,
    permissions_hash: String,
    spec_hash: String,
    scope_hash: String,
    sensitivity: String,
}

fn bound(workgroup: &str, t: &Task, provider: &str) -> Bound {
    let spec = &t.spec;
    let mut specs: Vec<&str> = spec.change_request.iter().chain(&spec.specs).map(String::as_str).collect();
    specs.sort_unstable();
    let mut owns: Vec<&str> = spec.owns.iter().map(String::as_str).collect();
    owns.sort_unstable();
    let profile = spec.profile.as_deref().unwrap_or("backend-developer");
    Bound {
        workgroup_id: workgroup.to_owned(),
        platform: platform(provider),
        role: spec.role.clone(),
        phase: CAPSULE_PHASES[t.phase],
        runtime_prefix_hash: tagged(&[provider, profile]),
        tools_hash: tagged(&[provider, "strata-guard", "strata-mcp"]),
        permissions_hash: tagged(&owns),
        spec_hash: tagged(&specs),
        scope_hash: tagged(&[workgroup, &spec.role]),
        sensitivity: spec.sensitivity.as_deref().unwrap_or("normal").to_owned(),
    }
}

impl Bound {
    /// As a continuation's `current`, with the checkpoint and capsule it is checked against.
    fn current(&self, checkpoint_sha: Option<&str>, capsule_hash: Option<&str>) -> Current {
        let mut c = Current::default();
        for (k, v) in [
            ("workgroup_id", Some(self.workgroup_id.as_str())),
            ("platform", Some(self.platform)),
            ("role", Some(self.role.as_str())),
            ("phase", Some(self.phase)),
            ("fix_loop_id", None),
            ("model", None),
            ("effort", None),
            ("runtime_prefix_hash", Some(self.runtime_prefix_hash.as_str())),
            ("baseline_hash", None),
            ("tools_hash", Some(self.tools_hash.as_str())),
            ("permissions_hash", Some(self.permissions_hash.as_str())),
            ("spec_hash", Some(self.spec_hash.as_str())),
            ("scope_hash", Some(self.scope_hash.as_str())),
            ("sensitivity", Some(self.sensitivity.as_str())),
            ("checkpoint_sha", checkpoint_sha),
            ("capsule_hash", capsule_hash),
        ] {
            c.set(k, v);
        }
        c
    }
}

/// The lineage record of a completed attempt: what its session is bound to ([`bound`]), its
/// session, parent, mode, checkpoint and capsule, and its lease.
pub fn record(c: &Completion<'_>) -> LineageRecord {
    let t = &c.task.spec;
    let mut owns: Vec<&str> = t.owns.iter().map(String::as_str).collect();
    owns.sort_unstable();
    let scope = if owns.is_empty() { "read-only".to_owned() } else { owns.join(", ") };
    let at = format_rfc3339(c.now_ns);
    let b = bound(c.workgroup, c.task, &c.dispatch.provider);
    LineageRecord {
        baseline_hash: None,
        capsule_hash: c.dispatch.capsule_hash.clone(),
        checkpoint_sha: c.checkpoint.map(str::to_owned),
        created_at: at.clone(),
        effort: None,
        fix_loop_id: None,
        last_used_at: at,
        lease_expires_at: Some(format_rfc3339(warm_end(c.now_ns, c.warm_minutes))),
        lineage_id: c.dispatch.lineage_id.clone(),
        mode: c.dispatch.runs_as,
        model: None,
        parent_lineage_id: c.parent.map(str::to_owned),
        permissions_hash: b.permissions_hash,
        phase: b.phase.to_owned(),
        platform: b.platform.to_owned(),
        platform_handle: Some(c.session.to_owned()),
        resumable: true,
        role: b.role,
        runtime_prefix_hash: b.runtime_prefix_hash,
        schema: SCHEMA.to_owned(),
        scope,
        scope_hash: b.scope_hash,
        sensitivity: b.sensitivity,
        spec_hash: b.spec_hash,
        tools_hash: b.tools_hash,
        workgroup_id: b.workgroup_id,
    }
}

/// The ledger events that keep a completed attempt's session warm: the lineage's record with a
/// lease when the ledger does not know it or knows another session of it (a retry's), else a
/// renewed lease (an invalidated lineage stays cold: nothing).
pub fn completed(
    ledger: &Ledger,
    c: &Completion<'_>,
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<Vec<EventData>, WorkgroupError> {
    let id = &c.dispatch.lineage_id;
    let lease = LeaseSet { lineage_id: id.clone(), at_ns: c.now_ns, expires_at_ns: warm_end(c.now_ns, c.warm_minutes) };
    let enc = |e: crate::ce::CeError| WorkgroupError::Encode(e.detail);
    match ledger.lineages().get(id) {
        Some(entry) if entry.invalidated.is_some() => Ok(Vec::new()),
        Some(entry) if entry.record.platform_handle.as_deref() == Some(c.session) => {
            Ok(vec![ledger::event(ids, clock, ledger::LEASE_RENEWED, &lease).map_err(enc)?])
        }
        // Unknown, or a later attempt's new session: (re)recorded with a new lease.
        _ => {
            let r = record(c);
            if !r.usable() {
                return Err(WorkgroupError::Encode(format!("the lineage record of {id} does not match its schema")));
            }
            let recorded = LineageRecorded { lineage_id: id.clone(), record: r };
            Ok(vec![
                ledger::event(ids, clock, ledger::LINEAGE_RECORDED, &recorded).map_err(enc)?,
                ledger::event(ids, clock, ledger::LEASE_GRANTED, &lease).map_err(enc)?,
            ])
        }
    }
}

/// How a warm lineage may be resumed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Warm {
    /// Its record's capsule is the current one: resume as it is.
    Hot,
    /// Its capsule is stale: resume only after briefing it with `current` and recording
    /// [`reconciled`].
    Reconcile {
        /// The capsule its record names (`None`: it was briefed without one).
        recorded: Option<String>,
        /// The prior's capsule as sealed now.
        current: String,
    },
}

/// The task that would resume a warm lineage.
#[derive(Clone, Copy, Debug)]
pub struct Continuation<'a> {
    /// Its workgroup.
    pub workgroup: &'a str,
    /// The task.
    pub task: &'a Task,
    /// The provider it runs on.
    pub provider: &'a str,
}

/// Whether the session of lineage `prior` may be resumed by `next` at `now_ns`, given the
/// prior's capsule as sealed now (`capsule_now`; `None` when the caller seals none, so nothing
/// can have gone stale); `Err` says why not. Beyond the ledger's own facts (recorded, never
/// invalidated, its lease live, the same session), the lineage evaluator decides, as `strata ce
/// lineage` does: the record (with the lease as the ledger holds it now) against what `next` is
/// bound to. The evaluation comes back either way, for the dispatch to record.
pub fn resumable(
    ledger: &Ledger,
    prior: &str,
    session: &str,
    next: &Continuation<'_>,
    now_ns: i64,
    warm_minutes: u64,
    capsule_now: Option<&str>,
) -> (Result<Warm, String>, Option<LineageCheck>) {
    let record = match warm_record(ledger, prior, session, next.provider, now_ns) {
        Ok(r) => r,
        Err(why) => return (Err(why), None),
    };
    let recorded = record.capsule_hash.clone();
    let recorded = recorded.as_deref();
    // The branch a session starts from is carried by its capsule (a moved tip makes it stale,
    // which reconciliation handles), not by the lineage: the record's checkpoint stands.
    let mut current = bound(next.workgroup, next.task, next.provider)
        .current(record.checkpoint_sha.as_deref(), capsule_now.or(recorded));
    current.independent_reviewer = PHASES[next.task.phase] == "review";
    let e = crate::ce::lineage::evaluate(Some(&record), &current, i128::from(now_ns), warm_minutes);
    let check = LineageCheck {
        lineage_id: prior.to_owned(),
        state: e.state.as_str().to_owned(),
        invalidations: e.invalidations.iter().map(|i| i.as_str().to_owned()).collect(),
    };
    use crate::ce::lineage::State;
    let warm = match e.state {
        State::Hot => Ok(Warm::Hot),
        State::ReconcileRequired => Ok(Warm::Reconcile {
            recorded: recorded.map(str::to_owned),
            current: capsule_now.or(recorded).unwrap_or_default().to_owned(),
        }),
        State::ColdValid => Err(format!("{prior} is valid but not warm (COLD_VALID)")),
        State::Invalid => Err(format!("the lineage evaluator answers INVALID ({})", check.invalidations.join(", "))),
    };
    (warm, Some(check))
}

/// The record of `prior`'s warm session as the ledger holds it at `now_ns` (with its lease),
/// when it is recorded, never invalidated, its lease live, and it ran `session` on `provider`'s
/// platform; `Err` says why not.
fn warm_record(
    ledger: &Ledger,
    prior: &str,
    session: &str,
    provider: &str,
    now_ns: i64,
) -> Result<LineageRecord, String> {
    let entry = ledger.lineages().get(prior).ok_or_else(|| format!("{prior} has no lineage record"))?;
    if let Some(codes) = &entry.invalidated {
        return Err(format!("{prior} was invalidated ({})", codes.join(", ")));
    }
    let lease = ledger
        .leases()
        .get(prior)
        .filter(|l| l.expires_at_ns > now_ns)
        .ok_or_else(|| format!("{prior}'s lease has ended"))?;
    let record = &entry.record;
    if record.platform != platform(provider) {
        return Err(format!("{prior} ran on {}, this task on {provider}", record.platform));
    }
    if record.platform_handle.as_deref().unwrap_or_default() != session {
        return Err(format!("{prior}'s recorded session is not {session}"));
    }
    Ok(LineageRecord {
        last_used_at: format_rfc3339(lease.at_ns),
        lease_expires_at: Some(format_rfc3339(lease.expires_at_ns)),
        ..record.clone()
    })
}

/// Whether `next` may fork (inherit whole) the warm session of lineage `parent` at `now_ns`;
/// `Err` says why not. The same ledger facts as [`resumable`], then the same lineage evaluator,
/// on what a fork must share with its parent: the workgroup, platform, runtime and tools, and
/// the sensitivity (a fork is a new lineage with its own role, phase, specifications and files,
/// so those are not compared). A stale capsule does not stop a fork: the fork is briefed with its
/// own.
pub fn forkable(
    ledger: &Ledger,
    parent: &str,
    session: &str,
    next: &Continuation<'_>,
    now_ns: i64,
    warm_minutes: u64,
) -> (Result<(), String>, Option<LineageCheck>) {
    let record = match warm_record(ledger, parent, session, next.provider, now_ns) {
        Ok(r) => r,
        Err(why) => return (Err(why), None),
    };
    let mine = bound(next.workgroup, next.task, next.provider);
    let mut current = mine.current(record.checkpoint_sha.as_deref(), record.capsule_hash.as_deref());
    for (k, v) in [
        ("role", Some(record.role.as_str())),
        ("phase", Some(record.phase.as_str())),
        ("permissions_hash", Some(record.permissions_hash.as_str())),
        ("spec_hash", Some(record.spec_hash.as_str())),
        ("scope_hash", Some(record.scope_hash.as_str())),
    ] {
        current.set(k, v);
    }
    let e = crate::ce::lineage::evaluate(Some(&record), &current, i128::from(now_ns), warm_minutes);
    let check = LineageCheck {
        lineage_id: parent.to_owned(),
        state: e.state.as_str().to_owned(),
        invalidations: e.invalidations.iter().map(|i| i.as_str().to_owned()).collect(),
    };
    use crate::ce::lineage::State;
    let ok = match e.state {
        State::Hot | State::ReconcileRequired => Ok(()),
        State::ColdValid => Err(format!("{parent} is valid but not warm (COLD_VALID)")),
        State::Invalid => Err(format!("the lineage evaluator answers INVALID ({})", check.invalidations.join(", "))),
    };
    (ok, Some(check))
}

/// `ce.lineage-reconciled` for `prior`, briefed at `now_ns` with capsule `current` in place of
/// `recorded` (what [`resumable`] returned).
pub fn reconciled(
    prior: &str,
    recorded: Option<&str>,
    current: &str,
    now_ns: i64,
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<EventData, WorkgroupError> {
    let x = ledger::LineageReconciled {
        lineage_id: prior.to_owned(),
        from_capsule_hash: recorded.map(str::to_owned),
        capsule_hash: current.to_owned(),
        at_ns: now_ns,
    };
    ledger::event(ids, clock, ledger::LINEAGE_RECONCILED, &x).map_err(|e| WorkgroupError::Encode(e.detail))
}

/// `ce.lease-renewed` for `prior`, resumed at `now_ns`.
pub fn renewed(
    prior: &str,
    now_ns: i64,
    warm_minutes: u64,
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<EventData, WorkgroupError> {
    let lease = LeaseSet { lineage_id: prior.to_owned(), at_ns: now_ns, expires_at_ns: warm_end(now_ns, warm_minutes) };
    ledger::event(ids, clock, ledger::LEASE_RENEWED, &lease).map_err(|e| WorkgroupError::Encode(e.detail))
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use strata_journal::{ExpectedVersion, Journal, StreamAppend};

    use super::*;
    use crate::ports::{CountingIds, FixedClock};
    use crate::workgroup::events::PromptRef;
    use crate::workgroup::plan::{Plan, check};

    const MINUTE: i64 = 60_000_000_000;

    fn task() -> Task {
        let plan: Plan = serde_json::from_value(json!({
            "workgroup": "wg",
            "pipeline": "light",
            "task": [{"id": "api", "role": "backend-builder", "phase": "build", "objective": "Build it.",
                      "owns": ["src/api/"], "specs": ["SPEC-1"]}],
        }))
        .expect("plan");
        check(&plan).expect("checks").tasks.remove(0)
    }

    fn dispatch(provider: &str) -> Dispatched {
        Dispatched {
            task: "api".into(),
            attempt: 1,
            lineage_id: "wg.api".into(),
            provider: provider.into(),
            routed: crate::ce::router::Mode::FreshCapsule,
            runs_as: crate::ce::router::Mode::FreshCapsule,
            reason_codes: Vec::new(),
            prompt: PromptRef { prompt_task: "wg.api".into(), prompt_hash: "sha256:00".into(), tokens: 10 },
            baseline_tokens: 0,
            from_session: None,
            capsule_hash: None,
            lineage_check: None,
            gate: None,
            evidence: None,
            caps: Default::default(),
            fallback_after: None,
            without_knowledge: false,
            model: None,
        }
    }

    /// The ledger after appending `events` to it.
    fn fold(ledger: &mut Ledger, journal: &Journal, events: Vec<EventData>) {
        let from = journal.head().seq + 1;
        let append =
            StreamAppend { stream: ledger::STREAM.into(), expected: ExpectedVersion::Exact(ledger.version()), events };
        journal.append_multi_blocking(vec![append]).expect("append").expect("no conflict");
        journal
            .scan(from, u64::MAX, |r, _| strata_journal::projection::Projection::apply(ledger, r).map(|()| true))
            .expect("scan")
            .expect("fold");
    }

    /// Session `s-1` of `t` completed at `now`, warm for 20 minutes.
    fn completion<'a>(t: &'a Task, d: &'a Dispatched, now: i64) -> Completion<'a> {
        Completion {
            workgroup: "wg",
            task: t,
            dispatch: d,
            session: "s-1",
            parent: None,
            checkpoint: None,
            now_ns: now,
            warm_minutes: 20,
        }
    }

    /// [`resumable`] for the test task continuing itself on `provider`.
    fn res(
        ledger: &Ledger,
        prior: &str,
        session: &str,
        provider: &str,
        now_ns: i64,
        capsule_now: Option<&str>,
    ) -> Result<Warm, String> {
        let t = task();
        let next = Continuation { workgroup: "wg", task: &t, provider };
        resumable(ledger, prior, session, &next, now_ns, 20, capsule_now).0
    }

    #[test]
    fn a_completed_session_is_recorded_warm_then_renewed_and_resumable_only_while_the_lease_lives() {
        let journal = Journal::in_memory("warm").expect("journal");
        let mut ledger = Ledger::default();
        let (t, d) = (task(), dispatch("claude"));
        let (mut ids, clock) = (CountingIds::new(1), FixedClock(0));
        let now = 1_000 * MINUTE;
        let c = completion(&t, &d, now);
        assert!(crate::ce::wire::lineage::record_of(&record(&c).to_json()).is_some(), "{}", record(&c).to_json());
        let first = completed(&ledger, &c, &mut ids, &clock).expect("events");
        let types: Vec<&str> = first.iter().map(|e| e.event_type.as_str()).collect();
        assert_eq!(types, [ledger::LINEAGE_RECORDED, ledger::LEASE_GRANTED]);
        fold(&mut ledger, &journal, first);

        assert_eq!(res(&ledger, "wg.api", "s-1", "claude", now + 19 * MINUTE, None), Ok(Warm::Hot));
        let late = res(&ledger, "wg.api", "s-1", "claude", now + 20 * MINUTE, None).expect_err("lease ended");
        assert!(late.contains("lease has ended"), "{late}");
        let other = res(&ledger, "wg.api", "s-1", "codex", now, None).expect_err("another platform");
        assert!(other.contains("ran on claude"), "{other}");
        let session = res(&ledger, "wg.api", "s-2", "claude", now, None).expect_err("another session");
        assert!(session.contains("not s-2"), "{session}");
        let unknown = res(&ledger, "wg.ghost", "s-1", "claude", now, None).expect_err("unknown");
        assert!(unknown.contains("no lineage record"), "{unknown}");

        // Completing again (a retry, or the lineage's next turn) renews the lease.
        let again = Completion { now_ns: now + 30 * MINUTE, ..c };
        let second = completed(&ledger, &again, &mut ids, &clock).expect("events");
        assert_eq!(second.iter().map(|e| e.event_type.as_str()).collect::<Vec<_>>(), [ledger::LEASE_RENEWED]);
        fold(&mut ledger, &journal, second);
        assert_eq!(res(&ledger, "wg.api", "s-1", "claude", now + 45 * MINUTE, None), Ok(Warm::Hot));
        // A retry's new session replaces the record: the old session is no longer resumed.
        let retry = Completion { session: "s-3", ..again };
        let third = completed(&ledger, &retry, &mut ids, &clock).expect("events");
        assert_eq!(third.first().map(|e| e.event_type.as_str()), Some(ledger::LINEAGE_RECORDED));
        fold(&mut ledger, &journal, third);
        assert!(res(&ledger, "wg.api", "s-1", "claude", now + 45 * MINUTE, None).is_err());
        assert_eq!(res(&ledger, "wg.api", "s-3", "claude", now + 45 * MINUTE, None), Ok(Warm::Hot));
        let renew = renewed("wg.api", now + 45 * MINUTE, 20, &mut ids, &clock).expect("renew");
        assert_eq!(renew.event_type, ledger::LEASE_RENEWED);
    }

    #[test]
    fn a_continuation_bound_to_other_specs_or_files_is_not_resumed_and_the_evaluator_says_why() {
        let journal = Journal::in_memory("warm-evaluator").expect("journal");
        let mut ledger = Ledger::default();
        let (t, d) = (task(), dispatch("claude"));
        let (mut ids, clock) = (CountingIds::new(1), FixedClock(0));
        let now = 1_000 * MINUTE;
        let first = completed(&ledger, &completion(&t, &d, now), &mut ids, &clock).expect("events");
        fold(&mut ledger, &journal, first);
        // The same work resumes; a spec changed since the record, or other owned files, does not.
        let same = Continuation { workgroup: "wg", task: &t, provider: "claude" };
        let (ok, check) = resumable(&ledger, "wg.api", "s-1", &same, now + MINUTE, 20, None);
        assert_eq!(ok, Ok(Warm::Hot));
        assert_eq!(check.map(|c| c.state), Some("HOT".to_owned()));
        let mut changed = t.clone();
        changed.spec.specs = vec!["SPEC-2".to_owned()];
        changed.spec.owns = vec!["tests/api/".to_owned()];
        let next = Continuation { workgroup: "wg", task: &changed, provider: "claude" };
        let (refused, check) = resumable(&ledger, "wg.api", "s-1", &next, now + MINUTE, 20, None);
        let why = refused.expect_err("a changed spec is not resumed");
        assert!(why.contains("INVALID") && why.contains("SPEC_MISMATCH"), "{why}");
        let check = check.expect("the evaluation is returned for the dispatch to record");
        assert_eq!(check.state, "INVALID");
        assert_eq!(check.invalidations, ["SPEC_MISMATCH", "PERMISSIONS_MISMATCH"]);
    }

    #[test]
    fn a_stale_capsule_is_resumed_only_reconciled_and_the_record_then_names_the_current_one() {
        let journal = Journal::in_memory("warm-reconcile").expect("journal");
        let h = |c: char| format!("sha256:{}", c.to_string().repeat(64));
        let (ha, hb, hc) = (h('a'), h('b'), h('c'));
        let mut ledger = Ledger::default();
        let t = task();
        let d = Dispatched { capsule_hash: Some(ha.clone()), ..dispatch("claude") };
        let (mut ids, clock) = (CountingIds::new(1), FixedClock(0));
        let now = 1_000 * MINUTE;
        let c = completion(&t, &d, now);
        let first = completed(&ledger, &c, &mut ids, &clock).expect("events");
        fold(&mut ledger, &journal, first);
        let at = now + MINUTE;
        // The same capsule: hot. A caller sealing none: nothing to compare, hot.
        assert_eq!(res(&ledger, "wg.api", "s-1", "claude", at, Some(ha.as_str())), Ok(Warm::Hot));
        assert_eq!(res(&ledger, "wg.api", "s-1", "claude", at, None), Ok(Warm::Hot));
        // Another capsule now: reconcile first.
        let stale = res(&ledger, "wg.api", "s-1", "claude", at, Some(hb.as_str())).expect("warm");
        assert_eq!(stale, Warm::Reconcile { recorded: Some(ha.clone()), current: hb.clone() });
        let e = reconciled("wg.api", Some(ha.as_str()), &hb, at, &mut ids, &clock).expect("event");
        assert_eq!(e.event_type, ledger::LINEAGE_RECONCILED);
        fold(&mut ledger, &journal, vec![e]);
        assert_eq!(res(&ledger, "wg.api", "s-1", "claude", at, Some(hb.as_str())), Ok(Warm::Hot));
        let record = &ledger.lineages()["wg.api"].record;
        assert_eq!(record.to_json()["capsule_hash"], hb.as_str());
        assert_eq!(record.to_json()["last_used_at"], format_rfc3339(at));

        // A reconciliation from a capsule the record does not name does not fold.
        let wrong = reconciled("wg.api", Some(ha.as_str()), &hc, at, &mut ids, &clock).expect("event");
        let from = journal.head().seq + 1;
        let append = StreamAppend {
            stream: ledger::STREAM.into(),
            expected: ExpectedVersion::Exact(ledger.version()),
            events: vec![wrong],
        };
        journal.append_multi_blocking(vec![append]).expect("append").expect("no conflict");
        let folded = journal
            .scan(from, u64::MAX, |r, _| strata_journal::projection::Projection::apply(&mut ledger, r).map(|()| true))
            .expect("scan");
        let err = folded.expect_err("a reconciliation from the wrong capsule is refused");
        assert!(err.to_string().contains("its record names"), "{err}");
    }
}
