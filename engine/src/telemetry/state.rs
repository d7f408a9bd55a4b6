//! The `telemetry` projection: what the decider needs per session (stream version, fixed
//! properties, the last cumulative counters) and what the report needs (per-invocation figures
//! per group, billed and estimated kept apart, and the provider's own session totals).
//!
//! The fold trusts the recorded deltas (the decider derived them); it never re-derives them, so a
//! replay reproduces exactly what was decided.

use std::collections::BTreeMap;

use serde::Deserialize;
use strata_journal::Record;

use super::events::{
    self, AccountingSource, Arm, Counters, EfficiencyRecorded, Provider, SessionReported, UsageReported,
};
use crate::projections::kept::EventLog;

/// Known values of one figure and how many were unknown.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Figure {
    /// Known values, in journal order.
    pub values: Vec<u64>,
    /// Values that were unknown.
    pub unknown: u64,
}

impl Figure {
    /// Adds a value (or counts an unknown one).
    pub fn push(&mut self, v: Option<u64>) {
        match v {
            Some(v) => self.values.push(v),
            None => self.unknown += 1,
        }
    }
}

/// Billing figures of invocations of one accounting class.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Billing {
    /// Input, cache-creation, cache-read and output tokens, in that order.
    pub token_classes: [Figure; 4],
    /// The four token classes added (unknown when any class is).
    pub tokens: Figure,
    /// Cost by currency.
    pub cost_micros: BTreeMap<String, Figure>,
    /// Invocations whose cost was unknown.
    pub cost_unknown: u64,
}

impl Billing {
    fn push(&mut self, d: &Counters, currency: Option<&str>) {
        let named = d.named();
        for (f, (_, v)) in self.token_classes.iter_mut().zip(named.iter()) {
            f.push(*v);
        }
        self.tokens.push(d.tokens());
        match (d.cost_micros, currency) {
            (Some(c), Some(cur)) => self.cost_micros.entry(cur.to_owned()).or_default().values.push(c),
            _ => self.cost_unknown += 1,
        }
    }
}

/// What a rollup groups by: provider, model, profile, mode, stratum (`None`: not given).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct GroupKey {
    /// Provider.
    pub provider: String,
    /// Model.
    pub model: Option<String>,
    /// Profile.
    pub profile: Option<String>,
    /// Mode.
    pub mode: Option<String>,
    /// Stratum.
    pub stratum: Option<String>,
}

/// One rollup group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Group {
    /// Usage reports (invocations).
    pub invocations: u64,
    /// Efficiency events recorded.
    pub efficiency_events: u64,
    /// Wall time per invocation, whatever its accounting source.
    pub wall_ms: Figure,
    /// Billing figures vouched for (`authoritative`, `provider-reported`; `unknown` adds unknowns).
    pub billed: Billing,
    /// Estimated billing figures: recorded, never billed.
    pub estimated: Billing,
    /// The efficiency events' logical figures (strata's own measurements).
    pub logical: Logical,
    /// The efficiency events' outcomes.
    pub outcome: Outcome,
}

/// Logical figures of efficiency events: what strata measured of each attempt itself.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Logical {
    /// Prompt bytes.
    pub prompt_bytes: Figure,
    /// Capsule bytes.
    pub capsule_bytes: Figure,
    /// Estimated context occupancy, tokens.
    pub occupancy: Figure,
}

/// Outcomes of efficiency events.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Attempts whose work was accepted.
    pub accepted: u64,
    /// Attempts whose work was not.
    pub rejected: u64,
    /// Checks passed, summed.
    pub verify_passed: u64,
    /// Checks run, summed.
    pub verify_total: u64,
    /// Rework rounds per event.
    pub rework_rounds: Figure,
}

/// Whether a session's billing is vouched for, estimated, or not given at all; fixed per session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// `authoritative` or `provider-reported`.
    Billed,
    /// `estimated`.
    Estimated,
    /// `unknown` (billing counters all null).
    Unknown,
}

impl Class {
    /// The class of a source.
    pub fn of(s: AccountingSource) -> Class {
        match s {
            AccountingSource::Authoritative | AccountingSource::ProviderReported => Class::Billed,
            AccountingSource::Estimated => Class::Estimated,
            AccountingSource::Unknown => Class::Unknown,
        }
    }

    /// Name for messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Billed => "billed (authoritative or provider-reported)",
            Class::Estimated => "estimated",
            Class::Unknown => "unknown",
        }
    }
}

/// One session as folded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Session {
    /// Version of the session's stream.
    pub version: u64,
    /// Provider, once given.
    pub provider: Option<Provider>,
    /// Arm, once given.
    pub arm: Option<Arm>,
    /// Currency, once given.
    pub currency: Option<String>,
    /// Accounting class: from its first billed or estimated usage report (`Unknown` until then).
    pub class: Option<Class>,
    /// The last cumulative counters reported (`None`: no usage report yet).
    pub last: Option<Counters>,
    /// The highest known value of each counter.
    pub highest: Counters,
    /// Usage reports.
    pub invocations: u64,
    /// Sum of the known deltas of each counter, in [`events::COUNTERS`] order.
    pub delta_sums: [u128; 6],
    /// Deltas that were unknown, per counter.
    pub delta_unknown: [u64; 6],
    /// The provider's latest own totals.
    pub reported: Option<SessionReported>,
    /// Efficiency events recorded.
    pub efficiency_events: u64,
}

/// The projection.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Telemetry {
    sessions: BTreeMap<String, Session>,
    groups: BTreeMap<GroupKey, Group>,
    kept: EventLog,
}

impl Telemetry {
    /// Sessions by pseudonym.
    pub fn sessions(&self) -> &BTreeMap<String, Session> {
        &self.sessions
    }

    /// Rollup groups.
    pub fn groups(&self) -> &BTreeMap<GroupKey, Group> {
        &self.groups
    }

    /// Telemetry events folded.
    pub fn events(&self) -> usize {
        self.kept.len()
    }

    fn session(&mut self, r: &Record<'_>, name: &str) -> Result<&mut Session, String> {
        if r.stream != super::stream_of(name) {
            return Err(format!("{} at seq {}: session {name} on stream {}", r.event_type, r.seq, r.stream));
        }
        let s = self.sessions.entry(name.to_owned()).or_default();
        s.version = r.version;
        Ok(s)
    }

    fn fold(&mut self, r: &Record<'_>) -> Result<(), String> {
        fn de<'a, T: Deserialize<'a>>(r: &Record<'a>) -> Result<T, String> {
            serde_json::from_slice(r.payload).map_err(|e| format!("{} at seq {}: {e}", r.event_type, r.seq))
        }
        let text = |v: &serde_json::Value| v.as_str().map(str::to_owned);
        match r.event_type {
            events::EFFICIENCY_RECORDED => {
                let x: EfficiencyRecorded = de(r)?;
                let s = self.session(r, &x.session)?;
                s.arm = s.arm.or(x.arm);
                s.efficiency_events += 1;
                let key = GroupKey {
                    provider: text(&x.event["provider"]).unwrap_or_default(),
                    model: text(&x.event["model"]),
                    profile: text(&x.event["profile"]),
                    mode: text(&x.event["mode"]),
                    stratum: x.stratum,
                };
                let g = self.groups.entry(key).or_default();
                g.efficiency_events += 1;
                let (l, o) = (&x.event["logical"], &x.event["outcome"]);
                g.logical.prompt_bytes.push(l["prompt_bytes"].as_u64());
                g.logical.capsule_bytes.push(l["capsule_bytes"].as_u64());
                g.logical.occupancy.push(l["estimated_context_occupancy"].as_f64().map(|v| v as u64));
                match o["accepted_workgroup"].as_bool() {
                    Some(true) => g.outcome.accepted += 1,
                    Some(false) => g.outcome.rejected += 1,
                    None => {}
                }
                g.outcome.verify_passed += o["verify_passed"].as_u64().unwrap_or(0);
                g.outcome.verify_total += o["verify_total"].as_u64().unwrap_or(0);
                g.outcome.rework_rounds.push(o["rework_rounds"].as_u64());
            }
            events::USAGE_REPORTED => {
                let x: UsageReported = de(r)?;
                let s = self.session(r, &x.session)?;
                s.provider = Some(x.provider);
                s.arm = s.arm.or(x.arm);
                s.currency = s.currency.take().or_else(|| x.currency.clone());
                // `unknown` is no information yet: the first billed or estimated report fixes the class.
                s.class = match (s.class, Class::of(x.accounting_source)) {
                    (None | Some(Class::Unknown), c) => Some(c),
                    (kept, _) => kept,
                };
                s.last = Some(x.cumulative);
                let highest = s.highest.named();
                let max = |i: usize, v: Option<u64>| match (highest[i].1, v) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    (a, b) => a.or(b),
                };
                let c = x.cumulative.named();
                s.highest = Counters::from_values(std::array::from_fn(|i| max(i, c[i].1)));
                s.invocations += 1;
                for (i, (_, d)) in x.delta.named().iter().enumerate() {
                    match d {
                        Some(d) => s.delta_sums[i] += u128::from(*d),
                        None => s.delta_unknown[i] += 1,
                    }
                }
                let key = GroupKey {
                    provider: x.provider.as_str().to_owned(),
                    model: x.model,
                    profile: x.profile,
                    mode: x.mode,
                    stratum: x.stratum,
                };
                let g = self.groups.entry(key).or_default();
                g.invocations += 1;
                g.wall_ms.push(x.delta.wall_ms);
                let billing =
                    if x.accounting_source == AccountingSource::Estimated { &mut g.estimated } else { &mut g.billed };
                billing.push(&x.delta, x.currency.as_deref());
            }
            events::SESSION_REPORTED => {
                let x: SessionReported = de(r)?;
                let s = self.session(r, &x.session)?;
                s.provider = Some(x.provider);
                s.arm = s.arm.or(x.arm);
                s.currency = s.currency.take().or_else(|| x.currency.clone());
                s.reported = Some(x);
            }
            _ => {}
        }
        Ok(())
    }
}

crate::projections::kept::kept_projection!(Telemetry, "telemetry", 1, events::ALL);
