//! Knowledge fixtures: a small hand-written catalogue in the shape the seed describes (shared
//! conventions plus project-specific ones), and a deterministic generator of large catalogues for
//! benchmarks and property tests.

use crate::kb::fixture::Sequence;
use crate::kb::intake::SourceFile;

/// Concerns of the bundled example.
pub const EXAMPLE_CONCERNS: [&str; 10] = [
    "testing",
    "architecture",
    "state-management",
    "domain-logic",
    "multicurrency",
    "provenance",
    "security",
    "ui",
    "persistence",
    "release",
];

/// Projects of the bundled example.
pub const EXAMPLE_PROJECTS: [&str; 3] = ["way2save", "fieldbook", "cortex-aluminex"];

/// `(slug, title, concerns, scope, content)` of one example chunk.
type ExampleChunk = (&'static str, &'static str, &'static [&'static str], &'static [&'static str], &'static str);

/// The bundled example.
const EXAMPLE: &[ExampleChunk] = &[
    (
        "flutter-testing",
        "Flutter testing conventions",
        &["testing"],
        &[],
        "Widget tests live beside the widget in test/, named <widget>_test.dart. Use a fake clock and a fake repository; never hit Firebase from a test. Golden tests only for design-system components, regenerated on the CI image. A failing test is fixed or deleted in the same change, never skipped.",
    ),
    (
        "flutter-architecture",
        "Flutter architecture",
        &["architecture", "domain-logic"],
        &[],
        "Three layers: presentation (widgets, no logic beyond formatting), application (use cases, one class per user intent) and domain (entities and rules, pure Dart, no Flutter import). Repositories are interfaces in the domain and implementations in data/. Dependencies point inwards only.",
    ),
    (
        "flutter-state-management",
        "State management",
        &["state-management", "ui"],
        &[],
        "Riverpod providers, one per use case. Widgets read state with ref.watch and send intents through notifier methods; they never mutate state directly. Async state is AsyncValue; loading and error are rendered by the shared AsyncView widget.",
    ),
    (
        "security-baseline",
        "Security baseline",
        &["security", "testing"],
        &[],
        "No secrets in the repository or in logs. Tokens live in the platform keystore. Every network call goes through the shared client, which pins certificates and redacts headers in logs. Tests that touch auth use the fake identity provider.",
    ),
    (
        "persistence-rules",
        "Local persistence",
        &["persistence", "architecture"],
        &[],
        "Local data in Drift (SQLite). Schema changes ship with a migration and a migration test from every released version. Never store money as floating point: integer minor units plus currency code.",
    ),
    (
        "ui-kit",
        "UI kit usage",
        &["ui"],
        &[],
        "Use the design-system widgets; no raw Material widgets in feature code. Spacing from the 4-point scale, colours from the theme, text styles from the typography tokens. Every tappable element has a semantics label.",
    ),
    (
        "release-checklist",
        "Release checklist",
        &["release"],
        &[],
        "Version bump in pubspec and changelog entry in the same commit. Release builds come from CI only. Staged rollout 10% for 24 hours, then 50%, then 100%, watching crash-free sessions above 99.5%.",
    ),
    (
        "error-handling",
        "Error handling",
        &["architecture", "ui"],
        &[],
        "Domain errors are typed (sealed classes), never strings. The application layer maps them to user messages; the presentation layer only displays. Unexpected exceptions are reported with context and shown as a generic retry message.",
    ),
    (
        "code-review",
        "Code review",
        &["testing", "release"],
        &[],
        "A change is reviewed against its ticket's acceptance criteria. Reviewers run the tests locally for anything touching money or auth. Two approvals for domain changes, one otherwise.",
    ),
    (
        "way2save-domain",
        "way2save domain model",
        &["domain-logic"],
        &["way2save"],
        "A Budget owns Envelopes; money moves between Envelopes only through Transfers, which are immutable. Balances are derived from Transfers, never stored. A month closes when every Envelope reconciles; closed months are read-only.",
    ),
    (
        "way2save-multicurrency",
        "way2save multi-currency",
        &["multicurrency", "domain-logic"],
        &["way2save"],
        "Every amount carries its currency. Conversion happens only at display time with the rate of the transaction date; totals across currencies are shown per currency, never summed. Rates come from the daily rate snapshot, stored with provenance.",
    ),
    (
        "way2save-provenance",
        "way2save provenance",
        &["provenance", "domain-logic"],
        &["way2save"],
        "Every imported transaction keeps its source (bank export file, line number, import run id). Corrections create a new Transfer that references the one it corrects; nothing is edited in place.",
    ),
    (
        "fieldbook-sync",
        "fieldbook offline sync",
        &["persistence", "architecture"],
        &["fieldbook"],
        "Entries are written locally first and synced with a per-device vector clock. Conflicts keep both versions and ask the user; sync never discards data silently.",
    ),
    (
        "fieldbook-testing",
        "fieldbook test fixtures",
        &["testing"],
        &["fieldbook"],
        "Sync tests run two simulated devices against the in-memory server with a controllable network (drop, delay, reorder). Every conflict rule has a test that reproduces it.",
    ),
    (
        "cortex-legal-rules",
        "cortex-aluminex legal rules",
        &["domain-logic", "security"],
        &["cortex-aluminex"],
        "Documents are classified before any agent reads them; privileged documents are never sent to an external model. Every answer cites the clauses it relied on.",
    ),
    (
        "cortex-tenant-isolation",
        "cortex tenant isolation",
        &["security", "architecture"],
        &["cortex-aluminex"],
        "Each tenant has its own database schema and its own encryption key. Queries carry the tenant id from the session, never from the request body.",
    ),
    (
        "way2save-ui",
        "way2save screens",
        &["ui", "state-management"],
        &["way2save"],
        "The Budget screen shows Envelopes sorted by due date; amounts use the user's locale and currency formatting. Pull-to-refresh re-derives balances from Transfers.",
    ),
    (
        "shared-accessibility",
        "Accessibility",
        &["ui", "testing"],
        &[],
        "Text scales to 200% without clipping; contrast at least 4.5:1; every screen has an accessibility test that walks its semantics tree.",
    ),
];

fn render(slug: &str, title: &str, concerns: &[&str], scope: &[&str], content: &str) -> SourceFile {
    let list = |v: &[&str]| format!("[{}]", v.join(", "));
    let text = format!(
        "---\nslug: {slug}\ntitle: {title}\nconcerns: {}\nproject_scope: {}\n---\n{content}\n",
        list(concerns),
        list(scope)
    );
    SourceFile { path: format!("{slug}.md"), bytes: text.into_bytes() }
}

/// The bundled example as chunk files.
pub fn example() -> Vec<SourceFile> {
    EXAMPLE.iter().map(|(s, t, c, p, body)| render(s, t, c, p, body)).collect()
}

/// A generated catalogue: its concerns, projects and chunk files.
#[derive(Clone, Debug)]
pub struct Generated {
    /// Concern names.
    pub concerns: Vec<String>,
    /// Project names.
    pub projects: Vec<String>,
    /// Chunk files.
    pub files: Vec<SourceFile>,
}

const WORDS: [&str; 24] = [
    "tests", "layers", "state", "money", "sync", "tokens", "screens", "errors", "release", "review", "cache", "schema",
    "queue", "retry", "audit", "locale", "theme", "keys", "logs", "limits", "index", "import", "export", "rules",
];

/// `chunks` chunks over `concerns` concerns and `projects` projects: each chunk has 1 to 3
/// concerns and is shared (one in three) or scoped to one or two projects; content of about
/// `words` words.
pub fn generate(seed: u64, chunks: usize, concerns: usize, projects: usize, words: usize) -> Generated {
    let mut rng = Sequence::new(seed);
    let concern_names: Vec<String> = (0..concerns).map(|i| format!("concern-{i}")).collect();
    let project_names: Vec<String> = (0..projects).map(|i| format!("project-{i}")).collect();
    let mut files = Vec::with_capacity(chunks);
    for i in 0..chunks {
        let n = 1 + rng.below(3);
        let mut cs: Vec<&str> = (0..n).map(|_| concern_names[rng.below(concerns)].as_str()).collect();
        cs.sort_unstable();
        cs.dedup();
        let scope: Vec<&str> = if projects == 0 || rng.below(3) == 0 {
            Vec::new()
        } else {
            let mut s: Vec<&str> = (0..1 + rng.below(2)).map(|_| project_names[rng.below(projects)].as_str()).collect();
            s.sort_unstable();
            s.dedup();
            s
        };
        let body: Vec<&str> = (0..words).map(|_| WORDS[rng.below(WORDS.len())]).collect();
        files.push(render(&format!("chunk-{i:05}"), &format!("Chunk {i}"), &cs, &scope, &body.join(" ")));
    }
    Generated { concerns: concern_names, projects: project_names, files }
}
