//! The context-efficiency policy a run works under: the `[context_efficiency]` table of a
//! workspace's configuration, resolved against one of four profiles, recorded on the
//! workgroup's stream (`workgroup.policy-set`) when a run starts and again whenever a resumed
//! run works under a different one, so that a change of policy is its own event and the cost it
//! makes is attributable to it (routing experiments are rollouts, recorded apart).
//!
//! What each key does in `strata run` (and in the simulation, which folds the same events):
//!
//! | key | effect |
//! |---|---|
//! | `enabled` | `false`: every task is routed as the baseline would be (no warm resume, no inheritance, nothing done locally; a fresh worker with its own capsule), no session is kept warm, and the run says so |
//! | `rollout` | highest rollout stage a run honours (`off`: candidate routing policies are never consulted) |
//! | `profile` | defaults for the keys below and for the plan's `parallel` ([`Profile::defaults`]) |
//! | `max_active_inherited` | the router's cap on resumed or inherited writers running at once |
//! | `max_nesting_depth` | the router's nesting limit; a run inside a worker is one level deeper |
//! | `warm_lease_minutes` | how long a completed session stays resumable (`0`: never) |
//! | `mcp_health_ttl_minutes` | how long a healthy probe of the knowledge server is reused |
//! | `disk_handoff_threshold` | `material`: a handoff file for work another agent or phase reads; `always`: for every result |
//! | `telemetry` | `off`: no usage is recorded; `local` and `provider`: each attempt's usage on the journal |
//! | `canary_percent` | the share of units a canary stage exposes at most |
//!
//! The engine only reads the resolved [`Policy`]; the adapter parses the configuration.

use serde::{Deserialize, Serialize};

/// Most resumed or inherited writers a policy may allow at once.
pub const INHERITED_MAX: u64 = 64;
/// Deepest nesting a policy may allow.
pub const NESTING_MAX: u64 = 16;
/// Longest warm lease or health time-to-live, minutes (a day).
pub const MINUTES_MAX: u64 = 24 * 60;

/// The four efficiency profiles.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Profile {
    /// Fewer workers at once and fewer reused contexts: each worker starts cleaner.
    Quality,
    /// The seed's defaults.
    #[default]
    Balanced,
    /// More warm reuse, held longer, and fewer workers at once: less context bought twice.
    Economy,
    /// More workers at once, shorter warm leases.
    Latency,
}

/// What a profile sets when neither the configuration nor the plan does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Defaults {
    /// Workers running at once (the plan's `parallel` when it names none).
    pub parallel: u32,
    /// `max_active_inherited`.
    pub max_active_inherited: u64,
    /// `max_nesting_depth`.
    pub max_nesting_depth: u64,
    /// `warm_lease_minutes`.
    pub warm_lease_minutes: u64,
}

impl Profile {
    /// Every profile, in documented order.
    pub const ALL: [Profile; 4] = [Profile::Quality, Profile::Balanced, Profile::Economy, Profile::Latency];

    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            Profile::Quality => "quality",
            Profile::Balanced => "balanced",
            Profile::Economy => "economy",
            Profile::Latency => "latency",
        }
    }

    /// The profile named `s`.
    pub fn parse(s: &str) -> Option<Profile> {
        Profile::ALL.into_iter().find(|p| p.as_str() == s)
    }

    /// What it sets.
    pub fn defaults(self) -> Defaults {
        let (parallel, max_active_inherited, warm_lease_minutes) = match self {
            Profile::Quality => (2, 1, 20),
            Profile::Balanced => (super::plan::PARALLEL_DEFAULT, 2, 20),
            Profile::Economy => (2, 3, 30),
            Profile::Latency => (8, 2, 10),
        };
        Defaults { parallel, max_active_inherited, max_nesting_depth: 2, warm_lease_minutes }
    }
}

/// Rollout stages a run may honour, at most.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RolloutCap {
    /// No candidate policy is consulted.
    #[default]
    Off,
    /// The candidate's decision may be recorded, never run.
    Observe,
    /// Both decisions recorded, the baseline runs.
    Shadow,
    /// Canary stages may expose units.
    Canary,
    /// Every stage, up to on.
    On,
}

impl RolloutCap {
    /// Every value, in order.
    pub const ALL: [RolloutCap; 5] =
        [RolloutCap::Off, RolloutCap::Observe, RolloutCap::Shadow, RolloutCap::Canary, RolloutCap::On];

    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            RolloutCap::Off => "off",
            RolloutCap::Observe => "observe",
            RolloutCap::Shadow => "shadow",
            RolloutCap::Canary => "canary",
            RolloutCap::On => "on",
        }
    }
}

/// When a completed task's result is written to a handoff file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Handoff {
    /// For material work: a writer, a task another task waits for or continues, or one whose
    /// result crosses into a later phase. A tiny read-only side check keeps its bounded summary
    /// in the journal only.
    #[default]
    Material,
    /// For every completed task.
    Always,
}

impl Handoff {
    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            Handoff::Material => "material",
            Handoff::Always => "always",
        }
    }
}

/// What telemetry a run records.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TelemetryMode {
    /// Nothing: no usage report is appended.
    Off,
    /// Each attempt's usage on the journal.
    #[default]
    Local,
    /// As `local`; the billed figures are the provider's own (strata sends nothing anywhere).
    Provider,
}

impl TelemetryMode {
    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            TelemetryMode::Off => "off",
            TelemetryMode::Local => "local",
            TelemetryMode::Provider => "provider",
        }
    }
}

/// The resolved policy, as `workgroup.policy-set` records it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// Context efficiency on (`false`: the baseline).
    pub enabled: bool,
    /// Highest rollout stage honoured.
    pub rollout: RolloutCap,
    /// The profile the defaults came from.
    pub profile: Profile,
    /// Workers at once for a plan that names none.
    pub parallel: u32,
    /// Resumed or inherited writers at once.
    pub max_active_inherited: u64,
    /// Nesting limit.
    pub max_nesting_depth: u64,
    /// Warm lease, minutes.
    pub warm_lease_minutes: u64,
    /// Knowledge-server health reuse, minutes.
    pub mcp_health_ttl_minutes: u64,
    /// When a result gets a handoff file.
    pub disk_handoff_threshold: Handoff,
    /// What telemetry is recorded.
    pub telemetry: TelemetryMode,
    /// Largest share of units a canary exposes, percent.
    pub canary_percent: u32,
    /// Caps (`[context_efficiency.caps.task]`, `[context_efficiency.caps.workgroup]`): a task's
    /// default under the plan's, the workgroup's over the plan's ([`super::caps`]).
    #[serde(default, skip_serializing_if = "super::caps::PlanCaps::is_empty")]
    pub caps: super::caps::PlanCaps,
    /// Model names per provider and tier (`[context_efficiency.models.<provider>]` over
    /// [`super::models::defaults`]); the profile picks the tier per role.
    #[serde(default = "super::models::defaults")]
    pub models: super::models::Models,
}

impl Default for Policy {
    fn default() -> Self {
        Policy::of(Profile::default())
    }
}

/// Keys set explicitly (the configuration's, then a plan's), each overriding the profile's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Overrides {
    /// `enabled`.
    pub enabled: Option<bool>,
    /// `rollout`.
    pub rollout: Option<RolloutCap>,
    /// `profile`.
    pub profile: Option<Profile>,
    /// `max_active_inherited`.
    pub max_active_inherited: Option<u64>,
    /// `max_nesting_depth`.
    pub max_nesting_depth: Option<u64>,
    /// `warm_lease_minutes`.
    pub warm_lease_minutes: Option<u64>,
    /// `mcp_health_ttl_minutes`.
    pub mcp_health_ttl_minutes: Option<u64>,
    /// `disk_handoff_threshold`.
    pub disk_handoff_threshold: Option<Handoff>,
    /// `telemetry`.
    pub telemetry: Option<TelemetryMode>,
    /// `canary_percent`.
    pub canary_percent: Option<u32>,
    /// `caps.task` and `caps.workgroup`.
    pub caps: super::caps::PlanCaps,
    /// `models.<provider>`: names per tier, each over the default's.
    pub models: super::models::Models,
}

impl Policy {
    /// Profile `p`'s policy, every other key at its default.
    pub fn of(p: Profile) -> Policy {
        let d = p.defaults();
        Policy {
            enabled: true,
            rollout: RolloutCap::Off,
            profile: p,
            parallel: d.parallel,
            max_active_inherited: d.max_active_inherited,
            max_nesting_depth: d.max_nesting_depth,
            warm_lease_minutes: d.warm_lease_minutes,
            mcp_health_ttl_minutes: crate::ce::budget::MCP_HEALTH_TTL_MINUTES_DEFAULT,
            disk_handoff_threshold: Handoff::Material,
            telemetry: TelemetryMode::Local,
            canary_percent: 10,
            caps: super::caps::PlanCaps::default(),
            models: super::models::defaults(),
        }
    }

    /// The policy `o` sets over its profile's defaults, or every key out of bounds as
    /// `(key, rule)`.
    pub fn resolve(o: &Overrides) -> Result<Policy, Vec<(&'static str, String)>> {
        let mut p = Policy::of(o.profile.unwrap_or_default());
        let mut bad = Vec::new();
        let mut bounded = |key: &'static str, v: Option<u64>, lo: u64, hi: u64, into: &mut u64| {
            if let Some(v) = v {
                if (lo..=hi).contains(&v) {
                    *into = v;
                } else {
                    bad.push((key, format!("is {v}; it must be between {lo} and {hi}")));
                }
            }
        };
        bounded("max_active_inherited", o.max_active_inherited, 1, INHERITED_MAX, &mut p.max_active_inherited);
        bounded("max_nesting_depth", o.max_nesting_depth, 1, NESTING_MAX, &mut p.max_nesting_depth);
        bounded("warm_lease_minutes", o.warm_lease_minutes, 0, MINUTES_MAX, &mut p.warm_lease_minutes);
        bounded("mcp_health_ttl_minutes", o.mcp_health_ttl_minutes, 0, MINUTES_MAX, &mut p.mcp_health_ttl_minutes);
        let mut percent = u64::from(p.canary_percent);
        bounded("canary_percent", o.canary_percent.map(u64::from), 0, 100, &mut percent);
        p.canary_percent = percent as u32;
        p.enabled = o.enabled.unwrap_or(p.enabled);
        p.rollout = o.rollout.unwrap_or(p.rollout);
        p.disk_handoff_threshold = o.disk_handoff_threshold.unwrap_or(p.disk_handoff_threshold);
        p.telemetry = o.telemetry.unwrap_or(p.telemetry);
        for (scope, caps) in [("caps.task", &o.caps.task), ("caps.workgroup", &o.caps.workgroup)] {
            for (field, rule) in caps.problems() {
                bad.push((scope, format!("{field} {rule}")));
            }
        }
        p.caps = o.caps;
        for (provider, names) in &o.models {
            if !super::models::PROVIDERS.contains(&provider.as_str()) {
                let known = super::models::PROVIDERS.join(", ");
                bad.push(("models", format!("names provider {provider:?}; the providers are {known}")));
                continue;
            }
            for (tier, rule) in names.problems() {
                bad.push(("models", format!("{provider}.{tier} {rule}")));
            }
            let base = p.models.remove(provider).unwrap_or_default();
            p.models.insert(provider.clone(), base.over(names));
        }
        if bad.is_empty() { Ok(p) } else { Err(bad) }
    }

    /// One line for people: what the run works under.
    pub fn describe(&self) -> String {
        if !self.enabled {
            return "context efficiency off: every task runs as a fresh worker with its own capsule (the baseline)"
                .to_owned();
        }
        format!(
            "context efficiency on, profile {} (at most {} inherited writers, nesting {}, warm lease {} min, telemetry {}, rollouts up to {})",
            self.profile.as_str(),
            self.max_active_inherited,
            self.max_nesting_depth,
            self.warm_lease_minutes,
            self.telemetry.as_str(),
            self.rollout.as_str()
        )
    }
}

/// `workgroup.policy-set` v1: the policy a run of the workgroup works under from here on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicySet {
    /// The policy.
    pub policy: Policy,
    /// The profile before, when this changes a recorded policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaces: Option<Profile>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn balanced_is_the_seeds_defaults() {
        let p = Policy::default();
        assert_eq!(
            (p.max_active_inherited, p.max_nesting_depth, p.warm_lease_minutes, p.mcp_health_ttl_minutes),
            (2, 2, 20, 15)
        );
        assert_eq!((p.canary_percent, p.rollout, p.telemetry), (10, RolloutCap::Off, TelemetryMode::Local));
    }

    #[test]
    fn an_explicit_key_overrides_its_profile_and_bounds_are_named() {
        let o = Overrides {
            profile: Some(Profile::Economy),
            max_active_inherited: Some(5),
            warm_lease_minutes: Some(0),
            ..Overrides::default()
        };
        let p = Policy::resolve(&o).unwrap();
        assert_eq!((p.parallel, p.max_active_inherited, p.warm_lease_minutes), (2, 5, 0));
        let o = Overrides { max_nesting_depth: Some(0), canary_percent: Some(101), ..Overrides::default() };
        let bad = Policy::resolve(&o).unwrap_err();
        let keys: Vec<&str> = bad.iter().map(|(k, _)| *k).collect();
        assert_eq!(keys, ["max_nesting_depth", "canary_percent"]);
    }
}
