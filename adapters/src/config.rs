//! `.strata/config.toml`: the workspace configuration.
//!
//! ```toml
//! [journal]
//! durability = "power"   # or "process"; see README, "Durability"
//! cache_mib = 64         # sled page cache, 8 to 4096
//! ```
//!
//! Unknown keys are errors (a misspelt setting must not be silently ignored).

use serde::Deserialize;
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
}

impl Default for Config {
    fn default() -> Self {
        Config { durability: Durability::Power, cache_mib: 64 }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    journal: JournalSection,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct JournalSection {
    durability: Option<String>,
    cache_mib: Option<u64>,
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
        Ok(c)
    }

    /// The TOML text written by `strata init`.
    pub fn render(&self) -> String {
        format!(
            "# strata workspace configuration\n\n[journal]\n# \"power\": acknowledged appends survive power loss (fdatasync per batch).\n# \"process\": they survive a crash of the process, not of the machine.\ndurability = \"{}\"\n# sled page cache in MiB (8 to 4096).\ncache_mib = {}\n",
            self.durability.as_str(),
            self.cache_mib
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_parses_back_and_bad_values_are_refused() {
        let c = Config { durability: Durability::Process, cache_mib: 32 };
        assert_eq!(Config::parse(&c.render(), "x").unwrap(), c);
        assert!(Config::parse("[journal]\ndurability = \"disk\"\n", "x").is_err());
        assert!(Config::parse("[journal]\ncache_mib = 1\n", "x").is_err());
        assert!(Config::parse("[journal]\ndurabilty = \"power\"\n", "x").is_err());
        assert_eq!(Config::parse("", "x").unwrap(), Config::default());
    }
}
