//! The `strata` command line.
//!
//! Exit codes: 0 success; 1 error (bad input, I/O, a refused operation; the message names the
//! input, the rule and the fix); 2 usage error; 3 an integrity check found problems (`journal
//! verify`, `replay --check`).

mod context;
mod demo;
mod journal;
mod kb;
mod replay;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use strata_journal::note::SignerKey;

use crate::config::Config;
use crate::workspace::{Workspace, record_initialized};

/// strata: event-sourced orchestration for governed, context-efficient multi-agent work.
#[derive(Parser, Debug)]
#[command(name = "strata", version, about, long_about = None)]
pub struct Cli {
    /// Workspace directory (holds `.strata/`).
    #[arg(long, global = true, env = "STRATA_DIR", default_value = ".")]
    pub dir: PathBuf,
    /// Machine-readable JSON output instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Create `.strata/` with a config and a new journal.
    Init {
        /// Durability of acknowledged appends: `power` (fdatasync) or `process`.
        #[arg(long, default_value = "power")]
        durability: String,
        /// The journal's origin (unique log name signed into checkpoints); default
        /// `strata.local/<uuid>`.
        #[arg(long)]
        origin: Option<String>,
    },
    /// Run the bundled example end to end: initialise a journal, append the example events,
    /// sign a checkpoint, verify (live and from an offline bundle) and replay.
    Demo {
        /// Where to build the demo workspace (replaced if it holds an earlier demo).
        #[arg(long, default_value = "target/strata-demo")]
        at: PathBuf,
    },
    /// Generate an Ed25519 key for signing checkpoints.
    Keygen {
        /// Key name (written into every signature line).
        #[arg(long, default_value = "strata")]
        name: String,
        /// Private key file to write (mode 0600); the public key goes to `<out>.pub`.
        #[arg(long)]
        out: PathBuf,
    },
    /// Rebuild every projection from sequence 1 and print each one's state hash.
    Replay {
        /// Also start each projection from its snapshot, replay the tail, and require the same
        /// state hash as the full rebuild (exit 3 if not).
        #[arg(long)]
        check: bool,
        /// Store the rebuilt projections as snapshots (replay writes nothing otherwise).
        #[arg(long)]
        save_snapshots: bool,
    },
    /// Journal commands.
    #[command(subcommand)]
    Journal(journal::JournalCommand),
    /// Take artifacts in from Markdown (YAML front matter) and JSON files or directories; all or
    /// nothing.
    Intake {
        /// Files or directories.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Check and report what would change without appending.
        #[arg(long)]
        dry_run: bool,
    },
    /// Write the deterministic seed-scale knowledge base (15 entities, 164 specification files,
    /// ~615k tokens) as intake files, optionally with known defects planted.
    Fixture {
        /// Seed; the same seed gives the same files.
        #[arg(long, default_value_t = 7)]
        seed: u64,
        /// Directory to write (must not exist or be empty).
        #[arg(long)]
        out: PathBuf,
        /// Defects to plant: missing-inverse, dangling, cycle, cross-entity (repeatable).
        #[arg(long)]
        plant: Vec<String>,
    },
    /// Show, transition, promote and review artifacts.
    #[command(subcommand)]
    Artifact(kb::ArtifactCommand),
    /// Validate the spec graph, analyse impact, list suspects and entities.
    #[command(subcommand)]
    Graph(kb::GraphCommand),
    /// Show, check and publish the hierarchical summaries (L3 system, L2 entity).
    #[command(subcommand)]
    Summary(context::SummaryCommand),
    /// Register, list and show context profiles.
    #[command(subcommand)]
    Profile(context::ProfileCommand),
    /// Assemble a task's prompt with its bill of materials, and verify one.
    #[command(subcommand)]
    Prompt(context::PromptCommand),
    /// What agents were given, and why.
    #[command(subcommand)]
    Audit(context::AuditCommand),
    /// Measure context efficiency on the seed-scale fixture.
    #[command(subcommand)]
    Context(context::ContextCommand),
}

/// Runs the CLI and maps the outcome to an exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// Exit code for "an integrity check found problems".
pub const EXIT_PROBLEMS: u8 = 3;

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let ws = Workspace::at(&cli.dir);
    match cli.command {
        Command::Init { durability, origin } => {
            let durability =
                durability.parse().map_err(|e: String| anyhow::anyhow!("[STRATA-E0601] --durability: {e}"))?;
            let config = Config { durability, ..Config::default() };
            let origin = origin.unwrap_or_else(|| format!("strata.local/{}", uuid::Uuid::now_v7()));
            let journal = ws.create(&origin, &config)?;
            record_initialized(&journal, &config)?;
            journal.close_blocking()?;
            let head = journal.head();
            if cli.json {
                println!(
                    "{}",
                    serde_json::json!({
                        "workspace": ws.root().display().to_string(),
                        "origin": origin,
                        "durability": config.durability.as_str(),
                        "head": head.seq,
                    })
                );
            } else {
                println!(
                    "initialised {} (origin {origin}, durability {})",
                    ws.strata_dir().display(),
                    config.durability.as_str()
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Demo { at } => demo::run(&at, cli.json),
        Command::Keygen { name, out } => keygen(&name, &out, cli.json),
        Command::Replay { check, save_snapshots } => replay::run(&ws, check, save_snapshots, cli.json),
        Command::Journal(cmd) => journal::run(&ws, cmd, cli.json),
        Command::Intake { paths, dry_run } => kb::intake(&ws, &paths, dry_run, cli.json),
        Command::Fixture { seed, out, plant } => kb::fixture(seed, &out, &plant, cli.json),
        Command::Artifact(cmd) => kb::artifact(&ws, cmd, cli.json),
        Command::Graph(cmd) => kb::graph(&ws, cmd, cli.json),
        Command::Summary(cmd) => context::summary_cmd(&ws, cmd, cli.json),
        Command::Profile(cmd) => context::profile_cmd(&ws, cmd, cli.json),
        Command::Prompt(cmd) => context::prompt_cmd(&ws, cmd, cli.json),
        Command::Audit(cmd) => context::audit_cmd(&ws, cmd, cli.json),
        Command::Context(cmd) => context::context_cmd(cmd, cli.json),
    }
}

fn keygen(name: &str, out: &std::path::Path, json: bool) -> anyhow::Result<ExitCode> {
    let key = SignerKey::from_seed(name, crate::system::random_seed()?)?;
    let pub_path = PathBuf::from(format!("{}.pub", out.display()));
    write_new_file(out, key.to_text().as_bytes(), 0o600)?;
    write_new_file(&pub_path, format!("{}\n", key.verifier().to_text()).as_bytes(), 0o644)?;
    if json {
        println!(
            "{}",
            serde_json::json!({"name": name, "private_key_file": out.display().to_string(), "public_key_file": pub_path.display().to_string(), "public_key": key.verifier().to_text()})
        );
    } else {
        println!("wrote {} (private, mode 0600) and {}", out.display(), pub_path.display());
        println!("public key: {}", key.verifier().to_text());
    }
    Ok(ExitCode::SUCCESS)
}

/// Creates `path` with `mode`; refuses to overwrite.
pub(crate) fn write_new_file(path: &std::path::Path, bytes: &[u8], mode: u32) -> anyhow::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            anyhow::anyhow!("[STRATA-E0602] {} already exists; choose another --out or remove it first", path.display())
        } else {
            anyhow::anyhow!("cannot create {}: {e}", path.display())
        }
    })?;
    f.write_all(bytes)?;
    f.sync_all()?;
    Ok(())
}

/// Reads a key given as a file path or as the key text itself.
pub(crate) fn read_key_arg(arg: &str) -> anyhow::Result<String> {
    let p = std::path::Path::new(arg);
    if p.exists() {
        let meta = std::fs::metadata(p)?;
        if meta.len() > 4096 {
            anyhow::bail!("[STRATA-E0402] {arg} is {} bytes; a key file is one short line", meta.len());
        }
        Ok(std::fs::read_to_string(p)?.trim().to_owned())
    } else {
        Ok(arg.trim().to_owned())
    }
}
