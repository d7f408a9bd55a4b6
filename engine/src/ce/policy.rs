//! Result policy: how a unit's result is kept (ephemeral, durable handoff, artifact) and which
//! writes it may make. A write-prohibited unit writes nothing; material or writer work cannot
//! request away its recoverable handoff; large raw output needs artifact persistence.

use serde_json::{Value, json};

use super::error::{CeError, Code, fail};
use super::facts::Obj;

/// Result modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResultMode {
    /// A bounded result returned directly.
    Ephemeral,
    /// A recoverable handoff on disk.
    Durable,
    /// Raw output kept as an artifact.
    Artifact,
}

impl ResultMode {
    /// Wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            ResultMode::Ephemeral => "ephemeral",
            ResultMode::Durable => "durable",
            ResultMode::Artifact => "artifact",
        }
    }
}

/// The five writes a result may make.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Writes {
    /// Handoff file.
    pub handoff: bool,
    /// Artifact.
    pub artifact: bool,
    /// Vault capture.
    pub vault: bool,
    /// Settings change.
    pub settings: bool,
    /// WorkGroup mutation.
    pub workgroup: bool,
}

/// A resolved policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Mode.
    pub mode: ResultMode,
    /// Whether the unit was write-prohibited.
    pub write_prohibited: bool,
    /// Allowed writes.
    pub writes: Writes,
}

impl Policy {
    /// The wire result.
    pub fn to_json(&self) -> Value {
        let w = &self.writes;
        json!({
            "mode": self.mode.as_str(),
            "write_prohibited": self.write_prohibited,
            "writes": {"handoff": w.handoff, "artifact": w.artifact, "vault": w.vault, "settings": w.settings, "workgroup": w.workgroup},
        })
    }
}

/// Resolves the policy facts (`input` of `result-policy`).
pub fn resolve(input: &Value) -> Result<Policy, CeError> {
    let o = Obj::of(input, "input", Code::InvalidRequest)?;
    let requested = match o.string_or("requested_mode", Code::InvalidResultMode)? {
        None => None,
        Some("ephemeral") => Some(ResultMode::Ephemeral),
        Some("durable") => Some(ResultMode::Durable),
        Some("artifact") => Some(ResultMode::Artifact),
        Some(_) => {
            return fail(Code::InvalidResultMode, "input.requested_mode: must be ephemeral, durable or artifact");
        }
    };
    let write_prohibited = o.is_true("write_prohibited")?;
    // Every fact is type-checked even when the unit is write-prohibited.
    let mut required = requested == Some(ResultMode::Durable);
    for k in ["material", "writer", "partial", "resumable", "crosses_phase"] {
        required |= o.is_true(k)?;
    }
    let large_raw_output = o.is_true("large_raw_output")?;
    let authorize_handoff = o.flag("authorize_handoff")?;
    let authorize_artifact = o.flag("authorize_artifact")?;
    let vault = o.is_true("authorize_vault_write")?;
    let settings = o.is_true("authorize_settings_write")?;
    let workgroup = o.is_true("authorize_workgroup_write")?;
    if write_prohibited {
        return Ok(Policy { mode: ResultMode::Ephemeral, write_prohibited, writes: Writes::default() });
    }
    let mode = if large_raw_output {
        ResultMode::Artifact
    } else if required && matches!(requested, None | Some(ResultMode::Ephemeral)) {
        ResultMode::Durable
    } else {
        requested.unwrap_or(ResultMode::Ephemeral)
    };
    let needs_handoff = required || mode == ResultMode::Durable;
    if needs_handoff && authorize_handoff == Some(false) {
        return fail(Code::ResultHandoffNotAuthorized, "input.authorize_handoff: a durable handoff is required here");
    }
    if mode == ResultMode::Artifact && authorize_artifact == Some(false) {
        return fail(Code::ResultArtifactNotAuthorized, "input.authorize_artifact: large raw output needs an artifact");
    }
    Ok(Policy {
        mode,
        write_prohibited,
        writes: Writes { handoff: needs_handoff, artifact: mode == ResultMode::Artifact, vault, settings, workgroup },
    })
}
