//! The dispatch ledger: the state the reference runtime trusts its caller for, owned by the
//! journal instead. Every context-efficiency decision that changes state is an event on one
//! stream ([`STREAM`]), appended with that stream's version expected, so concurrent deciders are
//! serialised by the journal and a decision is always made against the state it records.
//!
//! Folded here: the workspace facts (case sensitivity, symbolic links) paths are canonicalised
//! under, writer ownership (who owns which canonical paths, and in which mode, which gives
//! the count of active inherited or resumed writers), lineage records with their invalidations,
//! leases (granted, renewed, expired), sealed capsules, the vault delta journal and the measurement
//! runs already consumed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use strata_journal::{EventData, Record};

use super::error::{CeError, Code, fail};
use super::lineage::LineageRecord;
use super::paths::{self, Workspace};
use super::router::{ActiveWriter, Mode};
use super::wire::vault::Record as VaultRecord;
use crate::ports::{Clock, Ids};
use crate::projections::kept::EventLog;

/// The one stream every ledger decision is appended to.
pub const STREAM: &str = "ce/ledger";
/// `ce.route-decided`: a routing decision with its evidence.
pub const ROUTE_DECIDED: &str = "ce.route-decided";
/// `ce.ownership-claimed`: a lineage now owns paths.
pub const CLAIMED: &str = "ce.ownership-claimed";
/// `ce.ownership-conflict`: a claim refused because another lineage owns an overlapping path.
pub const CONFLICT: &str = "ce.ownership-conflict";
/// `ce.ownership-released`: a lineage owns nothing any more.
pub const RELEASED: &str = "ce.ownership-released";
/// `ce.lineage-recorded`: a worker lineage's record, as first seen.
pub const LINEAGE_RECORDED: &str = "ce.lineage-recorded";
/// `ce.lineage-invalidated`: a lineage may never be resumed or inherited again.
pub const LINEAGE_INVALIDATED: &str = "ce.lineage-invalidated";
/// `ce.lineage-reconciled`: a warm lineage whose capsule went stale was briefed with the
/// current one; its record names the new capsule.
pub const LINEAGE_RECONCILED: &str = "ce.lineage-reconciled";
/// `ce.lease-granted`: a lineage is warm until a time.
pub const LEASE_GRANTED: &str = "ce.lease-granted";
/// `ce.lease-renewed`: a warm lineage was used again and stays warm longer.
pub const LEASE_RENEWED: &str = "ce.lease-renewed";
/// `ce.lease-expired`: the clock passed a lease's end.
pub const LEASE_EXPIRED: &str = "ce.lease-expired";
/// `ce.capsule-sealed`: a capsule passed the pipeline.
pub const CAPSULE_SEALED: &str = "ce.capsule-sealed";
/// `ce.vault-delta-applied`: a knowledge capture was batched, flushed, amended or updated.
pub const VAULT_DELTA_APPLIED: &str = "ce.vault-delta-applied";
/// `ce.workspace-facts`: the workspace's case sensitivity and symbolic links, as a whole.
pub const WORKSPACE_FACTS: &str = "ce.workspace-facts";
/// `ce.measurement-run-consumed`: a signed measurement run was used for a promotion decision.
pub const RUN_CONSUMED: &str = "ce.measurement-run-consumed";
/// Every type folded here.
pub const ALL: [&str; 14] = [
    WORKSPACE_FACTS,
    RUN_CONSUMED,
    ROUTE_DECIDED,
    CLAIMED,
    CONFLICT,
    RELEASED,
    LINEAGE_RECORDED,
    LINEAGE_INVALIDATED,
    LINEAGE_RECONCILED,
    LEASE_GRANTED,
    LEASE_RENEWED,
    LEASE_EXPIRED,
    CAPSULE_SEALED,
    VAULT_DELTA_APPLIED,
];
/// Longest lineage id.
pub const LINEAGE_ID_BYTES_MAX: usize = 128;

/// `ce.route-decided` v1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteDecided {
    /// The unit's lineage.
    pub lineage_id: String,
    /// Mode.
    pub mode: String,
    /// Reason codes, canonical order.
    pub reason_codes: Vec<String>,
    /// Canonical paths it proposed to own.
    pub proposed: Vec<String>,
    /// The lineages it was checked against, with their paths, at this stream version.
    pub active_writers: BTreeMap<String, Vec<String>>,
    /// Active inherited or resumed writers it was checked against (from the ledger).
    #[serde(default)]
    pub active_inherited_writers: u64,
}

/// `ce.ownership-claimed` v1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Claimed {
    /// Lineage.
    pub lineage_id: String,
    /// Canonical paths now owned (replacing any it owned before).
    pub paths: Vec<String>,
    /// The mode the writer runs in (`resume`, `inherit-*` count toward the inherited cap).
    #[serde(default)]
    pub mode: Option<String>,
}

/// `ce.ownership-conflict` v1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Conflicted {
    /// Lineage refused.
    pub lineage_id: String,
    /// The lineage holding the overlapping path.
    pub holder: String,
    /// The held path.
    pub held: String,
    /// The path asked for.
    pub asked: String,
}

/// `ce.ownership-released` v1 (and the payload of every event naming only a lineage).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Released {
    /// Lineage.
    pub lineage_id: String,
}

/// `ce.lineage-recorded` v1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LineageRecorded {
    /// Lineage.
    pub lineage_id: String,
    /// The `knowzcode.agent-lineage/v1` record as first seen.
    pub record: LineageRecord,
}

/// `ce.lineage-invalidated` v1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LineageInvalidated {
    /// Lineage.
    pub lineage_id: String,
    /// Invalidation codes, output order.
    pub codes: Vec<String>,
}

/// `ce.lineage-reconciled` v1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LineageReconciled {
    /// Lineage.
    pub lineage_id: String,
    /// The capsule its record named before (`None`: it was never briefed with one).
    pub from_capsule_hash: Option<String>,
    /// The capsule it was briefed with now.
    pub capsule_hash: String,
    /// When (the decider's clock), ns since the epoch.
    pub at_ns: i64,
}

/// `ce.lease-granted` and `ce.lease-renewed` v1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseSet {
    /// Lineage.
    pub lineage_id: String,
    /// When it was granted or renewed (the decider's clock), ns since the epoch.
    pub at_ns: i64,
    /// When it ends, ns since the epoch; at most the configured warm-lease time after `at_ns`.
    pub expires_at_ns: i64,
}

/// `ce.lease-expired` v1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseExpired {
    /// Lineage.
    pub lineage_id: String,
    /// The decider's clock when it noticed, ns since the epoch.
    pub observed_at_ns: i64,
}

/// What overflow moved out of a sealed capsule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Externalized {
    /// Artifact path.
    pub path: String,
    /// `sha256:` of the moved evidence.
    pub sha256: String,
    /// Items moved.
    pub item_count: u64,
}

/// `ce.capsule-sealed` v1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CapsuleSealed {
    /// The capsule's hash.
    pub capsule_hash: String,
    /// Canonical size, bytes.
    pub bytes: u64,
    /// Evidence moved out by overflow (empty when nothing moved).
    pub externalized: Vec<Externalized>,
}

/// `ce.vault-delta-applied` v1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VaultDeltaApplied {
    /// The stable id of the record written (new for batch and flush, the target's for amend and
    /// update).
    pub knowledge_id: String,
    /// `batch`, `flush`, `amend` or `update`.
    pub action: String,
    /// Why.
    pub reason: String,
    /// The delta as given (category, title, content, semantic_key, supersedes, source_hash):
    /// the caller's JSON, kept verbatim for the wire's `vault-delta` (no dispatch decision reads
    /// it).
    pub delta: VaultRecord,
}

/// `ce.workspace-facts` v1: every fact, replacing the earlier set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceFacts {
    /// Paths compare case-sensitively.
    pub case_sensitive: bool,
    /// Canonical link path → canonical target (`None`: the link leaves the workspace).
    pub links: BTreeMap<String, Option<String>>,
}

/// `ce.measurement-run-consumed` v1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunConsumed {
    /// `measurement-` and 16 to 64 lowercase hex digits.
    pub measurement_run_id: String,
    /// The `corpus_digest` of the envelope it came in.
    pub corpus_digest: String,
}

/// A lineage as the ledger knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineageEntry {
    /// The record as first seen, with `last_used_at` moved on by renewals and reconciliations and
    /// `capsule_hash` by reconciliations.
    pub record: LineageRecord,
    /// Invalidation codes once invalidated (never cleared).
    pub invalidated: Option<Vec<String>>,
}

/// A live lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease {
    /// Granted or last renewed, ns.
    pub at_ns: i64,
    /// Ends, ns.
    pub expires_at_ns: i64,
}

/// An owner's claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owned {
    /// Canonical paths.
    pub paths: Vec<String>,
    /// Mode it runs in, when recorded.
    pub mode: Option<String>,
}

/// The projection.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ledger {
    workspace: Workspace,
    owners: BTreeMap<String, Owned>,
    lineages: BTreeMap<String, LineageEntry>,
    leases: BTreeMap<String, Lease>,
    vault: BTreeMap<String, VaultRecord>,
    capsules_sealed: u64,
    consumed_runs: BTreeMap<String, u64>,
    version: u64,
    kept: EventLog,
}

impl Ledger {
    /// The workspace facts paths are canonicalised under.
    pub fn workspace(&self) -> &Workspace {
        &self.workspace
    }

    /// Lineage → what it owns.
    pub fn owners(&self) -> &BTreeMap<String, Owned> {
        &self.owners
    }

    /// Whether workspace facts may become `next`: always while no writer owns paths; while some
    /// do, only by adding links that move no owned path (the same case rule, every recorded link
    /// kept as it is, every owned path canonical under `next` as recorded). Anything else would
    /// leave the ownership map in the old facts' terms.
    pub fn keeps_owned_paths(&self, next: &Workspace) -> bool {
        let now = &self.workspace;
        self.owners.is_empty()
            || (next.case_sensitive == now.case_sensitive
                && now.links.iter().all(|(k, v)| next.links.get(k) == Some(v))
                && self
                    .owners
                    .values()
                    .flat_map(|o| &o.paths)
                    .all(|p| paths::canonical(next, p, "owned").is_ok_and(|c| c == *p)))
    }

    /// Known lineages.
    pub fn lineages(&self) -> &BTreeMap<String, LineageEntry> {
        &self.lineages
    }

    /// Live leases (granted or renewed, not yet recorded as expired).
    pub fn leases(&self) -> &BTreeMap<String, Lease> {
        &self.leases
    }

    /// Vault records by stable id, each the applied delta with its `KnowledgeId`.
    pub fn vault(&self) -> &BTreeMap<String, VaultRecord> {
        &self.vault
    }

    /// Measurement runs already used, with the sequence that consumed each.
    pub fn consumed_runs(&self) -> &BTreeMap<String, u64> {
        &self.consumed_runs
    }

    /// Capsules sealed so far.
    pub fn capsules_sealed(&self) -> u64 {
        self.capsules_sealed
    }

    /// The ledger stream version folded so far.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The owners other than `except` as the router's active writers.
    pub fn active_writers(&self, except: Option<&str>) -> Vec<ActiveWriter> {
        self.owners
            .iter()
            .filter(|(l, _)| Some(l.as_str()) != except)
            .map(|(l, o)| ActiveWriter { lineage_id: Some(l.clone()), paths: o.paths.clone() })
            .collect()
    }

    /// Owners other than `except` that run resumed or inherited.
    pub fn active_inherited_writers(&self, except: Option<&str>) -> u64 {
        let inherited = |m: &Option<String>| {
            m.as_deref()
                .and_then(Mode::parse)
                .is_some_and(|m| matches!(m, Mode::Resume | Mode::InheritFull | Mode::InheritRecent))
        };
        self.owners.iter().filter(|(l, o)| Some(l.as_str()) != except && inherited(&o.mode)).count() as u64
    }

    /// Leases whose end is at or before `now_ns`, in lineage order.
    pub fn expired_leases(&self, now_ns: i64) -> Vec<&str> {
        self.leases.iter().filter(|(_, l)| l.expires_at_ns <= now_ns).map(|(id, _)| id.as_str()).collect()
    }

    fn fold(&mut self, r: &Record<'_>) -> Result<(), String> {
        fn de<'a, T: Deserialize<'a>>(r: &Record<'a>) -> Result<T, String> {
            serde_json::from_slice(r.payload).map_err(|e| format!("{} at seq {}: {e}", r.event_type, r.seq))
        }
        if r.stream == STREAM {
            self.version = r.version;
        }
        match r.event_type {
            WORKSPACE_FACTS => {
                let x: WorkspaceFacts = de(r)?;
                let next = Workspace { case_sensitive: x.case_sensitive, links: x.links };
                if !self.keeps_owned_paths(&next) {
                    return Err(format!("seq {}: workspace facts moved paths writers own", r.seq));
                }
                self.workspace = next;
            }
            RUN_CONSUMED => {
                let x: RunConsumed = de(r)?;
                if let Some(first) = self.consumed_runs.insert(x.measurement_run_id.clone(), r.seq) {
                    return Err(format!("seq {}: run {} was consumed at seq {first}", r.seq, x.measurement_run_id));
                }
            }
            CLAIMED => {
                let c: Claimed = de(r)?;
                // The decider never records an overlapping claim; a journal holding one was not
                // written by it.
                for (holder, held) in self.owners.iter().filter(|(l, _)| **l != c.lineage_id) {
                    if let Some(p) = held.paths.iter().find(|h| c.paths.iter().any(|p| paths::overlaps(h, p))) {
                        return Err(format!("seq {}: claim by {} overlaps {p} held by {holder}", r.seq, c.lineage_id));
                    }
                }
                self.owners.insert(c.lineage_id, Owned { paths: c.paths, mode: c.mode });
            }
            RELEASED => {
                let x: Released = de(r)?;
                self.owners.remove(&x.lineage_id);
            }
            ROUTE_DECIDED => {
                let _: RouteDecided = de(r)?;
            }
            CONFLICT => {
                let _: Conflicted = de(r)?;
            }
            LINEAGE_RECORDED => {
                let x: LineageRecorded = de(r)?;
                self.lineages.insert(x.lineage_id, LineageEntry { record: x.record, invalidated: None });
            }
            LINEAGE_INVALIDATED => {
                let x: LineageInvalidated = de(r)?;
                self.leases.remove(&x.lineage_id);
                let entry = self
                    .lineages
                    .get_mut(&x.lineage_id)
                    .ok_or_else(|| format!("seq {}: {} invalidated before it was recorded", r.seq, x.lineage_id))?;
                entry.invalidated = Some(x.codes);
            }
            LINEAGE_RECONCILED => {
                let x: LineageReconciled = de(r)?;
                let entry = self
                    .lineages
                    .get_mut(&x.lineage_id)
                    .ok_or_else(|| format!("seq {}: {} reconciled before it was recorded", r.seq, x.lineage_id))?;
                if entry.invalidated.is_some() {
                    return Err(format!("seq {}: {} reconciled after it was invalidated", r.seq, x.lineage_id));
                }
                let held = entry.record.capsule_hash.as_deref();
                if held != x.from_capsule_hash.as_deref() {
                    return Err(format!(
                        "seq {}: {} reconciled from {:?}, but its record names {:?}",
                        r.seq, x.lineage_id, x.from_capsule_hash, held
                    ));
                }
                entry.record.capsule_hash = Some(x.capsule_hash);
                entry.record.last_used_at = super::time::format_rfc3339(x.at_ns);
            }
            LEASE_GRANTED | LEASE_RENEWED => {
                let x: LeaseSet = de(r)?;
                let entry = self
                    .lineages
                    .get_mut(&x.lineage_id)
                    .ok_or_else(|| format!("seq {}: lease for {} before it was recorded", r.seq, x.lineage_id))?;
                entry.record.last_used_at = super::time::format_rfc3339(x.at_ns);
                self.leases.insert(x.lineage_id, Lease { at_ns: x.at_ns, expires_at_ns: x.expires_at_ns });
            }
            LEASE_EXPIRED => {
                let x: LeaseExpired = de(r)?;
                self.leases.remove(&x.lineage_id);
            }
            CAPSULE_SEALED => {
                let _: CapsuleSealed = de(r)?;
                self.capsules_sealed += 1;
            }
            VAULT_DELTA_APPLIED => {
                let x: VaultDeltaApplied = de(r)?;
                let record = x.delta.with_id(&x.knowledge_id);
                self.vault.insert(x.knowledge_id, record);
            }
            _ => {}
        }
        Ok(())
    }
}

crate::projections::kept::kept_projection!(Ledger, "ce-ledger", 2, ALL);

/// One ledger event stamped by the ports.
pub fn event(ids: &mut dyn Ids, clock: &dyn Clock, t: &str, payload: &impl Serialize) -> Result<EventData, CeError> {
    Ok(EventData {
        id: ids.next_id(),
        event_type: t.to_owned(),
        schema_version: 1,
        recorded_at_ns: clock.now_ns(),
        causation: None,
        correlation: None,
        payload: serde_json::to_vec(payload).map_err(|e| CeError::new(Code::InvalidRequest, e.to_string()))?,
    })
}

/// `ce.capsule-sealed` for a capsule `sealed` sealed whole (nothing externalized).
pub fn capsule_sealed(
    ids: &mut dyn Ids,
    clock: &dyn Clock,
    sealed: &super::capsule::Sealed,
) -> Result<EventData, CeError> {
    let x = CapsuleSealed {
        capsule_hash: sealed.hash.clone(),
        bytes: u64::try_from(sealed.bytes).unwrap_or(u64::MAX),
        externalized: Vec::new(),
    };
    event(ids, clock, CAPSULE_SEALED, &x)
}

/// The event consuming measurement run `run_id` (replay protection that is not advisory: the
/// journal, not the caller, knows every run used before). A run id already consumed is
/// refused with `MEASUREMENT_RUN_REPLAYED`; append the event expecting [`Ledger::version`] so
/// two deciders cannot both consume it.
pub fn consume_run(
    state: &Ledger,
    run_id: &str,
    corpus_digest: &str,
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<EventData, CeError> {
    if !is_run_id(run_id) {
        return fail(Code::InvalidRequest, "measurement_run_id: `measurement-` and 16 to 64 lowercase hex digits");
    }
    if let Some(seq) = state.consumed_runs.get(run_id) {
        return fail(Code::MeasurementRunReplayed, format!("measurement_run_id: already consumed at seq {seq}"));
    }
    let consumed = RunConsumed { measurement_run_id: run_id.to_owned(), corpus_digest: corpus_digest.to_owned() };
    event(ids, clock, RUN_CONSUMED, &consumed)
}

/// Whether `s` is a measurement run id (`measurement-` and 16–64 lowercase hex digits).
pub fn is_run_id(s: &str) -> bool {
    s.strip_prefix("measurement-")
        .is_some_and(|h| (16..=64).contains(&h.len()) && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

/// A lineage id fit for the ledger: 1–128 bytes, no control characters.
pub fn check_lineage_id(id: &str) -> Result<(), CeError> {
    if id.is_empty() || id.len() > LINEAGE_ID_BYTES_MAX || id.chars().any(char::is_control) {
        return fail(Code::InvalidFact, "lineage_id: 1–128 bytes, no control characters");
    }
    Ok(())
}
