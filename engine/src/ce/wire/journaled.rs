//! The wire operations against the journal's [`Ledger`] (`strata ce --journal`): state the
//! reference runtime takes from its caller comes from the ledger instead, and every decision
//! that changes it comes back as events for the adapter to append in one batch, expecting the
//! ledger version it was made against.
//!
//! What the ledger supplies, replacing any caller-given value: active writers and the count of
//! active inherited or resumed writers (`route`, `dispatch`); whether a candidate lineage is
//! warm (`route`: only with a live lease); the lineage record of a known lineage and its lease
//! (`lineage`, `dispatch`); previous vault deltas (`vault-delta`). The
//! time is the [`Clock`] port's; a request's `now` is refused. Workspace facts (`workspace`:
//! case sensitivity, symbolic links) given in a request are added to the ledger's and recorded,
//! so paths are canonicalised from recorded facts, never from the filesystem (links the adapter
//! discovers under a `workspace_root` arrive the same way); while writers own paths they may only
//! add links that move no owned path. Leases whose end has passed are recorded as expired before
//! anything else is decided.
//!
//! `telemetry`, `rollout` and `result-policy` change no state and answer as without a journal.

use serde_json::{Value, json};
use strata_journal::EventData;

use super::facts::Obj;
use super::{Context, vault};
use crate::ce::error::{CeError, Code, fail};
use crate::ce::ledger::{
    self, LeaseExpired, LeaseSet, Ledger, LineageInvalidated, LineageRecorded, WorkspaceFacts, event,
};
use crate::ce::lineage::{self, LineageRecord};
use crate::ce::router::{Mode, RouteFacts};
use crate::ce::{ownership, router, time};
use crate::ports::{Clock, Ids};

/// Operations only a journal can answer (strata).
pub const LEDGER_OPERATIONS: [&str; 1] = ["release"];

/// An operation's answer and the events that record it (empty when nothing changed).
#[derive(Debug)]
pub struct Decided {
    /// The wire result.
    pub result: Value,
    /// Events for the ledger stream.
    pub events: Vec<EventData>,
}

/// One decision against `state`: `ctx` gives the workspace and warm-lease time, `clock` the
/// time (`ctx.now_ns` is not read).
pub fn run(
    op: &str,
    payload: &Value,
    ctx: &Context,
    state: &Ledger,
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<Decided, CeError> {
    let p = Obj::of(payload, "", Code::InvalidRequest)?;
    refuse_now(payload)?;
    let now = clock.now_ns();
    let workspace = match p.object("workspace")? {
        None => state.workspace().clone(),
        Some(w) => super::workspace_of(&w, state.workspace())?,
    };
    let changed = workspace != *state.workspace();
    if changed && !state.keeps_owned_paths(&workspace) {
        return fail(
            Code::InvalidFact,
            "workspace: while writers own paths, facts may only add links that move no owned path; release them first",
        );
    }
    let ctx = Context { now_ns: i128::from(now), workspace, ..ctx.clone() };
    let mut d = Decider { state, ids, clock, now, warm_minutes: ctx.warm_lease_minutes, events: Vec::new() };
    if changed {
        let facts = WorkspaceFacts { case_sensitive: ctx.workspace.case_sensitive, links: ctx.workspace.links.clone() };
        d.push(ledger::WORKSPACE_FACTS, &facts)?;
    }
    for id in state.expired_leases(now) {
        d.push(ledger::LEASE_EXPIRED, &LeaseExpired { lineage_id: id.to_owned(), observed_at_ns: now })?;
    }
    let result = match op {
        "route" => d.route(&p, &ctx)?,
        "dispatch" => d.dispatch(&p, &ctx)?,
        "lineage" => {
            let current =
                p.get("current").ok_or_else(|| CeError::new(Code::InvalidRequest, "current: required object"))?;
            let id = lineage_id_of(&p, p.get("lineage"))?;
            d.lineage(id.as_deref(), p.get("lineage"), current)?.0.to_json()
        }
        "capsule" => d.capsule(&p)?,
        "vault-delta" => d.vault(&p)?,
        "release" => {
            let id = required_lineage_id(&p)?;
            if let Some(e) = ownership::release_event(state, &id, d.ids, d.clock)? {
                d.events.push(e);
            }
            json!({"lineage_id": id, "released": d.events.iter().any(|e| e.event_type == ledger::RELEASED)})
        }
        _ => super::run(op, payload, &ctx)?,
    };
    Ok(Decided { result, events: d.events })
}

/// A request's `now` (top level, or `lineage.now` in dispatch) would let the caller move the
/// ledger's clock.
fn refuse_now(payload: &Value) -> Result<(), CeError> {
    if payload.get("now").is_some() || payload.get("lineage").and_then(|l| l.get("now")).is_some() {
        return fail(Code::InvalidRequest, "now: with --journal the clock decides the time; remove it");
    }
    Ok(())
}

fn required_lineage_id(p: &Obj<'_>) -> Result<String, CeError> {
    match p.string("lineage_id")? {
        Some(id) => {
            ledger::check_lineage_id(id)?;
            Ok(id.to_owned())
        }
        None => fail(Code::InvalidRequest, "lineage_id: with --journal the unit's lineage id is required"),
    }
}

/// The lineage an evaluation is about: `lineage_id`, else the record's own id.
fn lineage_id_of(p: &Obj<'_>, record: Option<&Value>) -> Result<Option<String>, CeError> {
    let id = match p.string("lineage_id")? {
        Some(id) => Some(id.to_owned()),
        None => record.and_then(|r| r.get("lineage_id")).and_then(Value::as_str).map(str::to_owned),
    };
    if let Some(id) = &id {
        ledger::check_lineage_id(id)?;
    }
    Ok(id)
}

struct Decider<'a> {
    state: &'a Ledger,
    ids: &'a mut dyn Ids,
    clock: &'a dyn Clock,
    now: i64,
    warm_minutes: u64,
    events: Vec<EventData>,
}

impl Decider<'_> {
    fn push(&mut self, t: &str, payload: &impl serde::Serialize) -> Result<(), CeError> {
        let e = event(self.ids, self.clock, t, payload)?;
        self.events.push(e);
        Ok(())
    }

    fn lease_live(&self, id: &str) -> bool {
        self.state.leases().get(id).is_some_and(|l| l.expires_at_ns > self.now)
    }

    fn warm_end(&self) -> i64 {
        let warm = i64::try_from(self.warm_minutes).unwrap_or(i64::MAX).saturating_mul(60_000_000_000);
        self.now.saturating_add(warm)
    }

    /// The record to evaluate: the ledger's for a known lineage (with its live lease, or none),
    /// else the caller's, which is recorded (with a lease of at most the warm-lease time when it
    /// asks for one) if it is a usable record of that lineage. Returns the record (`None`: no
    /// usable record, which evaluates as unknown provenance), and whether it is in the ledger now.
    fn resolve(&mut self, id: Option<&str>, given: Option<&Value>) -> Result<(Option<LineageRecord>, bool), CeError> {
        let given = given.and_then(super::lineage::record_of);
        let Some(id) = id else { return Ok((given, false)) };
        if let Some(entry) = self.state.lineages().get(id) {
            let mut record = entry.record.clone();
            let lease = self.state.leases().get(id).filter(|_| self.lease_live(id)).map(|l| l.expires_at_ns);
            record.lease_expires_at = lease.map(time::format_rfc3339);
            return Ok((Some(record), true));
        }
        let given = match given {
            Some(g) if g.lineage_id == id => g,
            other => return Ok((other, false)),
        };
        let mut record = given.clone();
        let asked = given.lease_expires_at.as_deref().map(|s| time::parse_rfc3339(s, "lease"));
        self.push(ledger::LINEAGE_RECORDED, &LineageRecorded { lineage_id: id.to_owned(), record: given })?;
        record.lease_expires_at = match asked {
            Some(Ok(end)) if end > i128::from(self.now) => {
                let end = i64::try_from(end).unwrap_or(i64::MAX).min(self.warm_end());
                let grant = LeaseSet { lineage_id: id.to_owned(), at_ns: self.now, expires_at_ns: end };
                self.push(ledger::LEASE_GRANTED, &grant)?;
                record.last_used_at = time::format_rfc3339(self.now);
                Some(time::format_rfc3339(end))
            }
            _ => None,
        };
        Ok((Some(record), true))
    }

    /// Evaluates a lineage and records an invalid verdict on a ledger lineage.
    fn lineage(
        &mut self,
        id: Option<&str>,
        given: Option<&Value>,
        current: &Value,
    ) -> Result<(lineage::Evaluation, Option<String>), CeError> {
        let current = super::lineage::current_of(current)?;
        let before = self.events.len();
        let (record, mut known) = self.resolve(id, given)?;
        let eval = lineage::evaluate(record.as_ref(), &current, i128::from(self.now), self.warm_minutes);
        let registered = self.events.len() > before;
        if registered && eval.invalidations.contains(&lineage::Invalidation::UnknownProvenance) {
            // A record nobody can vouch for (future-dated, out of order) is not kept.
            self.events.truncate(before);
            known = false;
        }
        if let (lineage::State::Invalid, true, Some(id)) = (eval.state, known, id) {
            let codes = eval.invalidations.iter().map(|c| c.as_str().to_owned()).collect();
            self.push(ledger::LINEAGE_INVALIDATED, &LineageInvalidated { lineage_id: id.to_owned(), codes })?;
        }
        Ok((eval, id.filter(|_| known).map(str::to_owned)))
    }

    fn route(&mut self, p: &Obj<'_>, ctx: &Context) -> Result<Value, CeError> {
        let unit = required_lineage_id(p)?;
        let input = p.get("input").ok_or_else(|| CeError::new(Code::InvalidRequest, "input: required object"))?;
        let mut facts = RouteFacts::from_json(input, &ctx.workspace)?;
        ownership::apply_ledger(self.state, &unit, &mut facts)?;
        // Without `current` there is no evaluation here: a candidate lineage is resumable only
        // while the ledger holds a live lease for it (use `dispatch` for the full check).
        if let Some(l) = facts.lineage.as_mut() {
            let live = l.lineage_id.as_deref().is_some_and(|id| self.lease_live(id));
            l.compatible &= live;
            l.resumable &= live;
        }
        let decided = router::route(&facts)?;
        let events = ownership::route_events(self.state, &unit, &facts, &decided, decided.mode, self.ids, self.clock)?;
        self.events.extend(events);
        Ok(decided.to_json())
    }

    fn dispatch(&mut self, p: &Obj<'_>, ctx: &Context) -> Result<Value, CeError> {
        let unit = required_lineage_id(p)?;
        let mut evaluated = None;
        if let Some((l, current)) = super::dispatch_lineage(p)? {
            let record = l.get("lineage");
            let id = lineage_id_of(&l, record)?;
            evaluated = Some(self.lineage(id.as_deref(), record, current)?);
        }
        let hot = evaluated.as_ref().is_some_and(|(e, _)| e.state == lineage::State::Hot);
        let plan = super::dispatch_plan(p, ctx, evaluated.as_ref().map(|(e, _)| e), |facts| {
            ownership::apply_ledger(self.state, &unit, facts)
        })?;
        let runs_as = plan.selection.selected_mode.unwrap_or(plan.route.mode);
        let events =
            ownership::route_events(self.state, &unit, &plan.facts, &plan.route, runs_as, self.ids, self.clock)?;
        self.events.extend(events);
        if let (true, Mode::Resume, Some((_, Some(id)))) = (hot, runs_as, &evaluated) {
            let renew = LeaseSet { lineage_id: id.clone(), at_ns: self.now, expires_at_ns: self.warm_end() };
            self.push(ledger::LEASE_RENEWED, &renew)?;
        }
        Ok(plan.to_json())
    }

    fn capsule(&mut self, p: &Obj<'_>) -> Result<Value, CeError> {
        let sealed = super::seal_request(p)?;
        let externalized = sealed
            .capsule
            .externalized
            .iter()
            .flatten()
            .map(|x| ledger::Externalized { path: x.path.clone(), sha256: x.sha256.clone(), item_count: x.item_count })
            .collect();
        let bytes = u64::try_from(sealed.bytes).unwrap_or(u64::MAX);
        let json = super::capsule::to_json(&sealed.capsule);
        self.push(ledger::CAPSULE_SEALED, &ledger::CapsuleSealed { capsule_hash: sealed.hash, bytes, externalized })?;
        Ok(json)
    }

    fn vault(&mut self, p: &Obj<'_>) -> Result<Value, CeError> {
        let input = p.get("input").ok_or_else(|| CeError::new(Code::InvalidRequest, "input: required object"))?;
        let decision = vault::decide_with(input, self.state.vault().values().map(|d| &d.0))?;
        if decision.action != "skip" {
            let knowledge_id = match &decision.knowledge_id {
                Some(id) => id.clone(),
                None => format!("kn-{}", self.ids.next_id().simple()),
            };
            // The ledger assigns identities; ids the caller put on the delta are not kept.
            let mut delta = input.get("delta").cloned().unwrap_or_else(|| json!({}));
            if let Some(o) = delta.as_object_mut() {
                for k in ["KnowledgeId", "knowledgeId", "knowledge_id"] {
                    o.remove(k);
                }
            }
            let applied = ledger::VaultDeltaApplied {
                knowledge_id: knowledge_id.clone(),
                action: decision.action.to_owned(),
                reason: decision.reason.to_owned(),
                delta: vault::Record(delta),
            };
            self.push(ledger::VAULT_DELTA_APPLIED, &applied)?;
            let mut out = decision.to_json();
            if let Some(o) = out.as_object_mut() {
                o.insert("KnowledgeId".to_owned(), Value::from(knowledge_id));
            }
            return Ok(out);
        }
        Ok(decision.to_json())
    }
}
