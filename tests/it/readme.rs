//! README's onboarding runs as written: the shell block of "Use it on your repository" is
//! extracted and run, line by line as one `sh -e` script, in a fresh git repository with the
//! binary under test as `strata`; the install line names the package that builds `strata`.
//! A README edit that breaks a command fails here.

use std::path::{Path, PathBuf};

use strata_tests::{init_repo, strata_bin};

fn source_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace").to_owned()
}

/// The first ```sh block after the heading `heading`.
fn shell_block(readme: &str, heading: &str) -> String {
    let at = readme.find(heading).unwrap_or_else(|| panic!("README has {heading:?}"));
    let rest = &readme[at..];
    let open = rest.find("```sh\n").expect("a shell block") + "```sh\n".len();
    let close = rest[open..].find("```").expect("its end");
    rest[open..open + close].to_owned()
}

#[test]
fn the_onboarding_commands_run_on_a_fresh_repository() {
    let readme = std::fs::read_to_string(source_root().join("README.md")).expect("README");
    let install = shell_block(&readme, "## Install");
    assert!(install.starts_with("cargo install --path adapters"), "{install}");
    let manifest = std::fs::read_to_string(source_root().join("adapters/Cargo.toml")).expect("manifest");
    assert!(manifest.contains("[[bin]]\nname = \"strata\""), "the install line installs `strata`");
    let setup = shell_block(&readme, "## Set up");
    assert!(setup.contains("cargo run --release -- run --example") && setup.contains("cargo test --workspace"));

    let block = shell_block(&readme, "## Use it on your repository");
    let commands: Vec<&str> = block.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!((4..=8).contains(&commands.len()), "about five commands: {commands:?}");
    let tmp = tempfile::tempdir().expect("tempdir");
    let repo = tmp.path().join("my-repo");
    init_repo(&repo, &[("AGENTS.md", "# Guide\n\n## Testing\n\nRun the tests.\n\n## Style\n\nKeep it short.\n")]);
    let script = format!("set -e\nstrata() {{ \"$STRATA_TEST_BIN\" \"$@\"; }}\n{block}");
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(&script)
        .current_dir(&repo)
        .env("STRATA_TEST_BIN", strata_bin!())
        .env("STRATA_SRC", source_root())
        .env_remove("STRATA_DIR")
        .output()
        .expect("sh runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "the onboarding block failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("imported from 1 steering file"), "{stdout}");
    assert!(stdout.contains("workgroup first-plan"), "the audit ran: {stdout}");
    let branch = strata_tests::git(&repo, &["ls-tree", "-r", "--name-only", "strata/first-plan"]);
    assert!(branch.lines().any(|l| l == "docs/notes.md"), "the writer's file is integrated: {branch}");
    assert!(!branch.contains(".strata"), "{branch}");
}

#[test]
fn a_markdown_example_of_every_kind_has_its_json_twins_fields_and_takes_in_cleanly() {
    let dir = source_root().join("schemas/examples");
    let mut files = Vec::new();
    for kind in strata_engine::kb::kind::ArtifactKind::ALL {
        let md = dir.join(format!("{}.md", kind.name()));
        let text = std::fs::read_to_string(&md).unwrap_or_else(|e| panic!("{}: {e}", md.display()));
        let (fields, body) = strata_engine::kb::frontmatter::split(&text).expect("front matter");
        let twin: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join(format!("{}.valid.json", kind.name()))).expect("json"),
        )
        .expect("json");
        assert_eq!(serde_json::Value::Object(fields), twin, "{kind}: the Markdown example says what the JSON one does");
        assert!(!body.trim().is_empty(), "{kind}: a body");
        files.push(md.display().to_string());
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    strata_tests::strata_ok(strata_bin!(), tmp.path(), &["init", "--durability", "process"]);
    let mut args = vec!["--json", "intake"];
    args.extend(files.iter().map(String::as_str));
    let out: serde_json::Value =
        serde_json::from_str(&strata_tests::strata_ok(strata_bin!(), tmp.path(), &args)).expect("json");
    assert_eq!(out["ok"], true, "{out}");
}
