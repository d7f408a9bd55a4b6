//! An error with its parts named (the input, the rule it broke, what to do), so that `--json`
//! reports them as fields ([`crate::cli::failure`]) and the text form reads as every strata
//! error does: `[STRATA-Exxxx] <input>: <rule>; <hint>`.

use std::path::Path;

/// An error with its parts named: the input, the rule it broke, and what to do.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("[{code}] {input}: {rule}; {hint}")]
pub struct Diagnostic {
    /// `STRATA-Exxxx`.
    pub code: &'static str,
    /// The input at fault (an argument, a path, a name).
    pub input: String,
    /// The rule it broke.
    pub rule: String,
    /// What to do.
    pub hint: String,
}

/// `STRATA-E0204`: no workspace at `root` (nor, when it was searched for, above the current
/// directory).
pub fn no_workspace(root: &Path) -> Diagnostic {
    Diagnostic {
        code: "STRATA-E0204",
        input: root.display().to_string(),
        rule: "no strata workspace here: no .strata/ in this directory (nor, without --dir, in any directory above it)"
            .into(),
        hint: "run `strata init` in the repository's top directory, or pass --dir".into(),
    }
}
