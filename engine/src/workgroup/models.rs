//! The model a worker runs on: a tier chosen per role by the efficiency profile (a task may name
//! its own), and the name that tier has on the task's provider. README's "Models per role" table
//! is [`tier_of`].
//!
//! The tiers are `strong`, `standard` and `fast`. The policy's [`Models`] gives each provider's
//! names for them (`[context_efficiency.models.<provider>]`; Claude Code's aliases `opus`,
//! `sonnet` and `haiku` unless configured); a tier with no name runs on the provider's own
//! default model. Every dispatch records its [`Choice`], so the cost of a profile change is
//! attributable per role.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::policy::Profile;
use super::roles::Role;

/// Longest model name, bytes.
pub const NAME_BYTES_MAX: usize = 128;

/// A model tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// The provider's fastest, cheapest model.
    Fast,
    /// Its everyday model.
    Standard,
    /// Its most capable model.
    Strong,
}

impl Tier {
    /// Every tier, weakest first.
    pub const ALL: [Tier; 3] = [Tier::Fast, Tier::Standard, Tier::Strong];

    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Fast => "fast",
            Tier::Standard => "standard",
            Tier::Strong => "strong",
        }
    }

    /// The tier named `s`.
    pub fn parse(s: &str) -> Option<Tier> {
        Tier::ALL.into_iter().find(|t| t.as_str() == s)
    }
}

/// One provider's model name per tier.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Names {
    /// `strong`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strong: Option<String>,
    /// `standard`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub standard: Option<String>,
    /// `fast`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fast: Option<String>,
}

impl Names {
    /// The same name for every tier.
    pub fn all(name: &str) -> Names {
        Names { strong: Some(name.to_owned()), standard: Some(name.to_owned()), fast: Some(name.to_owned()) }
    }

    /// The name of `tier`.
    pub fn of(&self, tier: Tier) -> Option<&str> {
        match tier {
            Tier::Strong => self.strong.as_deref(),
            Tier::Standard => self.standard.as_deref(),
            Tier::Fast => self.fast.as_deref(),
        }
    }

    /// `self` with every tier `over` names replaced by that name.
    pub fn over(mut self, over: &Names) -> Names {
        for (into, from) in
            [(&mut self.strong, &over.strong), (&mut self.standard, &over.standard), (&mut self.fast, &over.fast)]
        {
            if from.is_some() {
                into.clone_from(from);
            }
        }
        self
    }

    /// Every name out of bounds, as `(tier, rule)`.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        Tier::ALL
            .into_iter()
            .filter_map(|t| {
                let n = self.of(t)?;
                let bad = n.is_empty()
                    || n.len() > NAME_BYTES_MAX
                    || n.chars().any(|c| c.is_whitespace() || c.is_control() || c == '"' || c == '\'');
                bad.then(|| {
                    (t.as_str(), format!("is {n:?}; a model name is 1–{NAME_BYTES_MAX} bytes without spaces or quotes"))
                })
            })
            .collect()
    }
}

/// Model names by provider (`claude`, `codex`, `sim`).
pub type Models = BTreeMap<String, Names>;

/// The providers a model table may name.
pub const PROVIDERS: [&str; 3] = ["claude", "codex", "sim"];

/// The names strata starts from: Claude Code's own aliases; Codex and the simulated provider
/// have none, so their workers run on the model their CLI is configured with.
pub fn defaults() -> Models {
    let claude =
        Names { strong: Some("opus".to_owned()), standard: Some("sonnet".to_owned()), fast: Some("haiku".to_owned()) };
    [("claude".to_owned(), claude)].into()
}

/// The tier profile `p` gives role `r`: a reviewer never runs on a weaker tier than the builders
/// it reviews, and a planner or an architect on a weaker one than a builder.
pub fn tier_of(p: Profile, r: &Role) -> Tier {
    use Tier::{Fast, Standard, Strong};
    let (lead, builder, analyst, tests) = match p {
        Profile::Quality => (Strong, Strong, Strong, Strong),
        Profile::Balanced => (Strong, Standard, Standard, Standard),
        Profile::Economy => (Standard, Standard, Fast, Fast),
        Profile::Latency => (Standard, Fast, Fast, Fast),
    };
    match r.name {
        "planner" | "architect" | "reviewer" => lead,
        "analyst" => analyst,
        "test-builder" => tests,
        _ => builder,
    }
}

/// The model a dispatch chose.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Choice {
    /// The tier.
    pub tier: Tier,
    /// Where the tier came from: `task` (the plan names it) or `profile` (the profile's table).
    pub from: String,
    /// The provider's name for it; none: the provider's default model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// The model of a task in role `role` on `provider` under `policy`: the task's own tier when it
/// names one, else the profile's for the role; its name from the policy's table. With context
/// efficiency off the run is the baseline: no choice, every worker on its provider's default.
pub fn choose(policy: &super::policy::Policy, role: &str, task_tier: Option<Tier>, provider: &str) -> Option<Choice> {
    if !policy.enabled {
        return None;
    }
    let (tier, from) = match task_tier {
        Some(t) => (t, "task"),
        None => (tier_of(policy.profile, super::roles::role(role)?), "profile"),
    };
    let name = policy.models.get(provider).and_then(|n| n.of(tier)).map(str::to_owned);
    Some(Choice { tier, from: from.to_owned(), name })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workgroup::policy::Policy;
    use crate::workgroup::roles::ROLES;

    #[test]
    fn a_reviewer_or_a_lead_is_never_weaker_than_a_builder_and_quality_is_strong_throughout() {
        for p in Profile::ALL {
            let builders: Vec<Tier> = ROLES.iter().filter(|r| r.writes).map(|r| tier_of(p, r)).collect();
            let strongest = builders.iter().copied().max().unwrap_or(Tier::Fast);
            for r in ROLES.iter().filter(|r| r.reviews || matches!(r.name, "planner" | "architect")) {
                assert!(tier_of(p, r) >= strongest, "{} under {}", r.name, p.as_str());
            }
        }
        assert!(ROLES.iter().all(|r| tier_of(Profile::Quality, r) == Tier::Strong));
        let cheaper = |a: Profile, b: Profile| ROLES.iter().all(|r| tier_of(a, r) <= tier_of(b, r));
        assert!(cheaper(Profile::Economy, Profile::Balanced) && cheaper(Profile::Latency, Profile::Economy));
    }

    #[test]
    fn the_task_s_tier_wins_the_name_comes_from_the_provider_s_table_and_off_chooses_nothing() {
        let mut p = Policy::of(Profile::Economy);
        let c = choose(&p, "analyst", None, "claude").unwrap();
        assert_eq!((c.tier, c.from.as_str(), c.name.as_deref()), (Tier::Fast, "profile", Some("haiku")));
        let c = choose(&p, "analyst", Some(Tier::Strong), "claude").unwrap();
        assert_eq!((c.tier, c.from.as_str(), c.name.as_deref()), (Tier::Strong, "task", Some("opus")));
        assert_eq!(choose(&p, "reviewer", None, "codex").unwrap().name, None, "no Codex names unless configured");
        p.models.insert("codex".into(), Names { standard: Some("gpt-5.5".into()), ..Names::default() });
        assert_eq!(choose(&p, "reviewer", None, "codex").unwrap().name.as_deref(), Some("gpt-5.5"));
        p.enabled = false;
        assert_eq!(choose(&p, "reviewer", None, "claude"), None);
    }

    #[test]
    fn names_are_bounded_and_an_override_replaces_only_the_tiers_it_names() {
        let n = Names { fast: Some("bad name".into()), strong: Some(String::new()), ..Names::default() };
        let tiers: Vec<&str> = n.problems().iter().map(|(t, _)| *t).collect();
        assert_eq!(tiers, ["fast", "strong"]);
        let base = defaults()["claude"].clone();
        let over = base.over(&Names { fast: Some("claude-haiku-4-5".into()), ..Names::default() });
        assert_eq!((over.of(Tier::Fast), over.of(Tier::Strong)), (Some("claude-haiku-4-5"), Some("opus")));
    }
}
