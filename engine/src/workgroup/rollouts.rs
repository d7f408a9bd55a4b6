//! Rollouts inside `strata run`: with a rollout named for the run (`strata run --rollout NAME`,
//! recorded in `workgroup.planned`), every dispatch is decided under both of the rollout's
//! policies as its stage asks, and `rollout.unit-routed` records both decisions in the same
//! append as the dispatch. Observe records the baseline's decision only; shadow records both and
//! the baseline's runs; at canary stages the unit's bucket (the same [`stages::bucket_bps`] as
//! `strata rollout route`) decides which runs; on runs the candidate. `eval promote --rollout`
//! then reads what the run measured.
//!
//! The run's `[context_efficiency]` policy bounds what it honours: `rollout` is the highest stage
//! (a rollout at canary-50 under `rollout = "shadow"` runs as shadow), and `canary_percent` the
//! largest share a canary stage exposes.

use std::collections::BTreeMap;

use crate::ce::router::{self, RouteFacts};
use crate::promotion::rollout::{Decision, Rollout, UnitRouted};
use crate::promotion::stages::{self, Stage};

use super::policy::{Policy, RolloutCap};

/// The stage a run honours of a rollout at `stage` under the policy's cap.
pub fn honoured(stage: Stage, cap: RolloutCap) -> Stage {
    let most = match cap {
        RolloutCap::Off => Stage::Off,
        RolloutCap::Observe => Stage::Observe,
        RolloutCap::Shadow => Stage::Shadow,
        RolloutCap::Canary => Stage::Canary50,
        RolloutCap::On => Stage::On,
    };
    stage.min(most)
}

/// The share of units the candidate runs for at `stage`, basis points: the stage's own, at
/// most `canary_percent` at a canary stage.
pub fn exposure_bps(stage: Stage, canary_percent: u32) -> u16 {
    let own = stage.exposure_bps();
    match stage {
        Stage::Canary10 | Stage::Canary25 | Stage::Canary50 => {
            own.min(u16::try_from(canary_percent.min(100) * 100).unwrap_or(10_000))
        }
        _ => own,
    }
}

/// `policy` with a rollout arm's keys (`max_nesting_depth`, `max_active_inherited`) in place of
/// its own.
pub fn arm_policy(policy: &Policy, arm: &BTreeMap<String, u64>) -> Policy {
    let mut p = policy.clone();
    if let Some(v) = arm.get("max_nesting_depth") {
        p.max_nesting_depth = *v;
    }
    if let Some(v) = arm.get("max_active_inherited") {
        p.max_active_inherited = *v;
    }
    p
}

/// Which arm runs `unit` under `ro` in a run working under `policy`.
#[derive(Clone, Debug)]
pub struct Arms {
    /// The stage honoured.
    pub stage: Stage,
    /// The unit's bucket.
    pub bucket_bps: u16,
    /// The candidate's decision runs.
    pub candidate_runs: bool,
    /// The policy of the arm that runs.
    pub runs_under: Policy,
}

/// The arms of `unit` under `ro`.
pub fn arms(ro: &Rollout, unit: &str, policy: &Policy) -> Arms {
    let stage = honoured(ro.stage, policy.rollout);
    let bucket_bps = stages::bucket_bps(&ro.start.salt, unit);
    let candidate_runs = bucket_bps < exposure_bps(stage, policy.canary_percent);
    let arm = if candidate_runs { &ro.start.candidate } else { &ro.start.baseline };
    Arms { stage, bucket_bps, candidate_runs, runs_under: arm_policy(policy, arm) }
}

/// The `rollout.unit-routed` of a unit routed on `facts` (as the dispatch decided them), under
/// both arms over the run's `policy` as the stage asks; `None` at off.
pub fn unit_routed(
    ro: &Rollout,
    unit: &str,
    a: &Arms,
    policy: &Policy,
    facts: &RouteFacts,
) -> Result<Option<UnitRouted>, crate::ce::CeError> {
    if a.stage == Stage::Off {
        return Ok(None);
    }
    let decide = |arm: &BTreeMap<String, u64>| -> Result<Decision, crate::ce::CeError> {
        let mut f = facts.clone();
        f.max_nesting_depth = policy.max_nesting_depth;
        f.max_active_inherited = policy.max_active_inherited;
        if let Some(v) = arm.get("max_nesting_depth") {
            f.max_nesting_depth = *v;
        }
        if let Some(v) = arm.get("max_active_inherited") {
            f.max_active_inherited = *v;
        }
        let route = router::route(&f)?;
        Ok(Decision { mode: route.mode.as_str().to_owned(), reason_codes: route.reason_names() })
    };
    let candidate = if a.stage >= Stage::Shadow { Some(decide(&ro.start.candidate)?) } else { None };
    Ok(Some(UnitRouted {
        rollout: ro.start.rollout.clone(),
        unit: unit.to_owned(),
        stage: a.stage,
        bucket_bps: a.bucket_bps,
        executed: if a.candidate_runs { "candidate" } else { "baseline" }.to_owned(),
        baseline: decide(&ro.start.baseline)?,
        candidate,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_bounds_the_stage_and_the_canary_share() {
        assert_eq!(honoured(Stage::Canary50, RolloutCap::Shadow), Stage::Shadow);
        assert_eq!(honoured(Stage::Observe, RolloutCap::On), Stage::Observe);
        assert_eq!(honoured(Stage::On, RolloutCap::Canary), Stage::Canary50);
        assert_eq!(exposure_bps(Stage::Canary25, 10), 1_000);
        assert_eq!(exposure_bps(Stage::Canary25, 100), 2_500);
        assert_eq!(exposure_bps(Stage::On, 10), 10_000);
    }
}
