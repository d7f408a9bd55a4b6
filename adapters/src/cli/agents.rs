//! `strata init --claude` / `--codex`: the project-level configuration a person's own Claude Code
//! or Codex session needs to work under strata in this repository, written beside `.strata/` (or
//! with `--print` only shown):
//!
//! * **Claude Code**: `.claude/settings.json` gets the write guard as a PreToolUse hook on
//!   `Write|Edit|MultiEdit|NotebookEdit` (`strata hook claude pre-tool-use --journal
//!   "$CLAUDE_PROJECT_DIR"`, the runtime's hook `timeout` set above the guard's own deadline),
//!   `mcp__strata` allowed and the `.mcp.json` server `strata` enabled; `.mcp.json` names
//!   `strata mcp` as the MCP server `strata`; the skill goes to `.claude/skills/strata/`.
//! * **Codex**: `.codex/config.toml` gets `[mcp_servers.strata]` (tools approved up front) and
//!   `.codex/hooks.json` the guard on `apply_patch` (`strata hook codex pre-tool-use`, which
//!   finds the workspace from the hook's `cwd`); the skill goes to `.agents/skills/strata/`.
//!
//! The hook runs without `--lineage`: it then identifies the session by the runtime's own
//! `session_id` and allows writes only inside what `strata claim` gave that session or every
//! interactive session. The same MCP server name (`strata`) and hook form serve `strata run`'s
//! workers (`providers::worker_process`).
//!
//! Existing files are merged, never replaced: every key of the user's is kept (JSON objects come
//! back with their keys sorted; TOML keeps its comments and layout through `toml_edit`), strata's
//! own earlier entries are replaced by the current ones, so running it again changes nothing. A
//! file that is not valid JSON or TOML, or whose keys strata writes hold something of another
//! shape, is refused before anything is written. The skill is installed self-contained: the
//! schemas and the error-code table it points at are copied into its `assets/`.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use crate::providers::worker_process::{HOOK_TIMEOUT_S, KNOWLEDGE_SERVER};

/// The strata executable the configuration runs (found on `PATH`, so the files can be committed).
pub const PROGRAM: &str = "strata";

/// Claude Code's guard command: the workspace is the project directory Claude Code names.
pub fn claude_hook_command() -> String {
    format!("{PROGRAM} hook claude pre-tool-use --journal \"$CLAUDE_PROJECT_DIR\" || exit 2")
}

/// Codex's guard command: the workspace is found upward from the hook input's `cwd`.
pub fn codex_hook_command() -> String {
    format!("{PROGRAM} hook codex pre-tool-use || exit 2")
}

/// What marks a hook handler as strata's guard (replaced, not duplicated, on a rerun).
fn is_strata_guard(handler: &Value, runtime: &str) -> bool {
    handler.get("command").and_then(Value::as_str).is_some_and(|c| c.contains(&format!("hook {runtime} pre-tool-use")))
}

/// The skill as shipped: (path inside the skill folder, contents).
pub const SKILL_FILES: [(&str, &str); 12] = [
    ("SKILL.md", include_str!("../../../skills/strata/SKILL.md")),
    ("references/claude.md", include_str!("../../../skills/strata/references/claude.md")),
    ("references/codex.md", include_str!("../../../skills/strata/references/codex.md")),
    ("references/quality.md", include_str!("../../../skills/strata/references/quality.md")),
    ("references/relay.md", include_str!("../../../skills/strata/references/relay.md")),
    ("references/roles.md", include_str!("../../../skills/strata/references/roles.md")),
    ("references/schemas.md", include_str!("../../../skills/strata/references/schemas.md")),
    ("assets/compat.md", include_str!("../../../docs/compat.md")),
    ("assets/schemas/agent-lineage.schema.json", include_str!("../../../schemas/agent-lineage.schema.json")),
    ("assets/schemas/context-capsule.schema.json", include_str!("../../../schemas/context-capsule.schema.json")),
    ("assets/schemas/efficiency-event.schema.json", include_str!("../../../schemas/efficiency-event.schema.json")),
    ("assets/schemas/routing-facts.schema.json", include_str!("../../../schemas/routing-facts.schema.json")),
];

/// Which runtime to configure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runtime {
    /// Claude Code.
    Claude,
    /// Codex.
    Codex,
}

/// Why the configuration was not written.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// An existing file does not parse.
    #[error(
        "[STRATA-E2610] {path} is not valid {format} ({detail}); strata merges into it and will not overwrite it: fix it, or move it away and run the command again"
    )]
    Unparsable {
        /// The file.
        path: String,
        /// JSON or TOML.
        format: &'static str,
        /// The parser's words.
        detail: String,
    },
    /// An existing file holds something of another shape where strata writes.
    #[error(
        "[STRATA-E2611] {path}: `{key}` is {found}, where strata writes {wants}; fix that key (or move the file away) and run the command again"
    )]
    Shape {
        /// The file.
        path: String,
        /// The key.
        key: String,
        /// What it holds.
        found: &'static str,
        /// What strata needs there.
        wants: &'static str,
    },
    /// A file could not be read or written.
    #[error("[STRATA-E2612] {path}: {detail}; nothing after it was written")]
    Io {
        /// The file.
        path: String,
        /// The error.
        detail: String,
    },
}

/// One file of the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    /// Relative to the workspace root.
    pub path: PathBuf,
    /// The contents after the merge.
    pub contents: String,
    /// Whether that differs from what is there now.
    pub changed: bool,
}

/// Every file `runtime` needs under `root`, merged with what is there; nothing is written.
pub fn plan(root: &Path, runtime: Runtime) -> Result<Vec<Planned>, SetupError> {
    let mut out = Vec::new();
    let skills = match runtime {
        Runtime::Claude => {
            out.push(merged_json(root, ".claude/settings.json", claude_settings)?);
            out.push(merged_json(root, ".mcp.json", mcp_json)?);
            ".claude/skills/strata"
        }
        Runtime::Codex => {
            out.push(merged_toml(root, ".codex/config.toml")?);
            out.push(merged_json(root, ".codex/hooks.json", codex_hooks)?);
            ".agents/skills/strata"
        }
    };
    for (rel, text) in SKILL_FILES {
        let path = Path::new(skills).join(rel);
        let now = read(root, &path)?;
        out.push(Planned { changed: now.as_deref() != Some(text), path, contents: text.to_owned() });
    }
    Ok(out)
}

/// Writes the files of `plan` that changed (directories created as needed).
pub fn write(root: &Path, plan: &[Planned]) -> Result<(), SetupError> {
    for p in plan.iter().filter(|p| p.changed) {
        let full = root.join(&p.path);
        let io = |e: std::io::Error| SetupError::Io { path: p.path.display().to_string(), detail: e.to_string() };
        if let Some(dir) = full.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        // Through a temporary file and a rename: a reader never sees half a settings file.
        let tmp = full.with_extension(format!("strata-tmp-{}", std::process::id()));
        std::fs::write(&tmp, p.contents.as_bytes()).map_err(io)?;
        std::fs::rename(&tmp, &full).map_err(io)?;
    }
    Ok(())
}

/// Largest existing configuration file read.
const CONFIG_FILE_BYTES_MAX: u64 = 4 * 1024 * 1024;

fn read(root: &Path, rel: &Path) -> Result<Option<String>, SetupError> {
    let full = root.join(rel);
    if std::fs::symlink_metadata(&full).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound) {
        return Ok(None);
    }
    crate::files::read_text_bounded(&full, CONFIG_FILE_BYTES_MAX, "a configuration file")
        .map(Some)
        .map_err(|e| SetupError::Io { path: rel.display().to_string(), detail: format!("{e:#}") })
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A JSON file at `rel` with `merge` applied to its top-level object (an empty one when absent).
fn merged_json(
    root: &Path,
    rel: &str,
    merge: fn(&mut Map<String, Value>, &Shape<'_>) -> Result<(), SetupError>,
) -> Result<Planned, SetupError> {
    let now = read(root, Path::new(rel))?;
    let mut top = match now.as_deref().filter(|t| !t.trim().is_empty()) {
        None => Map::new(),
        Some(text) => match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(m)) => m,
            Ok(other) => {
                return Err(SetupError::Shape {
                    path: rel.to_owned(),
                    key: "(top level)".to_owned(),
                    found: kind(&other),
                    wants: "an object",
                });
            }
            Err(e) => {
                return Err(SetupError::Unparsable { path: rel.to_owned(), format: "JSON", detail: e.to_string() });
            }
        },
    };
    merge(&mut top, &Shape { path: rel })?;
    let contents = format!("{}\n", serde_json::to_string_pretty(&Value::Object(top)).unwrap_or_default());
    Ok(Planned { path: PathBuf::from(rel), changed: now.as_deref() != Some(contents.as_str()), contents })
}

/// Shape checks for one file.
struct Shape<'a> {
    path: &'a str,
}

impl Shape<'_> {
    fn object<'m>(
        &self,
        m: &'m mut Map<String, Value>,
        key: &str,
        at: &str,
    ) -> Result<&'m mut Map<String, Value>, SetupError> {
        let v = m.entry(key.to_owned()).or_insert_with(|| json!({}));
        let found = kind(v);
        v.as_object_mut().ok_or_else(|| SetupError::Shape {
            path: self.path.to_owned(),
            key: at.to_owned(),
            found,
            wants: "an object",
        })
    }

    fn array<'m>(&self, m: &'m mut Map<String, Value>, key: &str, at: &str) -> Result<&'m mut Vec<Value>, SetupError> {
        let v = m.entry(key.to_owned()).or_insert_with(|| json!([]));
        let found = kind(v);
        v.as_array_mut().ok_or_else(|| SetupError::Shape {
            path: self.path.to_owned(),
            key: at.to_owned(),
            found,
            wants: "an array",
        })
    }
}

/// Adds `item` to the array `key` unless it is there.
fn add_once(shape: &Shape<'_>, m: &mut Map<String, Value>, key: &str, at: &str, item: &str) -> Result<(), SetupError> {
    let a = shape.array(m, key, at)?;
    if !a.iter().any(|v| v.as_str() == Some(item)) {
        a.push(Value::String(item.to_owned()));
    }
    Ok(())
}

/// `hooks.PreToolUse` with strata's guard for `runtime` as the last matcher group, and every
/// earlier strata guard handler taken out (groups left empty go too).
fn guard_hook(
    shape: &Shape<'_>,
    top: &mut Map<String, Value>,
    runtime: &str,
    matcher: &str,
    command: String,
) -> Result<(), SetupError> {
    let hooks = shape.object(top, "hooks", "hooks")?;
    let groups = shape.array(hooks, "PreToolUse", "hooks.PreToolUse")?;
    for g in groups.iter_mut() {
        if let Some(handlers) = g.get_mut("hooks").and_then(Value::as_array_mut) {
            handlers.retain(|h| !is_strata_guard(h, runtime));
        }
    }
    groups.retain(|g| g.get("hooks").and_then(Value::as_array).is_none_or(|h| !h.is_empty()));
    groups.push(
        json!({"matcher": matcher, "hooks": [{"type": "command", "command": command, "timeout": HOOK_TIMEOUT_S}]}),
    );
    Ok(())
}

fn claude_settings(top: &mut Map<String, Value>, shape: &Shape<'_>) -> Result<(), SetupError> {
    guard_hook(shape, top, "claude", crate::providers::claude_worker::GUARDED_TOOLS, claude_hook_command())?;
    let permissions = shape.object(top, "permissions", "permissions")?;
    add_once(shape, permissions, "allow", "permissions.allow", &format!("mcp__{KNOWLEDGE_SERVER}"))?;
    add_once(shape, top, "enabledMcpjsonServers", "enabledMcpjsonServers", KNOWLEDGE_SERVER)
}

fn mcp_json(top: &mut Map<String, Value>, shape: &Shape<'_>) -> Result<(), SetupError> {
    let servers = shape.object(top, "mcpServers", "mcpServers")?;
    servers.insert(KNOWLEDGE_SERVER.to_owned(), json!({"type": "stdio", "command": PROGRAM, "args": ["mcp"]}));
    Ok(())
}

fn codex_hooks(top: &mut Map<String, Value>, shape: &Shape<'_>) -> Result<(), SetupError> {
    guard_hook(shape, top, "codex", crate::providers::codex_worker::GUARDED_TOOL, codex_hook_command())
}

/// `.codex/config.toml` with `[mcp_servers.strata]` set, everything else as it was.
fn merged_toml(root: &Path, rel: &str) -> Result<Planned, SetupError> {
    use toml_edit::{Array, DocumentMut, Item, Table, value};
    let now = read(root, Path::new(rel))?;
    let mut doc: DocumentMut = now.as_deref().unwrap_or_default().parse().map_err(|e: toml_edit::TomlError| {
        SetupError::Unparsable { path: rel.to_owned(), format: "TOML", detail: e.message().to_owned() }
    })?;
    let shape = |key: &str, item: &Item| SetupError::Shape {
        path: rel.to_owned(),
        key: key.to_owned(),
        found: item.type_name(),
        wants: "a table",
    };
    let servers = doc.entry("mcp_servers").or_insert_with(|| {
        let mut t = Table::new();
        t.set_implicit(true);
        Item::Table(t)
    });
    let found = servers.clone();
    let servers = servers.as_table_like_mut().ok_or_else(|| shape("mcp_servers", &found))?;
    let mut server = Table::new();
    server["command"] = value(PROGRAM);
    let mut args = Array::new();
    args.push("mcp");
    server["args"] = value(args);
    // `codex exec` (and a person who has not approved them) runs MCP tools only when approved.
    server["default_tools_approval_mode"] = value("approve");
    servers.insert(KNOWLEDGE_SERVER, Item::Table(server));
    let contents = doc.to_string();
    Ok(Planned { path: PathBuf::from(rel), changed: now.as_deref() != Some(contents.as_str()), contents })
}

/// `strata init --claude` / `--codex` (`runtimes`: which were asked for): plans every file, then
/// writes the changed ones (or with `print` shows them all). `created`: `.strata/` was made just
/// before.
pub fn init(
    ws: &crate::app::workspace::Workspace,
    runtimes: &[(bool, Runtime)],
    print: bool,
    created: bool,
    json: bool,
) -> anyhow::Result<std::process::ExitCode> {
    let root = ws.root();
    let mut planned = Vec::new();
    for (asked, r) in runtimes {
        if *asked {
            planned.extend(plan(root, *r)?);
        }
    }
    if !print {
        write(root, &planned)?;
    }
    if json {
        let files: Vec<Value> = planned
            .iter()
            .map(|p| {
                let mut f = json!({"path": p.path.display().to_string(), "changed": p.changed});
                if print {
                    f["contents"] = Value::String(p.contents.clone());
                }
                f
            })
            .collect();
        outln!(ws, "{}", json!({"ok": true, "written": !print, "workspace_created": created, "files": files}));
        return Ok(std::process::ExitCode::SUCCESS);
    }
    if print {
        for p in
            planned.iter().filter(|p| !p.path.starts_with(".claude/skills") && !p.path.starts_with(".agents/skills"))
        {
            outln!(ws, "# {}{}", p.path.display(), if p.changed { "" } else { " (unchanged)" });
            out!(ws, "{}", p.contents);
            if !p.contents.ends_with('\n') {
                outln!(ws);
            }
        }
        let skill: Vec<&Planned> = planned
            .iter()
            .filter(|p| p.path.starts_with(".claude/skills") || p.path.starts_with(".agents/skills"))
            .collect();
        outln!(ws, "# and the skill: {}", crate::plural::count(skill.len() as u64, "file", "files"));
        for p in skill {
            outln!(ws, "#   {}", p.path.display());
        }
        outln!(ws, "(nothing written: --print)");
        return Ok(std::process::ExitCode::SUCCESS);
    }
    if created {
        outln!(ws, "initialised {}", ws.strata_dir().display());
    }
    let changed = planned.iter().filter(|p| p.changed).count();
    for p in planned.iter().filter(|p| p.changed && !p.path.to_string_lossy().contains("/skills/")) {
        outln!(ws, "wrote {}", p.path.display());
    }
    let skill_changed = planned.iter().filter(|p| p.changed && p.path.to_string_lossy().contains("/skills/")).count();
    if skill_changed > 0 {
        outln!(ws, "installed the skill ({})", crate::plural::count(skill_changed as u64, "file", "files"));
    }
    if changed == 0 {
        outln!(ws, "already configured; nothing changed");
    }
    outln!(
        ws,
        "next: `strata claim PATHS` gives your sessions the files they may write (`strata claim` lists who owns what)"
    );
    Ok(std::process::ExitCode::SUCCESS)
}
