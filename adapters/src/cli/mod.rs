//! The `strata` command line.
//!
//! Exit codes: 0 success; 1 error (bad input, I/O, a refused operation; the message names the
//! input, the rule and the fix); 2 usage error; 3 an integrity check found problems (`journal
//! verify`, `replay --check`).
//!
//! Conventions every command follows: the workspace is found upward from the current directory
//! ([`locate`]) unless `--dir`/`STRATA_DIR` names it; with `--json` a failure is one JSON
//! object on stdout ([`failure`]); logs go to stderr through `tracing` (`-v`, `-q`, `RUST_LOG`);
//! failed and held rows are coloured on a terminal ([`crate::style`]).

mod agents;
mod audit;
mod audit_commit;
mod ce;
mod claim;
pub(crate) mod context;
mod demo;
mod discover;
mod eval;
pub(crate) mod failure;
mod hook;
pub(crate) mod locate;
pub use hook::{HOOK_DEADLINE_MS_DEFAULT, HOOK_DEADLINE_MS_MAX, HOOK_DEADLINE_MS_MIN};
mod journal;
pub(crate) mod kb;
mod knowledge;
mod replay;
mod rollout;
mod run;
mod shell;
mod simulate;
mod telemetry;
mod workgroups;
mod worktrees;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use strata_journal::note::SignerKey;

use crate::app::workspace::{Workspace, record_initialized};
use crate::config::Config;

/// `strata --version`: the package version and the commit it was built from.
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("STRATA_COMMIT"), ")");

/// The top-level help's opening: what strata is for.
const ABOUT: &str = "strata runs AI coding agents (Claude Code, Codex) on your repository under rules you can audit.";

/// The top-level `--help`'s long description.
const LONG_ABOUT: &str = "strata runs AI coding agents (Claude Code, Codex) on your repository under rules you can audit. \
A plan's tasks each own the files they may change, get a prompt assembled from your specifications within a token \
budget, and integrate on a branch of their own; every decision is an event in one journal in `.strata/`, so \
`strata audit` can say which task, session and prompt preceded each write.";

/// The top-level `--help`'s closing: one example per common task (checked to parse by a test).
pub const EXAMPLES: &str = "\
Examples:
  strata init                           create .strata/ here: a config and a new journal
  strata run --example                  run the bundled example with the simulated provider
  strata intake specs/                  take specifications (Markdown or JSON) in, all or nothing
  strata knowledge put notes/           add knowledge chunks agents can be given
  strata run plan.toml --check          check a plan and everything it needs; record nothing
  strata run plan.toml                  run a workgroup's plan on its own branch
  strata workgroups                     list workgroups: state, task counts, branch, last activity
  strata audit file src/lib.rs          which task, session and prompt preceded each write
  strata journal verify                 check the journal's integrity (exit 3 on a problem)
  strata serve                          own the journal; serve the CLI, hooks and MCP
  strata completions bash               a completion script (also zsh, fish, elvish, powershell)

Commands find .strata/ in the current directory or the nearest one above it, as git finds .git/;
--dir or STRATA_DIR names the workspace instead. Errors start with a code: see docs/errors.md.";

/// strata: governed, context-efficient multi-agent work on a repository.
#[derive(Parser, Debug)]
#[command(name = "strata", version = VERSION, about = ABOUT, long_about = LONG_ABOUT, after_help = EXAMPLES)]
pub struct Cli {
    /// Workspace directory (holds `.strata/`); default: the nearest directory at or above the
    /// current one that holds `.strata/`.
    #[arg(value_parser = crate::cli::path_arg, long, global = true, env = "STRATA_DIR")]
    pub dir: Option<PathBuf>,
    /// Machine-readable JSON output instead of tables; a failure is one JSON object on stdout
    /// (code, message, input, rule, hint).
    #[arg(long, global = true)]
    pub json: bool,
    /// Log more to stderr (-v info, -vv debug, -vvv trace); RUST_LOG, when set, decides instead.
    #[arg(short, long, global = true, action = clap::ArgAction::Count, conflicts_with = "quiet")]
    pub verbose: u8,
    /// Log errors only.
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// Colour failed (red) and held (yellow) rows: auto (on a terminal, unless NO_COLOR is
    /// set), always or never.
    #[arg(long, global = true, value_enum, default_value_t = crate::style::ColorChoice::Auto)]
    pub color: crate::style::ColorChoice,
    /// Whether `--dir` was given on the command line (not by `STRATA_DIR` or the upward
    /// search): `ce` and `eval promote`, stateless without a journal, then take it as their
    /// `--journal`.
    #[arg(skip)]
    pub dir_given: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Create `.strata/` with a config and a new journal (with --claude / --codex also the
    /// configuration of your own Claude Code or Codex sessions).
    #[command(group = clap::ArgGroup::new("agents").args(["claude", "codex"]).multiple(true))]
    Init {
        /// Durability of acknowledged appends: `power` (fdatasync) or `process`.
        #[arg(long, default_value = "power")]
        durability: String,
        /// The journal's origin (unique log name signed into checkpoints); default
        /// `strata.local/<uuid>`.
        #[arg(long)]
        origin: Option<String>,
        /// Where the journal lives: `sled` (in `.strata/journal/`) or `postgres` (a database
        /// several workspaces and machines share; needs --url).
        #[arg(long, default_value = "sled")]
        backend: String,
        /// With `--backend postgres`: `postgresql://user@host:port/database`, without a password
        /// (PGPASSWORD or ~/.pgpass supply it).
        #[arg(long)]
        url: Option<String>,
        /// With `--backend postgres`: the PostgreSQL schema holding the journal.
        #[arg(long, default_value = "strata")]
        schema: String,
        /// Also configure this repository for your own Claude Code sessions: the write guard
        /// hook in `.claude/settings.json`, the MCP server `strata` in `.mcp.json`, the skill in
        /// `.claude/skills/strata/` (existing files are merged; an existing `.strata/` is kept).
        #[arg(long)]
        claude: bool,
        /// Also configure it for your own Codex sessions: `.codex/config.toml` (MCP server),
        /// `.codex/hooks.json` (write guard), the skill in `.agents/skills/strata/`.
        #[arg(long)]
        codex: bool,
        /// With --claude or --codex: print the files as they would be written; write nothing.
        #[arg(long, requires = "agents")]
        print: bool,
    },
    /// Run the bundled example end to end: initialise a journal, append the example events,
    /// sign a checkpoint, verify (live and from an offline bundle) and replay.
    Demo {
        /// Where to build the demo workspace (replaced if it holds an earlier demo).
        #[arg(value_parser = crate::cli::path_arg, long, default_value = "target/strata-demo")]
        at: PathBuf,
    },
    /// Generate an Ed25519 key for signing checkpoints.
    Keygen {
        /// Key name (written into every signature line).
        #[arg(long, default_value = "strata")]
        name: String,
        /// Private key file to write (mode 0600); the public key goes to `<out>.pub`.
        #[arg(value_parser = crate::cli::path_arg, long)]
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
        #[arg(value_parser = crate::cli::path_arg, required = true)]
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
        #[arg(value_parser = crate::cli::path_arg, long)]
        out: PathBuf,
        /// Defects to plant: missing-inverse, dangling, cycle, cross-entity, module-cycle,
        /// module-cross-entity, unresolved-call (repeatable).
        #[arg(long)]
        plant: Vec<String>,
    },
    /// Rank the entities, specifications and knowledge chunks a request concerns (BM25 over
    /// the journal at a position; ties by kind and id), with the words each matched.
    Discover {
        /// The request, in words ("multi-currency rounding is wrong on invoices").
        text: String,
        /// Journal sequence to discover as of (default: the head).
        #[arg(long)]
        at: Option<u64>,
        /// How many results (1–100).
        #[arg(long, default_value_t = 10)]
        limit: usize,
        /// Only these kinds (entity, brd-requirement, functional-domain, backend-module,
        /// ui-screen, chunk; repeatable).
        #[arg(long)]
        kind: Vec<String>,
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
    /// The Knowledge API: chunks, get/list, sessions, learnings, decisions, outcomes, insights.
    #[command(subcommand)]
    Knowledge(knowledge::KnowledgeCommand),
    /// Telemetry: record efficiency events, usage and provider session totals (one JSON request
    /// on stdin); report rollups and reconciliation.
    #[command(subcommand)]
    Telemetry(telemetry::TelemetryCommand),
    /// The daemon: own the journal and serve the CLI, hooks and `strata mcp` over
    /// `.strata/daemon.sock` (and MCP over HTTP with --http) until SIGTERM.
    Serve {
        /// Also serve MCP over streamable HTTP at this loopback address (e.g. 127.0.0.1:7411 or
        /// localhost:7411; port 0 picks one, written to `.strata/serve.json`). The bearer token
        /// is in `.strata/http-token` (created, mode 0600).
        #[arg(long, value_parser = http_addr)]
        http: Option<std::net::SocketAddr>,
    },
    /// MCP over stdio: the Knowledge API tools. Relays to `strata serve` when it runs, else
    /// opens the journal itself.
    Mcp,
    /// The context-efficiency wire protocol: one JSON request on stdin, one JSON line out.
    /// Operations: route, lineage, capsule, telemetry, rollout, result-policy, vault-delta,
    /// dispatch; stateless unless --journal. See docs/compat.md.
    Ce {
        /// The operation (with --journal also `release`).
        operation: Option<String>,
        /// Decide against this journal's dispatch ledger (writers, leases, lineages, vault
        /// deltas) and record the decision there (`--dir DIR` on the command line does the
        /// same; without either, stateless). A journal directory or a workspace root; a
        /// missing or empty directory gets a new journal with the first decision that records
        /// something (a rejected request creates nothing).
        #[arg(long, value_parser = crate::cli::path_arg)]
        journal: Option<PathBuf>,
        /// On a rejection, also print which field and rule on stderr (may quote input).
        #[arg(long)]
        explain: bool,
    },
    /// The paired evaluation corpus, measurement envelopes and promotion gates.
    #[command(subcommand)]
    Eval(eval::EvalCommand),
    /// Hooks a worker's runtime runs: `strata hook claude|codex pre-tool-use` denies writes
    /// outside the lineage's owned files (exit 2) and records every decision.
    #[command(subcommand)]
    Hook(hook::HookCommand),
    /// Internal: runs COMMAND confined by Landlock, writable only under each --write (how
    /// `strata run`'s checks start without forking the coordinator).
    #[command(hide = true)]
    Confine {
        /// A directory the command may write under.
        #[arg(long = "write")]
        write: Vec<PathBuf>,
        /// Answer that this executable confines, and exit.
        #[arg(long)]
        probe: bool,
        /// The program and its arguments, after `--`.
        #[arg(last = true)]
        command: Vec<String>,
    },
    /// Own files for a person's own Claude Code or Codex session (`--for SESSION`, or
    /// `--interactive` for every one): recorded in the same ownership map as `strata run`'s
    /// workers, which the write guard checks. Without paths: list who owns what.
    Claim(claim::ClaimArgs),
    /// Give back files `strata claim` took (`--for SESSION` or `--interactive`: all of them).
    Release(claim::ReleaseArgs),
    /// Run a workgroup's plan: route, assemble, claim, dispatch, collect and release every
    /// task, on the workspace's journal (`--resume WG` after a crash; `--example` for the
    /// bundled example with the simulated provider).
    Run(run::RunArgs),
    /// Deterministic simulation: a scenario (the journal through crashes, an ownership storm,
    /// canary rollouts of a routing policy) with a seed, its invariants checked after every
    /// step; `--report out.html` for the HTML report.
    Simulate(strata_simulations::cli::RunArgs),
    /// Every workgroup in the journal: its state, tasks by status, integration branch and last
    /// activity.
    Workgroups,
    /// The git worktrees runs made, under `.strata/worktrees/<workgroup>/`: workgroup, task,
    /// attempt, path and whether a live workgroup owns it; `prune` removes the left-overs.
    Worktrees {
        #[command(subcommand)]
        command: Option<worktrees::WorktreesCommand>,
    },
    /// Print a shell completion script: `strata completions bash > /etc/bash_completion.d/strata`.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page strata(1) in roff (`strata man | man -l -`), or with --out write it
    /// and one page per subcommand into a directory.
    Man {
        /// Directory to write `strata.1`, `strata-run.1`, … into.
        #[arg(value_parser = crate::cli::path_arg, long)]
        out: Option<PathBuf>,
    },
    /// Rollouts of a candidate routing policy: start, status, advance, hold, rollback, route.
    Rollout {
        /// The journal holding the rollouts (a journal directory or a workspace root; default
        /// the workspace `--dir`, which names the same thing: `--journal` is kept for old
        /// command lines).
        #[arg(long, value_parser = crate::cli::path_arg)]
        journal: Option<PathBuf>,
        #[command(subcommand)]
        command: rollout::RolloutCommand,
    },
}

impl Command {
    /// Whether a running daemon should run this command (it touches the workspace's journal).
    fn forwardable(&self) -> bool {
        !matches!(
            self,
            Command::Init { .. }
                | Command::Demo { .. }
                | Command::Run(_)
                | Command::Simulate(_)
                | Command::Keygen { .. }
                | Command::Fixture { .. }
                | Command::Context(_)
                | Command::Serve { .. }
                | Command::Mcp
                | Command::Ce { .. }
                | Command::Eval(_)
                | Command::Rollout { .. }
                | Command::Completions { .. }
                | Command::Man { .. }
                | Command::Confine { .. }
                | Command::Knowledge(knowledge::KnowledgeCommand::Example { .. })
        )
    }
}

/// Runs the CLI and maps the outcome to an exit code.
pub fn main() -> ExitCode {
    // What this process prints before (and besides) a command's own workspace.
    let o = crate::output::Out::process();
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    // A check's confinement starts before anything else is built.
    if let Some(code) = crate::coordinator::verify::confine_from_args(&args) {
        return code;
    }
    let args = dir_as_journal_for_hooks(args);
    let mut cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        // A hook answers bad arguments (and `--help`) with a denial, never clap's exit codes.
        Err(e) if hook::named(&args) => return hook::refuse_arguments(&e),
        Err(e) if e.use_stderr() && failure::wants_json(&args) => {
            outln!(o, "{}", failure::Failure::usage(&e).to_json());
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
        Err(e) => e.exit(),
    };
    cli.dir_given = dir_on_command_line(&args);
    // A hook runs as its own process within its deadline: it goes to the owner of the journal
    // it names (`strata serve`, or `strata run` while real workers run) or opens it itself.
    if let Command::Hook(h) = cli.command {
        return hook::main(h, cli.dir);
    }
    if let Command::Confine { write, probe, command } = cli.command {
        return crate::coordinator::verify::confine_main(&write, probe, &command);
    }
    init_logging(cli.verbose, cli.quiet);
    // A journaled `strata ce` goes to the daemon holding that journal, with its request.
    if let Command::Ce { journal, operation, explain } = &cli.command
        && let Some(named) = journal.clone().or_else(|| cli.dir_given.then(|| cli.dir.clone()).flatten())
        && let Some(root) = ce_workspace(&named)
        && let Some(stream) = crate::daemon::connect(&Workspace::at(&root))
    {
        tracing::info!("forwarding the ce request to the daemon serving {}", root.display());
        let json = cli.json;
        let bytes = match crate::output::stdin_bytes(strata_engine::ce::REQUEST_BYTES_MAX as u64) {
            Ok(b) => b,
            Err(e) => {
                failure::report(&o, &anyhow::anyhow!("[STRATA-E1508] stdin cannot be read: {e}"), json);
                return ExitCode::from(1);
            }
        };
        // Too long or not UTF-8: refused here as it would be there.
        let Ok(text) = String::from_utf8(bytes.clone())
            .map_err(drop)
            .and_then(|t| if t.len() > strata_engine::ce::REQUEST_BYTES_MAX { Err(()) } else { Ok(t) })
        else {
            return ce::run_served_refusal(&o, operation.as_deref(), &bytes, *explain);
        };
        return match forward(stream, &root, Some(text)) {
            Ok(code) => ExitCode::from(code),
            Err(e) => {
                failure::report(&o, &e, json);
                ExitCode::from(1)
            }
        };
    }
    let cwd = std::env::current_dir().ok();
    let dir = locate::workspace_root(
        cli.dir.as_deref(),
        cwd.as_deref(),
        matches!(cli.command, Command::Init { claude: false, codex: false, .. }),
    );
    tracing::info!(workspace = %dir.display(), "workspace");
    cli.dir = Some(dir.clone());
    if cli.command.forwardable()
        && let Some(stream) = crate::daemon::connect(&Workspace::at(&dir))
    {
        tracing::info!("forwarding to the daemon serving this workspace");
        // The one journal command that reads stdin sends it along.
        let stdin = match &cli.command {
            Command::Telemetry(telemetry::TelemetryCommand::Record) => {
                match crate::output::stdin_bytes(crate::daemon::STDIN_BYTES_MAX) {
                    // Over the limit or not UTF-8: sent as such, refused there.
                    Ok(b) => Some(String::from_utf8(b).unwrap_or_default()),
                    Err(e) => {
                        let e = anyhow::anyhow!("[STRATA-E1508] stdin cannot be read: {e}");
                        failure::report(&o, &e, cli.json);
                        return ExitCode::from(1);
                    }
                }
            }
            _ => None,
        };
        return match forward(stream, &dir, stdin) {
            Ok(code) => ExitCode::from(code),
            Err(e) => {
                failure::report(&o, &e, cli.json);
                ExitCode::from(1)
            }
        };
    }
    let ws = Workspace::at(&dir);
    let json = cli.json;
    let paint = crate::style::Paint::for_process(cli.color);
    match run(cli, ws, paint) {
        Ok(code) => code,
        Err(e) => {
            failure::report(&o, &e, json);
            ExitCode::from(1)
        }
    }
}

/// Whether `args` name `--dir` on the command line (a value from `STRATA_DIR` does not count).
fn dir_on_command_line(args: &[std::ffi::OsString]) -> bool {
    use clap::CommandFactory as _;
    Cli::command()
        .try_get_matches_from(args)
        .is_ok_and(|m| m.value_source("dir") == Some(clap::parser::ValueSource::CommandLine))
}

/// One name for the workspace everywhere: a hook call that names it `--dir DIR` (anywhere on
/// the line) and has no `--journal` gets `--journal DIR`, the hook's own name for it, which the
/// hook commands strata writes for its workers keep passing.
fn dir_as_journal_for_hooks(mut args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let journal = |a: &std::ffi::OsString| a == "--journal" || a.to_str().is_some_and(|s| s.starts_with("--journal="));
    if !hook::named(&args) || args.iter().any(journal) {
        return args;
    }
    let Some(at) = args.iter().position(|a| a == "--dir" || a.to_str().is_some_and(|s| s.starts_with("--dir="))) else {
        return args;
    };
    let flag = args.remove(at);
    let value = match flag.to_str().and_then(|s| s.strip_prefix("--dir=")) {
        Some(v) => v.into(),
        None if at < args.len() => args.remove(at),
        None => return args,
    };
    args.push("--journal".into());
    args.push(value);
    args
}

/// Logs to stderr through `tracing`: warnings by default, `-v` info, `-vv` debug, `-vvv`
/// trace, `-q` errors only; `RUST_LOG`, when set, is the filter instead. Nothing is coloured.
fn init_logging(verbose: u8, quiet: bool) {
    use tracing_subscriber::EnvFilter;
    let level = match (quiet, verbose) {
        (true, _) => "error",
        (false, 0) => "warn",
        (false, 1) => "info",
        (false, 2) => "debug",
        _ => "trace",
    };
    let filter = match std::env::var("RUST_LOG") {
        Ok(v) if !v.trim().is_empty() => EnvFilter::try_new(&v).unwrap_or_else(|e| {
            errln!(crate::output::Out::process(), "warning: RUST_LOG={v:?} is not a filter ({e}); logging at {level}");
            EnvFilter::new(level)
        }),
        _ => EnvFilter::new(level),
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_target(true)
        .try_init();
}

/// Parses `--http`: `HOST:PORT` where HOST is an IP address or `localhost` (which means
/// 127.0.0.1); whether it is a loopback address is checked when the daemon starts.
fn http_addr(s: &str) -> Result<std::net::SocketAddr, String> {
    if let Some(port) = s.strip_prefix("localhost:") {
        let port: u16 = port.parse().map_err(|_| format!("{port:?} is not a port (0 to 65535)"))?;
        return Ok(std::net::SocketAddr::from(([127, 0, 0, 1], port)));
    }
    s.parse().map_err(|_| format!("{s:?} is not HOST:PORT with HOST an IP address or localhost (e.g. localhost:7411)"))
}

/// The workspace whose journal `named` (a `ce --journal` directory) is: a workspace root, or its
/// `.strata/journal` directory; none for a bare journal directory no daemon serves.
fn ce_workspace(named: &std::path::Path) -> Option<PathBuf> {
    if named.join(".strata/journal").is_dir() {
        return Some(named.to_path_buf());
    }
    let parent = named.parent()?;
    (named.file_name()? == "journal" && parent.file_name()? == ".strata").then(|| parent.parent().map(PathBuf::from))?
}

/// Whether `a` and `b` are the same directory.
fn same_dir(a: &std::path::Path, b: &std::path::Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

fn forward(stream: std::os::unix::net::UnixStream, dir: &std::path::Path, stdin: Option<String>) -> anyhow::Result<u8> {
    let argv = std::env::args_os()
        .map(|a| {
            a.into_string().map_err(|a| {
                anyhow::anyhow!("[STRATA-E1108] argument {a:?} is not UTF-8; the daemon takes UTF-8 arguments only")
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let dir = std::fs::canonicalize(dir).map_err(|e| anyhow::anyhow!("cannot resolve --dir {}: {e}", dir.display()))?;
    crate::daemon::forward_cli(stream, argv, &dir, stdin)
}

/// Runs a command the daemon received from a client (output already captured by the caller) on
/// `ws`, the daemon's view of the client's workspace; returns the exit code. Path arguments
/// resolve against the client's working directory.
pub(crate) fn run_served(argv: Vec<String>, ws: crate::app::workspace::Workspace) -> u8 {
    use clap::{CommandFactory as _, FromArgMatches as _};
    let base = ws.cwd().map(std::path::Path::to_path_buf).unwrap_or_default();
    let argv_copy = argv.clone();
    let parsed =
        resolving_paths(Cli::command(), &base).try_get_matches_from(argv).and_then(|m| Cli::from_arg_matches(&m));
    let mut cli = match parsed {
        Ok(c) => c,
        Err(e) if e.use_stderr() && failure::wants_json(&argv_copy) => {
            outln!(ws, "{}", failure::Failure::usage(&e).to_json());
            return u8::try_from(e.exit_code()).unwrap_or(2);
        }
        Err(e) => {
            let text = e.render().to_string();
            if e.use_stderr() {
                err!(ws, "{text}");
            } else {
                out!(ws, "{text}");
            }
            return u8::try_from(e.exit_code()).unwrap_or(2);
        }
    };
    if !cli.command.forwardable() && !matches!(cli.command, Command::Ce { .. }) {
        let e = anyhow::anyhow!("[STRATA-E1109] the daemon does not run this command; run it with the daemon stopped");
        failure::report(ws.out(), &e, cli.json);
        return 1;
    }
    cli.dir = Some(ws.root().to_path_buf());
    let json = cli.json;
    let o = ws.out().clone();
    // The output goes back over a socket: colour only when asked for outright.
    let paint = crate::style::Paint::decide(cli.color, true, false);
    match run(cli, ws, paint) {
        Ok(code) => (0..=EXIT_PROBLEMS).find(|n| ExitCode::from(*n) == code).unwrap_or(1),
        Err(e) => {
            failure::report(&o, &e, json);
            1
        }
    }
}

/// `cmd` with every path-valued argument, in every subcommand, resolved against `base`.
fn resolving_paths(cmd: clap::Command, base: &std::path::Path) -> clap::Command {
    let is_path = |a: &clap::Arg| a.get_value_parser().type_id() == std::any::TypeId::of::<PathBuf>();
    let owned = base.to_path_buf();
    cmd.mut_args(move |a| {
        if !is_path(&a) {
            return a;
        }
        let base = owned.clone();
        a.value_parser(move |s: &str| path_arg(s).map(|p| base.join(p)))
    })
    .mut_subcommands(|sub| resolving_paths(sub, base))
}

/// Exit code for "an integrity check found problems".
pub const EXIT_PROBLEMS: u8 = 3;

fn run(cli: Cli, ws: Workspace, paint: crate::style::Paint) -> anyhow::Result<ExitCode> {
    let dir = ws.root().to_path_buf();
    tracing::debug!(command = ?cli.command, "running");
    match cli.command {
        Command::Init { durability, origin, backend, url, schema, claude, codex, print } => {
            let agents = [(claude, agents::Runtime::Claude), (codex, agents::Runtime::Codex)];
            if !(claude || codex) {
                return init_workspace(&ws, &durability, origin, &backend, url, &schema, Some(cli.json));
            }
            // `init --claude` in a repository without `.strata/` makes the workspace first.
            let created = !print && !ws.strata_dir().is_dir();
            if created {
                init_workspace(&ws, &durability, origin, &backend, url, &schema, None)?;
            }
            agents::init(&ws, &agents, print, created, cli.json)
        }
        Command::Demo { at } => demo::run(&at, cli.json),
        Command::Run(args) => run::run(ws.out(), &dir, args, cli.json, paint),
        Command::Simulate(args) => simulate::run(args, cli.json),
        Command::Keygen { name, out } => keygen(ws.out(), &name, &out, cli.json),
        Command::Replay { check, save_snapshots } => replay::run(&ws, check, save_snapshots, cli.json),
        Command::Journal(cmd) => journal::run(&ws, cmd, cli.json),
        Command::Intake { paths, dry_run } => kb::intake(&ws, &paths, dry_run, cli.json),
        Command::Fixture { seed, out, plant } => kb::fixture(ws.out(), seed, &out, &plant, cli.json),
        Command::Discover { text, at, limit, kind } => discover::run(&ws, &text, at, limit, &kind, cli.json),
        Command::Artifact(cmd) => kb::artifact(&ws, cmd, cli.json),
        Command::Graph(cmd) => kb::graph(&ws, cmd, cli.json),
        Command::Summary(cmd) => context::summary_cmd(&ws, cmd, cli.json),
        Command::Profile(cmd) => context::profile_cmd(&ws, cmd, cli.json),
        Command::Prompt(cmd) => context::prompt_cmd(&ws, cmd, cli.json),
        Command::Audit(cmd) => context::audit_cmd(&ws, cmd, cli.json, paint),
        Command::Context(cmd) => context::context_cmd(ws.out(), cmd, cli.json),
        Command::Knowledge(cmd) => knowledge::run(&ws, cmd, cli.json),
        Command::Telemetry(cmd) => telemetry::run(&ws, cmd, cli.json),
        Command::Serve { http } => crate::daemon::serve(&ws, &crate::daemon::ServeOptions { http }, cli.json),
        Command::Mcp => mcp_stdio(&ws),
        Command::Ce { operation, journal, explain } => {
            let journal = journal.or_else(|| cli.dir_given.then(|| dir.clone()));
            match (ws.served_journal(), journal.as_deref().and_then(ce_workspace)) {
                // Forwarded by a client: the request came with it, the journal is the daemon's.
                (Some(served), Some(root)) if same_dir(&root, ws.root()) => {
                    let input = ws.stdin_bytes(strata_engine::ce::REQUEST_BYTES_MAX as u64)?;
                    Ok(ce::run_served(ws.out(), operation.as_deref(), served, &input, explain))
                }
                (Some(_), _) => anyhow::bail!(
                    "[STRATA-E1109] the daemon runs `strata ce` only against the journal it holds; run it with --journal naming this workspace"
                ),
                (None, _) => Ok(ce::run(ws.out(), operation.as_deref(), journal.as_deref(), explain)),
            }
        }
        // `--dir` names the journal `eval promote` records in when it names a workspace; a
        // directory that holds none leaves it a trial run, which records and trusts nothing.
        Command::Eval(cmd) => {
            let workspace = cli.dir_given && ws.config_path().is_file();
            eval::run(ws.out(), cmd, &dir, workspace.then(|| dir.clone()), cli.json)
        }
        Command::Confine { .. } => anyhow::bail!("[STRATA-E2118] `strata confine` runs only as its own process"),
        Command::Hook(cmd) => Ok(match ws.served_journal() {
            Some(j) => hook::served(cmd, j, &ws),
            None => hook::main(cmd, Some(dir.clone())),
        }),
        Command::Rollout { journal, command } => {
            rollout::run(ws.out(), &rollout::journal_dir(journal, &dir), command, cli.json)
        }
        Command::Workgroups => workgroups::run(&ws, cli.json, paint),
        Command::Claim(args) => claim::claim(&ws, args, cli.json),
        Command::Release(args) => claim::release(&ws, args, cli.json),
        Command::Worktrees { command } => worktrees::run(&ws, command, cli.json),
        Command::Completions { shell } => shell::completions(ws.out(), shell),
        Command::Man { out } => shell::man(ws.out(), out.as_deref(), cli.json),
    }
}

/// `strata init` without --claude / --codex: `.strata/` with a config and a new journal; what
/// was made is printed unless `json` is `None`.
fn init_workspace(
    ws: &Workspace,
    durability: &str,
    origin: Option<String>,
    backend: &str,
    url: Option<String>,
    schema: &str,
    json: Option<bool>,
) -> anyhow::Result<ExitCode> {
    let durability = durability.parse().map_err(|e: String| anyhow::anyhow!("[STRATA-E0601] --durability: {e}"))?;
    let backend = match (backend, url) {
        ("sled", None) => crate::config::Backend::Sled,
        ("postgres", Some(url)) => crate::config::Backend::postgres(&url, schema, "--url")?,
        ("sled", Some(_)) => anyhow::bail!("[STRATA-E0601] --url needs --backend postgres"),
        ("postgres", None) => {
            anyhow::bail!("[STRATA-E0601] --backend postgres needs --url postgresql://user@host:port/database")
        }
        (other, _) => anyhow::bail!("[STRATA-E0601] --backend must be sled or postgres, not {other:?}"),
    };
    let config = Config { durability, backend, ..Config::default() };
    let origin = origin.unwrap_or_else(|| format!("strata.local/{}", uuid::Uuid::now_v7()));
    let (journal, created) = ws.create_or_attach_postgres(&origin, &config)?;
    if created {
        record_initialized(&journal, &config)?;
    }
    let origin = journal.origin().to_owned();
    journal.close_blocking()?;
    let head = journal.head();
    let Some(json) = json else { return Ok(ExitCode::SUCCESS) };
    if json {
        outln!(
            ws,
            "{}",
            serde_json::json!({
                "workspace": ws.root().display().to_string(),
                "origin": origin,
                "durability": config.durability.as_str(),
                "head": head.seq,
            })
        );
    } else if let crate::config::Backend::Postgres { url, schema } = &config.backend {
        let verb = if created { "created" } else { "attached to" };
        outln!(
            ws,
            "initialised {}: {verb} the shared journal {origin} in {url} (schema {schema})",
            ws.strata_dir().display()
        );
    } else {
        outln!(
            ws,
            "initialised {} (origin {origin}, durability {})",
            ws.strata_dir().display(),
            config.durability.as_str()
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn keygen(o: &crate::output::Out, name: &str, out: &std::path::Path, json: bool) -> anyhow::Result<ExitCode> {
    let key = SignerKey::from_seed(name, crate::system::random_seed()?)?;
    let pub_path = PathBuf::from(format!("{}.pub", out.display()));
    write_new_file(out, key.to_text().as_bytes(), 0o600)?;
    write_new_file(&pub_path, format!("{}\n", key.verifier().to_text()).as_bytes(), 0o644)?;
    if json {
        outln!(
            o,
            "{}",
            serde_json::json!({"name": name, "private_key_file": out.display().to_string(), "public_key_file": pub_path.display().to_string(), "public_key": key.verifier().to_text()})
        );
    } else {
        outln!(o, "wrote {} (private, mode 0600) and {}", out.display(), pub_path.display());
        outln!(o, "public key: {}", key.verifier().to_text());
    }
    Ok(ExitCode::SUCCESS)
}

fn mcp_stdio(ws: &Workspace) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    if let Some(stream) = crate::daemon::connect(ws) {
        rt.block_on(crate::daemon::proxy_mcp(stream))?;
        return Ok(ExitCode::SUCCESS);
    }
    let journal = ws.open_journal("mcp")?;
    // While it holds the journal, this process serves the workspace's socket too, as `strata
    // run` does: the write guard's hooks, `strata claim`/`release` and other commands of the
    // session reach the journal through it instead of waiting for a lock it never lets go of.
    let served = rt.block_on(async {
        let harness = crate::harness::Harness::new(journal.clone())?;
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let listening = tokio::spawn(crate::daemon::listen(ws.clone(), journal.clone(), stopped));
        let server = crate::mcp::KnowledgeServer::new(harness);
        let served = crate::mcp::serve_connection(server, tokio::io::stdin(), tokio::io::stdout()).await;
        let _ = stop.send(());
        match listening.await {
            Ok(Err(e)) => errln!(ws, "strata mcp: the workspace socket failed: {e:#}"),
            Err(e) => errln!(ws, "strata mcp: the workspace socket failed: {e}"),
            Ok(Ok(())) => {}
        }
        served
    });
    let closed = journal.close_blocking();
    served?;
    closed?;
    Ok(ExitCode::SUCCESS)
}

/// Writes `path` with mode 0600 (replacing it), via a private temporary file and a rename.
pub(crate) fn write_private_file(path: &std::path::Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let tmp = PathBuf::from(format!("{}.tmp-{}", path.display(), std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", tmp.display()))?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path).map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    Ok(())
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

/// Largest key file read (a key is one short line).
pub(crate) const KEY_FILE_BYTES_MAX: u64 = 4096;

/// Reads a key given as a file path or as the key text itself: anything at that path (a
/// dangling link included) is read as a key file, so a FIFO or a device is refused, not taken
/// for key text.
pub(crate) fn read_key_arg(ws: &Workspace, arg: &str) -> anyhow::Result<String> {
    let resolved = ws.resolve(std::path::Path::new(arg));
    if std::fs::symlink_metadata(&resolved).is_ok() {
        read_key_file(&resolved, "--pubkey")
    } else {
        Ok(arg.trim().to_owned())
    }
}

/// Reads the key file at `path` (at most [`KEY_FILE_BYTES_MAX`]); `what` names the option.
pub(crate) fn read_key_file(path: &std::path::Path, what: &str) -> anyhow::Result<String> {
    Ok(crate::files::read_text_bounded(path, KEY_FILE_BYTES_MAX, what)?.trim().to_owned())
}

/// Parses a path argument: any path but the empty one. A command the daemon runs for a client
/// resolves it against the client's working directory (see [`run_served`]).
pub(crate) fn path_arg(s: &str) -> Result<PathBuf, String> {
    if s.is_empty() {
        return Err("a path must not be empty".to_owned());
    }
    Ok(PathBuf::from(s))
}

/// A decide-and-append outcome as a command reports it: a refusal in the decision's own words
/// (`refused` adds the command's code and fix), every other failure as it is.
pub(crate) fn appended<T, E>(
    r: Result<crate::app::append::Committed<T>, crate::app::append::AppendError<E>>,
    refused: impl FnOnce(E) -> anyhow::Error,
) -> anyhow::Result<crate::app::append::Committed<T>> {
    use crate::app::append::AppendError;
    r.map_err(|e| match e {
        AppendError::Refused(e) => refused(e),
        AppendError::Journal(e) => e.into(),
        AppendError::Fold(e) => e.into(),
        AppendError::Reaction(e) => e.into(),
        AppendError::Contended { attempts } => anyhow::anyhow!(
            "other writers changed what this decision reads {attempts} times in a row; run the command again"
        ),
    })
}
