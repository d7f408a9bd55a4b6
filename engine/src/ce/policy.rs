//! Result policy: how a unit's result is kept (ephemeral, durable handoff, artifact) and which
//! writes it may make. A write-prohibited unit writes nothing; material or writer work cannot
//! request away its recoverable handoff; large raw output needs artifact persistence.

use super::error::{CeError, Code, fail};

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

/// The result policy facts (`input` of `result-policy`); an absent affirmative fact is `false`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PolicyFacts {
    /// The mode asked for.
    pub requested: Option<ResultMode>,
    /// The unit may write nothing.
    pub write_prohibited: bool,
    /// A recoverable handoff is required (material, writer, partial, resumable or
    /// phase-crossing work).
    pub handoff_required: bool,
    /// The unit produces large raw output.
    pub large_raw_output: bool,
    /// `authorize_handoff` (`Some(false)` refuses one).
    pub authorize_handoff: Option<bool>,
    /// `authorize_artifact` (`Some(false)` refuses one).
    pub authorize_artifact: Option<bool>,
    /// A vault capture is authorised.
    pub vault: bool,
    /// A settings change is authorised.
    pub settings: bool,
    /// A WorkGroup mutation is authorised.
    pub workgroup: bool,
}

/// Resolves the policy of `f`.
pub fn resolve(f: &PolicyFacts) -> Result<Policy, CeError> {
    let PolicyFacts {
        requested,
        write_prohibited,
        handoff_required,
        large_raw_output,
        authorize_handoff,
        authorize_artifact,
        vault,
        settings,
        workgroup,
    } = *f;
    let required = handoff_required || requested == Some(ResultMode::Durable);
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
