//! `strata claim` and `strata release`: ownership for a person's own Claude Code or Codex
//! session, decided by [`strata_engine::ce::interactive`] on the dispatch ledger and appended
//! through the one decide-and-append, so it is the same map, the same router check and the same
//! events as a `strata run` worker's. With a daemon serving the workspace (`strata serve`,
//! `strata mcp`, `strata run`) the command runs there (it is forwarded like every journal
//! command); otherwise it opens the journal itself.
//!
//! Paths are taken relative to the working directory (the client's, when forwarded), resolved
//! through symbolic links as the write guard resolves a hook's targets, and must lie inside the
//! workspace; they need not exist yet.

use std::path::Path;
use std::process::ExitCode;

use serde_json::json;
use strata_engine::ce::interactive::{self, ClaimError, INTERACTIVE};
use strata_engine::ce::ledger::Ledger;
use strata_journal::projection::catch_up_one;

use crate::app::append::{Decided, decide_and_append};
use crate::app::workspace::Workspace;
use crate::system::{SystemClock, V7Ids};
use crate::table::Table;

/// `strata claim`'s arguments.
#[derive(clap::Args, Debug)]
pub struct ClaimArgs {
    /// Files or directories to own (inside the workspace; they need not exist). None: list who
    /// owns what.
    paths: Vec<String>,
    /// Claim for this session only: the runtime's own session id (the `session_id` its hooks
    /// are given; `claude --session-id UUID` sets it).
    #[arg(long = "for", value_name = "SESSION", conflicts_with = "interactive")]
    for_session: Option<String>,
    /// Claim for every interactive session in the workspace (the default).
    #[arg(long)]
    interactive: bool,
}

/// `strata release`'s arguments.
#[derive(clap::Args, Debug)]
pub struct ReleaseArgs {
    /// Files or directories to give back (each from whichever interactive session owns them,
    /// or only from `--for`/`--interactive`). None: everything the session named owns.
    paths: Vec<String>,
    /// The session whose paths are released.
    #[arg(long = "for", value_name = "SESSION", conflicts_with = "interactive")]
    for_session: Option<String>,
    /// The paths claimed for every interactive session.
    #[arg(long)]
    interactive: bool,
}

fn lineage_of(for_session: Option<&str>, interactive: bool) -> Option<String> {
    match (for_session, interactive) {
        (Some(s), _) => Some(interactive::session_lineage(s)),
        (None, true) => Some(INTERACTIVE.to_owned()),
        (None, false) => None,
    }
}

/// The workspace-relative form of each path argument. A relative path is taken from the
/// working directory (the client's, when forwarded) when that lies inside the workspace, else
/// from the workspace root (`strata --dir REPO claim src/` from anywhere).
fn relative_paths(ws: &Workspace, given: &[String]) -> anyhow::Result<Vec<String>> {
    let here = match ws.cwd() {
        Some(c) => c.to_path_buf(),
        None => std::env::current_dir().map_err(|e| anyhow::anyhow!("cannot read the working directory: {e}"))?,
    };
    let root = std::fs::canonicalize(ws.root())
        .map_err(|e| anyhow::anyhow!("cannot resolve the workspace {}: {e}", ws.root().display()))?;
    let root = crate::files::resolve_links(&root).map_err(|e| anyhow::anyhow!("{e}"))?;
    let here = crate::files::resolve_links(&here).unwrap_or_default();
    let base = if here.starts_with(&root) { here } else { root.clone() };
    given.iter().map(|p| relative(&root, &base, Path::new(p))).collect()
}

fn relative(root: &Path, base: &Path, p: &Path) -> anyhow::Result<String> {
    let bad = |detail: String| ClaimError::Path { path: p.display().to_string(), detail };
    if p.as_os_str().is_empty() {
        return Err(bad("an empty path".to_owned()).into());
    }
    let absolute = if p.is_absolute() { p.to_owned() } else { base.join(p) };
    let resolved = crate::files::resolve_links(&absolute).map_err(bad)?;
    let inside =
        resolved.strip_prefix(root).map_err(|_| bad(format!("it lies outside the workspace {}", root.display())))?;
    let text = inside.to_str().ok_or_else(|| bad("not UTF-8".to_owned()))?;
    if text.is_empty() {
        return Err(bad("the workspace root itself; name the files or directories to own".to_owned()).into());
    }
    Ok(text.to_owned())
}

/// `strata claim`.
pub fn claim(ws: &Workspace, args: ClaimArgs, json: bool) -> anyhow::Result<ExitCode> {
    let journal = ws.open_journal("claim")?;
    if args.paths.is_empty() {
        let listed = list(ws.out(), &journal, json);
        ws.finish(&journal)?;
        return listed;
    }
    let lineage = lineage_of(args.for_session.as_deref(), true).unwrap_or_else(|| INTERACTIVE.to_owned());
    let paths = relative_paths(ws, &args.paths)?;
    let done = super::appended(
        decide_and_append(&journal, &mut Ledger::default(), |state| {
            let c = interactive::claim(state, &lineage, &paths, &mut V7Ids, &SystemClock)?;
            Ok::<_, ClaimError>(Decided { appends: c.append.into_iter().collect(), answer: (c.owned, c.added) })
        }),
        anyhow::Error::from,
    )?;
    ws.finish(&journal)?;
    let (owned, added) = done.answer;
    if json {
        outln!(ws, "{}", json!({"ok": true, "lineage": lineage, "added": added, "owned": owned, "head": done.seq}));
    } else if added.is_empty() {
        outln!(ws, "{lineage} already owns {}; nothing recorded", paths.join(", "));
    } else {
        outln!(ws, "{lineage} now owns {} (claimed {}; head {})", owned.join(", "), added.join(", "), done.seq);
    }
    Ok(ExitCode::SUCCESS)
}

/// `strata release`.
pub fn release(ws: &Workspace, args: ReleaseArgs, json: bool) -> anyhow::Result<ExitCode> {
    let lineage = lineage_of(args.for_session.as_deref(), args.interactive);
    let paths = relative_paths(ws, &args.paths)?;
    let journal = ws.open_journal("release")?;
    let done = super::appended(
        decide_and_append(&journal, &mut Ledger::default(), |state| {
            let r = interactive::release(state, lineage.as_deref(), &paths, &mut V7Ids, &SystemClock)?;
            Ok::<_, ClaimError>(Decided { appends: r.append.into_iter().collect(), answer: r.returned })
        }),
        anyhow::Error::from,
    )?;
    ws.finish(&journal)?;
    let returned = done.answer;
    if json {
        let rows: Vec<_> =
            returned.iter().map(|r| json!({"lineage": r.lineage, "released": r.released, "kept": r.kept})).collect();
        outln!(ws, "{}", json!({"ok": true, "returned": rows, "head": done.seq}));
    } else if returned.is_empty() {
        outln!(ws, "{} owns nothing; nothing recorded", lineage.as_deref().unwrap_or("no interactive session"));
    } else {
        for r in &returned {
            let kept = if r.kept.is_empty() { "nothing".to_owned() } else { r.kept.join(", ") };
            outln!(ws, "{} released {}; it still owns {kept}", r.lineage, r.released.join(", "));
        }
        outln!(ws, "head {}", done.seq);
    }
    Ok(ExitCode::SUCCESS)
}

/// Who owns what: every lineage of the ownership map, workgroup workers included.
fn list(o: &crate::output::Out, journal: &strata_journal::Journal, json: bool) -> anyhow::Result<ExitCode> {
    let mut state = Ledger::default();
    catch_up_one(&mut state, journal)?;
    if json {
        let rows: Vec<_> = state
            .owners()
            .iter()
            .map(|(l, o)| {
                json!({"lineage": l, "interactive": interactive::is_interactive(l), "mode": o.mode, "paths": o.paths})
            })
            .collect();
        outln!(o, "{}", json!({"owners": rows}));
        return Ok(ExitCode::SUCCESS);
    }
    if state.owners().is_empty() {
        outln!(o, "no one owns any path; `strata claim PATHS` claims some for your interactive sessions");
        return Ok(ExitCode::SUCCESS);
    }
    let mut t = Table::new(&["LINEAGE", "KIND", "PATHS"]);
    for (l, o) in state.owners() {
        let kind = if interactive::is_interactive(l) { "interactive" } else { "worker" };
        t.row(vec![l.clone(), kind.to_owned(), o.paths.join(", ")]);
    }
    out!(o, "{}", t.render());
    Ok(ExitCode::SUCCESS)
}
