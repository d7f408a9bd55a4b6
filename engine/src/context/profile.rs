//! Context profiles: what an agent type is given, at which level, within which budget.
//!
//! A profile lists entries in three classes: `always` (up front, mandatory at the declared
//! level), `forCurrentTask` (up front, resolved from the task's change request; mandatory at
//! least at L3) and `onDemand` (never up front: offered in the prompt, served later when the
//! worker asks through `get_context`, within the remaining budget; see [`super::fetch`]). `never` globs exclude content whatever route it
//! arrives by; `maxFullSpecs` caps L1 specifications; `tokenBudget` caps the prompt. `guards`
//! marks globs (of `never` or of an entry) that guard paths which may appear later: a run's
//! preflight requires every other glob to match something in the knowledge base.
//!
//! Profiles are registered as versioned events (`profile.registered` on `profile/<agentId>`; the
//! stream version is the profile version), validated against
//! `schemas/agent-context-profile.schema.json`, and every template variable must be known.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use serde::{Deserialize, Serialize};
use strata_journal::{Hash, Record};

use super::render::Level;

/// A profile as written.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Profile {
    /// Agent type id.
    pub agent_id: String,
    /// Pipeline tier.
    pub tier: String,
    /// Model (its family selects the token factor).
    pub model: String,
    /// What it is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The context contract.
    pub context_profile: ContextProfile,
}

/// The context contract of a profile.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ContextProfile {
    /// Mandatory entries.
    pub always: Vec<Entry>,
    /// Entries resolved from the task's plan.
    pub for_current_task: Vec<Entry>,
    /// Entries offered, not included: a worker fetches them later (`get_context`).
    #[serde(default)]
    pub on_demand: Vec<Entry>,
    /// Globs over virtual paths that are never included.
    pub never: Vec<String>,
    /// Most specifications at L1.
    #[serde(default = "default_max_full_specs")]
    pub max_full_specs: u32,
    /// Token budget of the whole prompt.
    pub token_budget: u32,
    /// Globs of this profile (a `never` glob or an entry's path, written the same) that guard
    /// paths which may appear later: a run's preflight does not require them to match anything
    /// in the knowledge base yet. Left out when empty, so a profile without guards keeps its hash.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub guards: Vec<String>,
}

fn default_max_full_specs() -> u32 {
    3
}

/// One entry: a path (or glob, or template) and a level.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// Path template.
    pub path: String,
    /// Level as written.
    pub level: String,
}

impl Entry {
    /// The parsed level (validated at registration).
    pub fn level(&self) -> Level {
        Level::parse(&self.level).unwrap_or(Level::L1)
    }
}

/// Template variables a path may use.
pub const VARIABLES: &[&str] = &[
    "systemSummary",
    "entitySummary",
    "pipelineRules",
    "crFile",
    "targetRequirements",
    "functionalDomainSpec",
    "targetModuleSpec",
    "targetScreenSpec",
    "docRoot",
    "entity",
    "designProfile",
    "stackConcerns",
    "techSkills",
    "implementationRefs",
    "modificationRoutes",
    "continuationStatus",
];

static SCHEMA: LazyLock<Result<jsonschema::Validator, String>> = LazyLock::new(|| {
    let v: serde_json::Value = serde_json::from_str(include_str!("../../../schemas/agent-context-profile.schema.json"))
        .map_err(|e| e.to_string())?;
    jsonschema::validator_for(&v).map_err(|e| e.to_string())
});

/// A profile that does not validate.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("[STRATA-E0901] profile {source_name}: {problems}")]
pub struct ProfileError {
    /// Where the profile came from.
    pub source_name: String,
    /// Every problem, `; `-separated, each with its JSON pointer.
    pub problems: String,
}

fn variables_in(path: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = path;
    while let Some(start) = rest.find('{') {
        let Some(end) = rest[start..].find('}') else { break };
        out.push(&rest[start + 1..start + end]);
        rest = &rest[start + end + 1..];
    }
    out
}

/// Parses and validates a profile document.
pub fn parse(source_name: &str, text: &str) -> Result<Profile, ProfileError> {
    let err = |problems: String| ProfileError { source_name: source_name.to_owned(), problems };
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| err(format!("not JSON: {e}")))?;
    let validator = SCHEMA.as_ref().map_err(|e| err(format!("schema does not compile: {e}")))?;
    let mut problems: Vec<String> =
        validator.iter_errors(&value).map(|e| format!("{} ({})", e, e.instance_path())).collect();
    if !problems.is_empty() {
        problems.sort();
        return Err(err(problems.join("; ")));
    }
    let p: Profile = serde_json::from_value(value).map_err(|e| err(e.to_string()))?;
    let entries =
        p.context_profile.always.iter().chain(&p.context_profile.for_current_task).chain(&p.context_profile.on_demand);
    for (i, e) in entries.enumerate() {
        for v in variables_in(&e.path) {
            if !VARIABLES.contains(&v) {
                problems
                    .push(format!("entry {i} uses unknown template variable {{{v}}}; known: {}", VARIABLES.join(", ")));
            }
        }
        if Level::parse(&e.level).is_none() {
            problems.push(format!("entry {i} has unknown level {:?}", e.level));
        }
    }
    let cp = &p.context_profile;
    for (i, e) in cp.on_demand.iter().enumerate() {
        if e.path.contains("{continuationStatus}") {
            problems.push(format!(
                "onDemand[{i}] is {{continuationStatus}}, which is read from the run's journal when the prompt is assembled and cannot be fetched later; list it under always or forCurrentTask (/contextProfile/onDemand/{i})"
            ));
        }
    }
    for (i, g) in cp.guards.iter().enumerate() {
        let written = cp.never.contains(g)
            || cp.always.iter().chain(&cp.for_current_task).chain(&cp.on_demand).any(|e| e.path == *g);
        if !written {
            problems.push(format!(
                "guards[{i}] {g:?} is neither a never glob nor an entry path of this profile; a guard names one of them exactly (/contextProfile/guards/{i})"
            ));
        }
    }
    if problems.is_empty() { Ok(p) } else { Err(err(problems.join("; "))) }
}

/// The profiles strata ships, as `(name, text)`.
pub const BUILTIN: &[(&str, &str)] = &[
    ("orchestrator", include_str!("../../../profiles/orchestrator.json")),
    ("ui-developer", include_str!("../../../profiles/ui-developer.json")),
    ("backend-developer", include_str!("../../../profiles/backend-developer.json")),
    ("reviewer", include_str!("../../../profiles/reviewer.json")),
];

/// `profile.registered` v1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Registered {
    /// The profile.
    pub profile: Profile,
    /// blake3 of its canonical JSON (hex).
    pub hash: String,
}

/// Event type of a registration.
pub const REGISTERED: &str = "profile.registered";

/// Canonical hash of a profile.
pub fn hash(p: &Profile) -> Hash {
    crate::canonical::hash(&serde_json::to_value(p).unwrap_or_default())
}

/// Every registered version of every profile; a projection of the journal.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProfileIndex {
    versions: BTreeMap<String, Vec<(u64, Profile)>>,
}

impl ProfileIndex {
    /// Applies one record.
    pub fn apply(&mut self, r: &Record<'_>) -> Result<(), String> {
        if r.event_type != REGISTERED {
            return Ok(());
        }
        let e: Registered = serde_json::from_slice(r.payload).map_err(|e| format!("profile.registered: {e}"))?;
        self.versions.entry(e.profile.agent_id.clone()).or_default().push((r.version, e.profile));
        Ok(())
    }

    /// The latest version of `agent_id`.
    pub fn latest(&self, agent_id: &str) -> Option<(u64, &Profile)> {
        self.versions.get(agent_id).and_then(|v| v.last()).map(|(n, p)| (*n, p))
    }

    /// Version `version` of `agent_id`.
    pub fn version(&self, agent_id: &str, version: u64) -> Option<&Profile> {
        self.versions.get(agent_id)?.iter().find(|(n, _)| *n == version).map(|(_, p)| p)
    }

    /// Every profile's latest version.
    pub fn all(&self) -> impl Iterator<Item = (&str, u64, &Profile)> {
        self.versions.iter().filter_map(|(k, v)| v.last().map(|(n, p)| (k.as_str(), *n, p)))
    }
}

/// The stream of a profile.
pub fn stream(agent_id: &str) -> String {
    format!("profile/{agent_id}")
}

/// The append that registers `p` as a new version, or `None` when the latest registered version
/// is identical (registering the same profile twice changes nothing). The append expects the
/// stream at the version read, so two concurrent registrations cannot both claim a version.
pub fn register(
    index: &ProfileIndex,
    p: &Profile,
    ids: &mut dyn crate::ports::Ids,
    clock: &dyn crate::ports::Clock,
) -> Result<Option<strata_journal::StreamAppend>, String> {
    let h = hash(p).to_hex();
    let latest = index.latest(&p.agent_id);
    if latest.is_some_and(|(_, q)| hash(q).to_hex() == h) {
        return Ok(None);
    }
    let e = crate::kb::intake::event(ids, clock, REGISTERED, &Registered { profile: p.clone(), hash: h }, None)?;
    let expected = strata_journal::ExpectedVersion::Exact(latest.map_or(0, |(v, _)| v));
    Ok(Some(strata_journal::StreamAppend { stream: stream(&p.agent_id), expected, events: vec![e] }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_profiles_validate_and_bad_ones_do_not() {
        for (name, text) in BUILTIN {
            let p = parse(name, text).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(p.agent_id, *name);
        }
        let (_, text) = BUILTIN[1];
        let mut v: serde_json::Value = serde_json::from_str(text).unwrap();
        v["contextProfile"]["tokenBudget"] = 100.into();
        assert!(parse("x", &v.to_string()).is_err());
        v["contextProfile"]["tokenBudget"] = 20000.into();
        v["contextProfile"]["always"][0]["path"] = "{nope}".into();
        let e = parse("x", &v.to_string()).unwrap_err();
        assert!(e.problems.contains("unknown template variable {nope}"), "{e}");
    }

    #[test]
    fn a_guard_names_a_glob_of_its_profile_and_an_empty_list_keeps_the_hash() {
        let (_, text) = BUILTIN[2];
        let mut v: serde_json::Value = serde_json::from_str(text).unwrap();
        v["contextProfile"]["guards"] = serde_json::json!(["specs/*/screens/**", "specs/*/nope/**"]);
        let e = parse("x", &v.to_string()).unwrap_err();
        assert!(e.problems.contains("guards[1] \"specs/*/nope/**\" is neither"), "{e}");
        assert!(!e.problems.contains("guards[0]"), "{e}");
        v["contextProfile"]["guards"] = serde_json::json!([]);
        let p = parse("x", &v.to_string()).unwrap();
        let without = {
            let mut w = v.clone();
            w["contextProfile"].as_object_mut().unwrap().remove("guards");
            parse("x", &w.to_string()).unwrap()
        };
        assert_eq!(hash(&p), hash(&without));
    }
}
