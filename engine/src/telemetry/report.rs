//! The telemetry report: rollups per (provider, model, profile, mode, stratum) and the
//! reconciliation of event-accounted totals with the provider's own, per session, per arm and
//! overall. A pure function of the projection, so the same journal always gives the same bytes.
//!
//! **Rollups.** Per group: invocations, efficiency events, and for wall time and each billing
//! figure (the four token classes, their total, cost per currency) the count of known values,
//! the count of unknown ones, the sum of the known ones and their type-7 p50/p75/p95
//! ([`quantile7`]). Estimated billing is in `estimated`, never in `billed`.
//!
//! **Reconciliation** (G8 of the promotion gates). Per counter: the sum of the session's billed
//! deltas against the provider's total, `within` when `100·|Δ| ≤ 2·reported` (integers, `i128`),
//! else `over`; `incomplete` when either side is unknown (a delta or a total unknown, no usage or
//! no session report, estimated billing only, mixed currencies). A scope's verdict is the worst
//! (`within` < `incomplete` < `over`) over the counters the provider reported for at least one
//! of its sessions, and `incomplete` when it reported none.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::events::COUNTERS;
use super::state::{Billing, Class, Figure, Session, Telemetry};
use crate::promotion::stats::quantile7;

/// Allowed relative discrepancy, percent.
pub const TOLERANCE_PERCENT: i128 = 2;

/// The whole report.
pub fn report(t: &Telemetry) -> Value {
    let rollups: Vec<Value> = t
        .groups()
        .iter()
        .map(|(k, g)| {
            json!({
                "provider": k.provider,
                "model": k.model,
                "profile": k.profile,
                "mode": k.mode,
                "stratum": k.stratum,
                "invocations": g.invocations,
                "efficiency_events": g.efficiency_events,
                "wall_ms": figure(&g.wall_ms),
                "billed": billing(&g.billed),
                "estimated": billing(&g.estimated),
                "logical": {
                    "prompt_bytes": figure(&g.logical.prompt_bytes),
                    "capsule_bytes": figure(&g.logical.capsule_bytes),
                    "estimated_context_occupancy": figure(&g.logical.occupancy),
                },
                "outcome": {
                    "accepted": g.outcome.accepted,
                    "rejected": g.outcome.rejected,
                    "verify_passed": g.outcome.verify_passed,
                    "verify_total": g.outcome.verify_total,
                    "rework_rounds": figure(&g.outcome.rework_rounds),
                },
            })
        })
        .collect();
    json!({
        "events": t.events(),
        "sessions": t.sessions().len(),
        "rollups": rollups,
        "reconciliation": reconciliation(t),
    })
}

/// A figure: known and unknown counts, sum, p50/p75/p95 (null without known values).
pub fn figure(f: &Figure) -> Value {
    let mut sorted: Vec<f64> = f.values.iter().map(|v| *v as f64).collect();
    sorted.sort_by(f64::total_cmp);
    let sum: u128 = f.values.iter().map(|v| u128::from(*v)).sum();
    json!({
        "known": f.values.len(),
        "unknown": f.unknown,
        "sum": exact(i128::try_from(sum).unwrap_or(i128::MAX)),
        "p50": quantile7(&sorted, 0.5),
        "p75": quantile7(&sorted, 0.75),
        "p95": quantile7(&sorted, 0.95),
    })
}

fn billing(b: &Billing) -> Value {
    let cost: BTreeMap<&str, Value> = b.cost_micros.iter().map(|(c, f)| (c.as_str(), figure(f))).collect();
    json!({
        "input_tokens": figure(&b.token_classes[0]),
        "cache_creation_tokens": figure(&b.token_classes[1]),
        "cache_read_tokens": figure(&b.token_classes[2]),
        "output_tokens": figure(&b.token_classes[3]),
        "tokens": figure(&b.tokens),
        "cost_micros": cost,
        "cost_unknown": b.cost_unknown,
    })
}

/// Both sides of one scope, per counter; `None` is unknown.
#[derive(Clone, Debug)]
struct Sides {
    events: [Option<i128>; 6],
    reported: [Option<i128>; 6],
    /// Counters the provider reported for at least one session.
    in_play: [bool; 6],
    currency: Option<String>,
    mixed: bool,
}

fn sides_of(s: &Session) -> Sides {
    let billed = s.class == Some(Class::Billed);
    let events = std::array::from_fn(|i| {
        let wall = COUNTERS[i] == "wall_ms";
        let vouched = billed || (wall && s.class.is_some());
        (s.invocations > 0 && vouched && s.delta_unknown[i] == 0).then(|| s.delta_sums[i] as i128)
    });
    let totals = s.reported.as_ref().map(|r| r.totals.named());
    let reported = std::array::from_fn(|i| totals.and_then(|t| t[i].1).map(i128::from));
    let in_play = std::array::from_fn(|i| totals.is_some_and(|t| t[i].1.is_some()));
    Sides { events, reported, in_play, currency: s.currency.clone(), mixed: false }
}

fn add(a: &Sides, b: &Sides) -> Sides {
    let sum = |x: Option<i128>, y: Option<i128>| Some(x?.saturating_add(y?));
    let mixed = a.mixed || b.mixed || (a.currency.is_some() && b.currency.is_some() && a.currency != b.currency);
    Sides {
        events: std::array::from_fn(|i| sum(a.events[i], b.events[i])),
        reported: std::array::from_fn(|i| sum(a.reported[i], b.reported[i])),
        in_play: std::array::from_fn(|i| a.in_play[i] || b.in_play[i]),
        currency: a.currency.clone().or_else(|| b.currency.clone()),
        mixed,
    }
}

/// `within`, `over` or `incomplete` for one counter, with the signed difference.
pub fn verdict(events: Option<i128>, reported: Option<i128>) -> (&'static str, Option<i128>) {
    match (events, reported) {
        (Some(e), Some(r)) => {
            let d = e - r;
            let within = d.saturating_abs().saturating_mul(100) <= r.saturating_mul(TOLERANCE_PERCENT);
            (if within { "within" } else { "over" }, Some(d))
        }
        _ => ("incomplete", None),
    }
}

fn rank(v: &str) -> u8 {
    match v {
        "within" => 0,
        "incomplete" => 1,
        _ => 2,
    }
}

fn scope(s: &Sides, sessions: usize) -> Value {
    let mut counters = serde_json::Map::new();
    let mut worst: Option<&str> = None;
    for (i, name) in COUNTERS.iter().enumerate() {
        let cost_mixed = *name == "cost_micros" && s.mixed;
        let (e, r) = if cost_mixed { (None, None) } else { (s.events[i], s.reported[i]) };
        let (v, d) = verdict(e, r);
        if s.in_play[i] && worst.is_none_or(|w| rank(v) > rank(w)) {
            worst = Some(v);
        }
        counters.insert(
            (*name).to_owned(),
            json!({"events": e.map(exact), "reported": r.map(exact), "difference": d.map(exact), "verdict": v}),
        );
    }
    let currency = if s.mixed { Some("mixed".to_owned()) } else { s.currency.clone() };
    json!({
        "sessions": sessions,
        "currency": currency,
        "verdict": worst.unwrap_or("incomplete"),
        "counters": counters,
    })
}

fn reconciliation(t: &Telemetry) -> Value {
    let mut sessions = serde_json::Map::new();
    let mut arms: BTreeMap<&str, (Sides, usize)> = BTreeMap::new();
    let mut overall: Option<(Sides, usize)> = None;
    // Offsetting sessions cancel in a sum: name the one whose cost is furthest off, relatively.
    let cost = COUNTERS.iter().position(|c| *c == "cost_micros").unwrap_or(4);
    let mut largest: Option<(&str, i128, i128)> = None;
    for (name, s) in t.sessions() {
        let sides = sides_of(s);
        if let (Some(e), Some(r)) = (sides.events[cost], sides.reported[cost])
            && r > 0
            && largest.is_none_or(|(_, ld, lr)| (e - r).abs() * lr > ld.abs() * r)
        {
            largest = Some((name.as_str(), e - r, r));
        }
        let mut v = scope(&sides, 1);
        v["arm"] = json!(s.arm.map(|a| a.as_str()));
        sessions.insert(name.clone(), v);
        if let Some(arm) = s.arm {
            let e = arms.entry(arm.as_str()).or_insert_with(|| (sides.clone(), 0));
            if e.1 > 0 {
                e.0 = add(&e.0, &sides);
            }
            e.1 += 1;
        }
        overall = Some(match overall {
            None => (sides, 1),
            Some((o, n)) => (add(&o, &sides), n + 1),
        });
    }
    let arms: BTreeMap<&str, Value> = arms.iter().map(|(a, (s, n))| (*a, scope(s, *n))).collect();
    let overall = match &overall {
        Some((s, n)) => scope(s, *n),
        None => json!({"sessions": 0, "currency": null, "verdict": "incomplete", "counters": {}}),
    };
    json!({
        "tolerance_percent": TOLERANCE_PERCENT,
        "sessions": sessions,
        "arms": arms,
        "overall": overall,
        "largest_cost_discrepancy": largest.map(|(session, d, r)| json!({
            "session": session,
            "difference": exact(d),
            "reported": exact(r),
            "verdict": verdict(Some(r + d), Some(r)).0,
        })),
    })
}

/// `x` as a JSON number when it fits in an `i64`, else as its decimal string (never rounded).
fn exact(x: i128) -> Value {
    i64::try_from(x).map_or_else(|_| Value::String(x.to_string()), Value::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_percent_boundary_is_integer_exact() {
        assert_eq!(verdict(Some(102), Some(100)), ("within", Some(2)));
        assert_eq!(verdict(Some(98), Some(100)), ("within", Some(-2)));
        assert_eq!(verdict(Some(103), Some(100)), ("over", Some(3)));
        assert_eq!(verdict(Some(1_020_001), Some(1_000_000)), ("over", Some(20_001)));
        assert_eq!(verdict(Some(0), Some(0)), ("within", Some(0)));
        assert_eq!(verdict(Some(1), Some(0)), ("over", Some(1)));
        assert_eq!(verdict(None, Some(0)), ("incomplete", None));
        assert_eq!(verdict(Some(0), None), ("incomplete", None));
    }
}
