//! The telemetry event payloads (all schema version 1), the six usage counters and the rules for
//! the names they carry.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `telemetry.efficiency-recorded`: a normalised `knowzcode.efficiency-event/v1`.
pub const EFFICIENCY_RECORDED: &str = "telemetry.efficiency-recorded";
/// `telemetry.usage-reported`: one invocation's usage, cumulative and delta.
pub const USAGE_REPORTED: &str = "telemetry.usage-reported";
/// `telemetry.session-reported`: the provider's own final totals for a session.
pub const SESSION_REPORTED: &str = "telemetry.session-reported";
/// Every type folded by the telemetry projection.
pub const ALL: [&str; 3] = [EFFICIENCY_RECORDED, USAGE_REPORTED, SESSION_REPORTED];

/// Longest session pseudonym, bytes.
pub const SESSION_BYTES_MAX: usize = 64;
/// Model names the efficiency-event schema allows (besides `anon-model-` pseudonyms).
pub const MODELS: [&str; 8] = ["unknown", "opus", "sonnet", "haiku", "fable", "gpt-5", "gpt-5.6-sol", "gpt-5.6-terra"];
/// Profiles.
pub const PROFILES: [&str; 4] = ["quality", "balanced", "economy", "latency"];

/// The six counters of a usage report. `None` is unknown, never zero.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Counters {
    /// Uncached input tokens.
    #[serde(default)]
    pub input_tokens: Option<u64>,
    /// Tokens written to the prompt cache.
    #[serde(default)]
    pub cache_creation_tokens: Option<u64>,
    /// Tokens read from the prompt cache.
    #[serde(default)]
    pub cache_read_tokens: Option<u64>,
    /// Output tokens.
    #[serde(default)]
    pub output_tokens: Option<u64>,
    /// Cost in millionths of the currency unit.
    #[serde(default)]
    pub cost_micros: Option<u64>,
    /// Wall time, milliseconds.
    #[serde(default)]
    pub wall_ms: Option<u64>,
}

/// Largest value of any counter (10¹⁵: a quadrillion tokens, micro-units or milliseconds), so
/// sums over any realistic number of invocations stay exact.
pub const COUNTER_MAX: u64 = 1_000_000_000_000_000;

/// Counter names, in output order.
pub const COUNTERS: [&str; 6] =
    ["input_tokens", "cache_creation_tokens", "cache_read_tokens", "output_tokens", "cost_micros", "wall_ms"];

impl Counters {
    /// The sum of two invocations' counters: a counter is unknown when both are; a known value
    /// plus an unknown one keeps the known (callers that must not mix check [`Counters::named`]).
    pub fn plus(&self, other: &Counters) -> Counters {
        let add = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
        };
        Counters {
            input_tokens: add(self.input_tokens, other.input_tokens),
            cache_creation_tokens: add(self.cache_creation_tokens, other.cache_creation_tokens),
            cache_read_tokens: add(self.cache_read_tokens, other.cache_read_tokens),
            output_tokens: add(self.output_tokens, other.output_tokens),
            cost_micros: add(self.cost_micros, other.cost_micros),
            wall_ms: add(self.wall_ms, other.wall_ms),
        }
    }

    /// The first counter above [`COUNTER_MAX`], if any.
    pub fn too_large(&self) -> Option<&'static str> {
        self.named().into_iter().find(|(_, v)| v.is_some_and(|v| v > COUNTER_MAX)).map(|(n, _)| n)
    }

    /// The counters as `(name, value)`, in [`COUNTERS`] order.
    pub fn named(&self) -> [(&'static str, Option<u64>); 6] {
        [
            (COUNTERS[0], self.input_tokens),
            (COUNTERS[1], self.cache_creation_tokens),
            (COUNTERS[2], self.cache_read_tokens),
            (COUNTERS[3], self.output_tokens),
            (COUNTERS[4], self.cost_micros),
            (COUNTERS[5], self.wall_ms),
        ]
    }

    /// Builds counters from values in [`COUNTERS`] order.
    pub fn from_values(v: [Option<u64>; 6]) -> Counters {
        Counters {
            input_tokens: v[0],
            cache_creation_tokens: v[1],
            cache_read_tokens: v[2],
            output_tokens: v[3],
            cost_micros: v[4],
            wall_ms: v[5],
        }
    }

    /// Whether any billing counter (tokens, cost) is known; wall time is not billing.
    pub fn any_billing(&self) -> bool {
        self.named()[..5].iter().any(|(_, v)| v.is_some())
    }

    /// All four token classes added, or unknown when any of them is.
    pub fn tokens(&self) -> Option<u64> {
        let parts = [self.input_tokens?, self.cache_creation_tokens?, self.cache_read_tokens?, self.output_tokens?];
        parts.iter().try_fold(0u64, |a, b| a.checked_add(*b))
    }
}

/// Which arm of a comparison a session ran in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arm {
    /// The current policy.
    Baseline,
    /// The policy under evaluation.
    Candidate,
}

impl Arm {
    /// Wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Arm::Baseline => "baseline",
            Arm::Candidate => "candidate",
        }
    }
}

/// Who ran the invocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    /// Claude Code.
    Claude,
    /// Codex.
    Codex,
    /// Anything else.
    Other,
    /// strata's simulated provider: its figures are synthetic, estimated at most, never billed.
    Simulated,
}

impl Provider {
    /// Wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Claude => "claude",
            Provider::Codex => "codex",
            Provider::Other => "other",
            Provider::Simulated => "simulated",
        }
    }
}

/// Who vouches for the billing counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AccountingSource {
    /// The bill itself.
    Authoritative,
    /// The provider's own report.
    ProviderReported,
    /// strata's estimate: recorded, never counted as billed.
    Estimated,
    /// Nobody: billing counters must be null.
    Unknown,
}

impl AccountingSource {
    /// Wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            AccountingSource::Authoritative => "authoritative",
            AccountingSource::ProviderReported => "provider-reported",
            AccountingSource::Estimated => "estimated",
            AccountingSource::Unknown => "unknown",
        }
    }

    /// Whether its figures count toward billed totals.
    pub fn billed(self) -> bool {
        matches!(self, AccountingSource::Authoritative | AccountingSource::ProviderReported)
    }
}

/// `telemetry.efficiency-recorded` v1.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EfficiencyRecorded {
    /// strata's session pseudonym.
    pub session: String,
    /// Arm, when part of a comparison.
    pub arm: Option<Arm>,
    /// One of the five strata.
    pub stratum: Option<String>,
    /// The normalised, privacy-checked event.
    pub event: Value,
}

/// `telemetry.usage-reported` v1: the provider's cumulative counters for the session, and the
/// per-invocation delta the decider derived from the previous report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageReported {
    /// strata's session pseudonym.
    pub session: String,
    /// Provider.
    pub provider: Provider,
    /// Model (efficiency-event model names or an `anon-model-` pseudonym).
    pub model: Option<String>,
    /// Context profile.
    pub profile: Option<String>,
    /// Dispatch mode.
    pub mode: Option<String>,
    /// One of the five strata.
    pub stratum: Option<String>,
    /// Arm.
    pub arm: Option<Arm>,
    /// Who vouches for the billing counters.
    pub accounting_source: AccountingSource,
    /// ISO 4217 code of `cost_micros` (required when a cost is known).
    pub currency: Option<String>,
    /// As the provider reported them.
    pub cumulative: Counters,
    /// This invocation's share: unknown when this or the previous cumulative value is unknown.
    pub delta: Counters,
}

/// `telemetry.session-reported` v1: the provider's own totals for the whole session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionReported {
    /// strata's session pseudonym.
    pub session: String,
    /// Provider.
    pub provider: Provider,
    /// Arm.
    pub arm: Option<Arm>,
    /// ISO 4217 code of `cost_micros`.
    pub currency: Option<String>,
    /// The provider's totals.
    pub totals: Counters,
}

/// `^[a-z0-9][a-z0-9-]{0,63}$`.
pub fn session_valid(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= SESSION_BYTES_MAX
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

/// A model name the efficiency-event schema accepts.
pub fn model_valid(s: &str) -> bool {
    MODELS.contains(&s)
        || s.strip_prefix("anon-model-")
            .is_some_and(|h| (16..=64).contains(&h.len()) && h.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')))
}

/// The telemetry label of model `name`, within [`model_valid`]: a listed name as it is, a Claude
/// id by its family (`claude-sonnet-4-5` is `sonnet`), any other name pseudonymous
/// (`anon-model-` and the first 16 hex digits of its SHA-256), so no free text reaches telemetry.
pub fn model_label(name: &str) -> String {
    if MODELS.contains(&name) {
        return name.to_owned();
    }
    if let Some(family) = ["opus", "sonnet", "haiku", "fable"]
        .into_iter()
        .find(|f| name.strip_prefix("claude-").is_some_and(|rest| rest.split('-').any(|part| part == *f)))
    {
        return family.to_owned();
    }
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(name.as_bytes());
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("anon-model-{hex}")
}

/// `^[A-Z]{3}$`.
pub fn currency_valid(s: &str) -> bool {
    s.len() == 3 && s.bytes().all(|c| c.is_ascii_uppercase())
}

#[cfg(test)]
mod model_label_tests {
    use super::*;

    #[test]
    fn a_model_name_becomes_a_label_the_schema_takes_and_no_free_text() {
        assert_eq!(model_label("opus"), "opus");
        assert_eq!(model_label("claude-sonnet-4-5"), "sonnet");
        assert_eq!(model_label("claude-3-5-haiku-latest"), "haiku");
        let anon = model_label("my-private-finetune");
        assert!(anon.starts_with("anon-model-") && model_valid(&anon), "{anon}");
        assert_eq!(anon, model_label("my-private-finetune"), "the same name, the same label");
        assert_ne!(anon, model_label("gpt-5.5"));
        assert!(model_valid(&model_label("gpt-5.5")));
    }
}
