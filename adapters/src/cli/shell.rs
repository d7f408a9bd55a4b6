//! `strata completions SHELL` and `strata man`: shell completion scripts and a man page, both
//! generated from the same clap definition the CLI parses with, so they cannot drift from it.

use std::path::Path;
use std::process::ExitCode;

use clap::CommandFactory as _;

use super::Cli;
use super::failure::Diagnostic;

/// Prints the completion script for `shell` on stdout.
pub(crate) fn completions(o: &crate::output::Out, shell: clap_complete::Shell) -> anyhow::Result<ExitCode> {
    let mut cmd = Cli::command();
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut cmd, "strata", &mut buf);
    out!(o, "{}", String::from_utf8_lossy(&buf));
    Ok(ExitCode::SUCCESS)
}

/// Prints the man page `strata(1)` (roff) on stdout, or with `out` writes it there together
/// with one page per subcommand (`strata-run.1`, `strata-journal-verify.1`, …).
pub(crate) fn man(o: &crate::output::Out, out: Option<&Path>, json: bool) -> anyhow::Result<ExitCode> {
    let cmd = Cli::command();
    let Some(dir) = out else {
        let mut buf = Vec::new();
        clap_mangen::Man::new(cmd).render(&mut buf)?;
        out!(o, "{}", String::from_utf8_lossy(&buf));
        return Ok(ExitCode::SUCCESS);
    };
    let cannot = |e: std::io::Error| Diagnostic {
        code: "STRATA-E2452",
        input: dir.display().to_string(),
        rule: format!("the man pages cannot be written there ({e})"),
        hint: "pass --out a directory that exists and is writable".into(),
    };
    if !dir.is_dir() {
        return Err(cannot(std::io::Error::new(std::io::ErrorKind::NotFound, "not a directory")).into());
    }
    let mut written = Vec::new();
    write_pages(&cmd, "strata", dir, &mut written).map_err(cannot)?;
    if json {
        outln!(o, "{}", serde_json::json!({"written": written}));
    } else {
        outln!(o, "wrote {} man pages to {}", written.len(), dir.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes `name.1` for `cmd` and, recursively, `name-sub.1` for each visible subcommand.
fn write_pages(cmd: &clap::Command, name: &str, dir: &Path, written: &mut Vec<String>) -> std::io::Result<()> {
    let page = cmd.clone().display_name(name.to_owned());
    let mut buf = Vec::new();
    clap_mangen::Man::new(page).render(&mut buf)?;
    let file = format!("{name}.1");
    std::fs::write(dir.join(&file), buf)?;
    written.push(file);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name() != "help") {
        write_pages(sub, &format!("{name}-{}", sub.get_name()), dir, written)?;
    }
    Ok(())
}
