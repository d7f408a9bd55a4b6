//! `.strata/config.toml`: the workspace configuration.
//!
//! ```toml
//! [journal]
//! durability = "power"   # or "process"; see README, "Durability"
//! cache_mib = 64         # sled page cache, 8 to 4096
//! lock_wait_ms = 30000   # how long a command waits for another holder of the journal, 0 to 600000
//! backend = "sled"       # or "postgres": a journal shared across machines (README, "Sharing a
//!                        # journal across machines"); then `url` (no password) and `schema`
//!
//! [tokens]               # o200k counts are scaled by the model family's factor
//! claude = 1.3           # claude, opus, sonnet, haiku models
//! openai = 1.0           # gpt, codex, o-series models
//! default = 1.0          # any other model
//!
//! [context_efficiency]   # every key optional; README, "Context efficiency settings"
//! enabled = true         # false: every task runs as the baseline would (a fresh worker)
//! profile = "balanced"   # quality, balanced, economy or latency: defaults for the keys below
//! rollout = "off"        # highest rollout stage a run honours: off, observe, shadow, canary, on
//! max_active_inherited = 2
//! max_nesting_depth = 2
//! warm_lease_minutes = 20
//! mcp_health_ttl_minutes = 15
//! disk_handoff_threshold = "material"   # or "always"
//! telemetry = "local"    # off, local or provider
//! canary_percent = 10
//!
//! [context_efficiency.models.claude]    # model names per tier (README, "Models per role")
//! strong = "opus"
//! standard = "sonnet"
//! fast = "haiku"
//! ```
//!
//! Unknown keys are errors (a misspelt setting must not be silently ignored).

use std::collections::BTreeMap;

use serde::Deserialize;
use strata_engine::workgroup::policy::{Handoff, Overrides, Policy, Profile, RolloutCap, TelemetryMode};
use strata_journal::Durability;

/// Largest config file read.
pub const CONFIG_BYTES_MAX: u64 = 64 * 1024;

/// Parsed configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Durability of acknowledged appends.
    pub durability: Durability,
    /// sled cache, MiB.
    pub cache_mib: u64,
    /// How long a command waits for another process holding the journal, ms (the environment's
    /// `STRATA_LOCK_WAIT_MS` overrides it).
    pub lock_wait_ms: u64,
    /// Token factor per model family, per mille (1300 = x1.3).
    pub token_factors: BTreeMap<String, u32>,
    /// Where the journal lives.
    pub backend: Backend,
    /// The `[context_efficiency]` policy runs work under.
    pub efficiency: Policy,
}

/// The journal's backend.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Backend {
    /// sled in `.strata/journal/` (the default).
    #[default]
    Sled,
    /// A PostgreSQL schema several workspaces (on several machines) can share.
    Postgres {
        /// `postgresql://user@host:port/database`, without a password.
        url: String,
        /// PostgreSQL schema holding the journal.
        schema: String,
    },
}

impl Backend {
    /// A PostgreSQL backend, checked: the URL parses and carries no password, the schema is a
    /// plain name. `what` names where the values came from.
    pub fn postgres(url: &str, schema: &str, what: &str) -> anyhow::Result<Backend> {
        strata_journal::pg::PgOptions::new(url, what)?.with_schema(schema)?;
        Ok(Backend::Postgres { url: url.to_owned(), schema: schema.to_owned() })
    }

    /// Options for opening the PostgreSQL journal (`None` for sled), with the `PG*` variables
    /// and password file of this process's environment.
    pub fn pg_options(&self, command: &str) -> anyhow::Result<Option<strata_journal::pg::PgOptions>> {
        let Backend::Postgres { url, schema } = self else { return Ok(None) };
        let mut o = strata_journal::pg::PgOptions::new(url, "journal.url")?.with_schema(schema)?;
        o.env = strata_journal::pg::PgEnv::from_vars(|k| std::env::var(k).ok());
        o.application_name = format!("strata {command}");
        Ok(Some(o))
    }
}

/// Default of `journal.lock_wait_ms`.
pub const LOCK_WAIT_MS_DEFAULT: u64 = 30_000;
/// Largest `journal.lock_wait_ms`.
pub const LOCK_WAIT_MS_MAX: u64 = 600_000;

/// Model families a token factor can be set for.
pub const FAMILIES: [&str; 3] = ["claude", "openai", "default"];

impl Default for Config {
    fn default() -> Self {
        let token_factors =
            [("claude", 1300), ("openai", 1000), ("default", 1000)].map(|(k, v)| (k.to_owned(), v)).into();
        Config {
            durability: Durability::Power,
            cache_mib: 64,
            lock_wait_ms: LOCK_WAIT_MS_DEFAULT,
            token_factors,
            backend: Backend::Sled,
            efficiency: Policy::default(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    journal: JournalSection,
    #[serde(default)]
    tokens: BTreeMap<String, f64>,
    #[serde(default)]
    context_efficiency: EfficiencySection,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct EfficiencySection {
    enabled: Option<bool>,
    rollout: Option<String>,
    profile: Option<String>,
    max_active_inherited: Option<u64>,
    max_nesting_depth: Option<u64>,
    warm_lease_minutes: Option<u64>,
    mcp_health_ttl_minutes: Option<u64>,
    disk_handoff_threshold: Option<String>,
    telemetry: Option<String>,
    canary_percent: Option<u64>,
    #[serde(default)]
    caps: strata_engine::workgroup::caps::PlanCaps,
    #[serde(default)]
    models: strata_engine::workgroup::models::Models,
}

/// `value` as one of `choices` (by name), or an error naming `key` and the choices.
fn choice<T: Copy>(path: &str, key: &str, value: Option<String>, choices: &[(&str, T)]) -> anyhow::Result<Option<T>> {
    let Some(v) = value else { return Ok(None) };
    match choices.iter().find(|(name, _)| *name == v) {
        Some((_, t)) => Ok(Some(*t)),
        None => {
            let names: Vec<&str> = choices.iter().map(|(n, _)| *n).collect();
            anyhow::bail!(
                "[STRATA-E0601] {path}: context_efficiency.{key} is {v:?}; it must be one of {}",
                names.join(", ")
            )
        }
    }
}

impl EfficiencySection {
    fn resolve(self, path: &str) -> anyhow::Result<Policy> {
        let profiles: Vec<(&str, Profile)> = Profile::ALL.iter().map(|p| (p.as_str(), *p)).collect();
        let rollouts: Vec<(&str, RolloutCap)> = RolloutCap::ALL.iter().map(|r| (r.as_str(), *r)).collect();
        let handoffs = [(Handoff::Material.as_str(), Handoff::Material), (Handoff::Always.as_str(), Handoff::Always)];
        let telemetry = [TelemetryMode::Off, TelemetryMode::Local, TelemetryMode::Provider].map(|t| (t.as_str(), t));
        let percent = self.canary_percent.map(|p| u32::try_from(p).unwrap_or(u32::MAX));
        let o = Overrides {
            enabled: self.enabled,
            rollout: choice(path, "rollout", self.rollout, &rollouts)?,
            profile: choice(path, "profile", self.profile, &profiles)?,
            max_active_inherited: self.max_active_inherited,
            max_nesting_depth: self.max_nesting_depth,
            warm_lease_minutes: self.warm_lease_minutes,
            mcp_health_ttl_minutes: self.mcp_health_ttl_minutes,
            disk_handoff_threshold: choice(path, "disk_handoff_threshold", self.disk_handoff_threshold, &handoffs)?,
            telemetry: choice(path, "telemetry", self.telemetry, &telemetry)?,
            canary_percent: percent,
            caps: self.caps,
            models: self.models,
        };
        Policy::resolve(&o).map_err(|bad| {
            let each: Vec<String> = bad.iter().map(|(k, rule)| format!("context_efficiency.{k} {rule}")).collect();
            anyhow::anyhow!("[STRATA-E0601] {path}: {}", each.join("; "))
        })
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct JournalSection {
    durability: Option<String>,
    cache_mib: Option<u64>,
    lock_wait_ms: Option<u64>,
    backend: Option<String>,
    url: Option<String>,
    schema: Option<String>,
}

impl Config {
    /// Parses the TOML text of a config file; `path` is only for messages.
    pub fn parse(text: &str, path: &str) -> anyhow::Result<Config> {
        let f: File = toml::from_str(text).map_err(|e| anyhow::anyhow!("[STRATA-E0601] {path}: {}", e.message()))?;
        let mut c = Config::default();
        if let Some(d) = f.journal.durability {
            c.durability = d.parse().map_err(|e: String| anyhow::anyhow!("[STRATA-E0601] {path}: journal.{e}"))?;
        }
        if let Some(m) = f.journal.cache_mib {
            if !(8..=4096).contains(&m) {
                anyhow::bail!("[STRATA-E0601] {path}: journal.cache_mib is {m}; it must be between 8 and 4096");
            }
            c.cache_mib = m;
        }
        if let Some(w) = f.journal.lock_wait_ms {
            c.lock_wait_ms = check_lock_wait(w).map_err(|e| anyhow::anyhow!("[STRATA-E0601] {path}: journal.{e}"))?;
        }
        c.backend = match (f.journal.backend.as_deref(), f.journal.url, f.journal.schema) {
            (None | Some("sled"), None, None) => Backend::Sled,
            (None | Some("sled"), _, _) => {
                anyhow::bail!(
                    "[STRATA-E0601] {path}: journal.url and journal.schema need journal.backend = \"postgres\""
                )
            }
            (Some("postgres"), Some(url), schema) => {
                let schema = schema.unwrap_or_else(|| strata_journal::pg::SCHEMA_DEFAULT.to_owned());
                Backend::postgres(&url, &schema, &format!("{path}: journal.url"))?
            }
            (Some("postgres"), None, _) => anyhow::bail!(
                "[STRATA-E0601] {path}: journal.backend = \"postgres\" needs journal.url = \"postgresql://user@host:port/database\""
            ),
            (Some(other), _, _) => {
                anyhow::bail!("[STRATA-E0601] {path}: journal.backend must be \"sled\" or \"postgres\", not {other:?}")
            }
        };
        for (family, factor) in f.tokens {
            if !FAMILIES.contains(&family.as_str()) {
                anyhow::bail!(
                    "[STRATA-E0601] {path}: tokens.{family} is not a model family; families are {}",
                    FAMILIES.join(", ")
                );
            }
            if !(0.1..=10.0).contains(&factor) {
                anyhow::bail!(
                    "[STRATA-E0601] {path}: tokens.{family} is {factor}; a token factor must be between 0.1 and 10"
                );
            }
            c.token_factors.insert(family, (factor * 1000.0).round() as u32);
        }
        c.efficiency = f.context_efficiency.resolve(path)?;
        Ok(c)
    }

    /// How long to wait for another holder of the journal: `STRATA_LOCK_WAIT_MS` from `env` when
    /// set, else `journal.lock_wait_ms`.
    pub fn lock_wait(&self, env: Option<&str>) -> anyhow::Result<std::time::Duration> {
        let ms = match env {
            Some(v) => {
                let n = v.trim().parse::<u64>().map_err(|_| {
                    anyhow::anyhow!("[STRATA-E0601] STRATA_LOCK_WAIT_MS is {v:?}; it must be a number of milliseconds")
                })?;
                check_lock_wait(n).map_err(|e| anyhow::anyhow!("[STRATA-E0601] STRATA_LOCK_WAIT_MS: {e}"))?
            }
            None => self.lock_wait_ms,
        };
        Ok(std::time::Duration::from_millis(ms))
    }

    /// The token factor (per mille) for `model`'s family.
    pub fn token_factor(&self, model: &str) -> u32 {
        let family = strata_engine::context::assemble::family(model);
        self.token_factors.get(family).or_else(|| self.token_factors.get("default")).copied().unwrap_or(1000)
    }

    /// The TOML text written by `strata init`.
    pub fn render(&self) -> String {
        let text = self.render_sled();
        match &self.backend {
            Backend::Sled => text,
            Backend::Postgres { url, schema } => text.replacen(
                "\n\n[tokens]",
                &format!(
                    "\n# A journal shared across machines. No password here: PGPASSWORD or ~/.pgpass (mode 0600).\nbackend = \"postgres\"\nurl = {}\nschema = {}\n\n[tokens]",
                    toml_string(url),
                    toml_string(schema)
                ),
                1,
            ),
        }
    }

    fn render_sled(&self) -> String {
        format!(
            "# strata workspace configuration\n\n[journal]\n# \"power\": acknowledged appends survive power loss (fdatasync per batch).\n# \"process\": they survive a crash of the process, not of the machine.\ndurability = \"{}\"\n# sled page cache in MiB (8 to 4096).\ncache_mib = {}\n# How long a command waits for another process holding the journal, ms (0 to 600000).\nlock_wait_ms = {}\n\n[tokens]\n# o200k token counts are multiplied by the model family's factor.\n{}",
            self.durability.as_str(),
            self.cache_mib,
            self.lock_wait_ms,
            self.token_factors.iter().map(|(k, v)| format!("{k} = {}.{:03}\n", v / 1000, v % 1000)).collect::<String>()
        )
    }
}

fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

fn check_lock_wait(ms: u64) -> Result<u64, String> {
    if ms > LOCK_WAIT_MS_MAX {
        return Err(format!("lock_wait_ms is {ms}; it must be at most {LOCK_WAIT_MS_MAX} (ten minutes)"));
    }
    Ok(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_parses_back_and_bad_values_are_refused() {
        let mut c = Config { durability: Durability::Process, cache_mib: 32, ..Config::default() };
        c.token_factors.insert("claude".into(), 1250);
        assert_eq!(Config::parse(&c.render(), "x").unwrap(), c);
        assert!(Config::parse("[journal]\ndurability = \"disk\"\n", "x").is_err());
        assert!(Config::parse("[journal]\ncache_mib = 1\n", "x").is_err());
        assert!(Config::parse("[journal]\nlock_wait_ms = 600001\n", "x").is_err());
        assert_eq!(Config::parse("[journal]\nlock_wait_ms = 50\n", "x").unwrap().lock_wait_ms, 50);
        assert_eq!(c.lock_wait(Some("250")).unwrap(), std::time::Duration::from_millis(250));
        assert!(c.lock_wait(Some("soon")).is_err());
        assert!(Config::parse("[journal]\ndurabilty = \"power\"\n", "x").is_err());
        assert_eq!(Config::parse("", "x").unwrap(), Config::default());
        assert!(Config::parse("[tokens]\nclaude = 0\n", "x").is_err());
        assert!(Config::parse("[tokens]\ngemini = 1.1\n", "x").is_err());
        let pg = Config {
            backend: Backend::postgres("postgresql://strata@db.example:5432/team", "strata", "x").unwrap(),
            ..Config::default()
        };
        assert_eq!(Config::parse(&pg.render(), "x").unwrap(), pg);
        let e =
            Config::parse("[journal]\nbackend = \"postgres\"\nurl = \"postgresql://u:pw@h/db\"\n", "x").unwrap_err();
        assert!(e.to_string().starts_with("[STRATA-E2305]") && !e.to_string().contains("pw@"), "{e}");
        assert!(Config::parse("[journal]\nbackend = \"postgres\"\n", "x").is_err());
        assert!(Config::parse("[journal]\nbackend = \"mysql\"\n", "x").is_err());
        assert!(Config::parse("[journal]\nurl = \"postgresql://u@h/db\"\n", "x").is_err());
        let c = Config::parse("[tokens]\nclaude = 1.35\n", "x").unwrap();
        assert_eq!(c.token_factor("claude-opus-4"), 1350);
        assert_eq!(c.token_factor("gpt-5-codex"), 1000);
    }

    #[test]
    fn context_efficiency_keys_parse_and_each_bad_one_is_named() {
        let c = Config::parse(
            "[context_efficiency]\nprofile = \"latency\"\nenabled = false\ntelemetry = \"off\"\nwarm_lease_minutes = 5\n",
            "x",
        )
        .unwrap();
        let p = c.efficiency;
        assert_eq!(
            (p.profile, p.enabled, p.telemetry, p.warm_lease_minutes, p.parallel),
            (Profile::Latency, false, TelemetryMode::Off, 5, 8)
        );
        for (text, key) in [
            ("profile = \"cheap\"", "context_efficiency.profile"),
            ("rollout = \"canary-25\"", "context_efficiency.rollout"),
            ("max_nesting_depth = 0", "context_efficiency.max_nesting_depth"),
            ("canary_percent = 150", "context_efficiency.canary_percent"),
            ("disk_handoff_threshold = \"never\"", "context_efficiency.disk_handoff_threshold"),
            ("telemetry = \"remote\"", "context_efficiency.telemetry"),
        ] {
            let e = Config::parse(&format!("[context_efficiency]\n{text}\n"), "x").unwrap_err().to_string();
            assert!(e.starts_with("[STRATA-E0601]") && e.contains(key), "{text}: {e}");
        }
        let e = Config::parse("[context_efficiency]\nmax_active_inherted = 2\n", "x").unwrap_err().to_string();
        assert!(e.contains("max_active_inherted"), "{e}");
        assert_eq!(strata_engine::workgroup::policy::INHERITED_MAX, 64);
    }
}
