//! The bundled example `strata run --example` runs: a workspace whose journal holds the bundled
//! knowledge base (the seed-scale fixture, seed 7), a small git repository with one file where
//! each task of the example plan writes, and the plan itself (`examples/workgroup.toml`).

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use strata_engine::kb::fixture::{FixtureSpec, generate};
use strata_engine::kb::graph::Graph;
use strata_engine::kb::intake;

use crate::app::append::{Decided, decide_and_append};
use crate::app::workspace::{Workspace, record_initialized};
use crate::config::Config;
use crate::system::{SystemClock, V7Ids};

/// The bundled example plan.
pub const PLAN: &str = include_str!("../../../examples/workgroup.toml");
const MARKER: &str = ".strata-run-example";

/// The files of the example repository: one per place a task of the example plan writes.
const EXAMPLE_FILES: [(&str, &str); 6] = [
    ("README.md", "# invoicing\n\nThe example repository `strata run --example` works on.\n"),
    ("src/billing/mod.rs", "//! Billing.\n"),
    ("src/shared/ledger.rs", "//! The shared ledger.\n"),
    ("src/identity/keys.rs", "//! Signing key references.\n"),
    ("web/invoice/index.html", "<!doctype html><title>Invoice</title>\n"),
    ("tests/billing/README.md", "Billing tests.\n"),
];

/// Builds the example workspace at `at`: a journal holding the bundled knowledge base, and a git
/// repository with a first commit. Returns the workspace and the repository.
pub fn build(at: &Path) -> anyhow::Result<(Workspace, PathBuf)> {
    if at.exists() {
        if !at.join(MARKER).exists() {
            anyhow::bail!(
                "[STRATA-E0602] {} exists and is not an earlier example; pass --at with a new directory",
                at.display()
            );
        }
        std::fs::remove_dir_all(at)
            .with_context(|| format!("cannot remove the earlier example at {}", at.display()))?;
    }
    std::fs::create_dir_all(at).with_context(|| format!("cannot create {}", at.display()))?;
    std::fs::write(at.join(MARKER), "created by `strata run --example`; safe to delete\n")?;
    let at = std::fs::canonicalize(at)?;
    let ws = Workspace::at(&at);
    let config = Config::default();
    let journal = ws.create(&format!("strata.example/{}", strata_engine::ports::Ids::next_id(&mut V7Ids)), &config)?;
    record_initialized(&journal, &config)?;
    // The seed-scale knowledge base without the artifacts of the seed's further prompt sections:
    // the example's prompts, and with them the simulated provider's seeded draws, stay what the
    // tests that pin a seed were written against.
    let fx = generate(&FixtureSpec { sections: false, ..FixtureSpec::seed_scale(7) });
    let taken = decide_and_append(&journal, &mut Graph::new(), |g| {
        let plan = intake::plan(g, &fx.files(), &mut V7Ids, &SystemClock)?;
        Ok(Decided { appends: plan.appends, answer: () })
    });
    crate::cli::appended(taken, |p: Vec<intake::IntakeProblem>| {
        anyhow::anyhow!("the bundled knowledge base does not take in: {:?}", p.first())
    })?;
    ws.finish(&journal)?;
    journal.close_blocking()?;
    let repo = at.join("repo");
    for (path, text) in EXAMPLE_FILES {
        let p = repo.join(path);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&p, text)?;
    }
    for args in [
        &["init", "-q", "-b", "main"][..],
        &["add", "-A"],
        &[
            "-c",
            "user.name=strata",
            "-c",
            "user.email=strata@localhost",
            "commit",
            "-q",
            "-m",
            "the example repository",
        ],
    ] {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(&repo)
            .args(args)
            .output()
            .context("cannot run git (is it installed?)")?;
        if !out.status.success() {
            anyhow::bail!("git {} failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
        }
    }
    Ok((ws, repo))
}
