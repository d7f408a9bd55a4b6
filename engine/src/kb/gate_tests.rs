//! The lifecycle and suspect gates hold on every path: a table of intakes that create artifacts
//! in, or move them into, gated states, each run against a small knowledge base with and
//! without a suspect change request, through one `check` helper. Intake must refuse exactly what
//! `artifact transition` refuses, with the same code and message.

use super::commands::{self, Ctx};
use super::graph::Graph;
use super::intake::{SourceFile, plan};
use super::kind::{ArtifactKey, ArtifactKind};
use crate::ports::{CountingIds, FixedClock};

fn file(name: &str, front: &str, body: &str) -> SourceFile {
    SourceFile { path: format!("{name}.md"), bytes: format!("---\n{front}---\n{body}").into_bytes() }
}

fn entity() -> SourceFile {
    file("billing", "kind: entity\nid: billing\nname: Billing\ntier: product\nstate: active\n", "")
}

fn brd(id: &str, linked_crs: &str, body: &str) -> SourceFile {
    file(
        id,
        &format!(
            "kind: brd-requirement\nid: {id}\nentity: billing\ntitle: Tax\nstate: approved\nfunctionalDomains: []\nbackendModules: []\nuiScreens: []\nlinkedCrs: [{linked_crs}]\n"
        ),
        body,
    )
}

fn cr(id: &str, state: &str, extra: &str) -> SourceFile {
    file(id, &format!("kind: change-request\nid: {id}\nentity: billing\ntitle: A change\nstate: {state}\n{extra}"), "")
}

fn issue(id: &str, state: &str, extra: &str) -> SourceFile {
    file(
        id,
        &format!(
            "kind: issue\nid: {id}\nentity: billing\ntitle: A bug\ncategory: defect\nseverity: low\nstate: {state}\n{extra}"
        ),
        "",
    )
}

/// CR-1 (proposed) changes BRD-1.1; CR-10 (draft) is unrelated. With `suspect`, BRD-1.1 was
/// then edited, so CR-1 is suspect.
fn world(suspect: bool) -> (Graph, CountingIds) {
    let mut g = Graph::new();
    let mut ids = CountingIds::new(1);
    let take = |g: &mut Graph, files: &[SourceFile], ids: &mut CountingIds| {
        let p = plan(g, files, ids, &FixedClock(1)).unwrap_or_else(|e| panic!("setup refused: {e:#?}"));
        g.apply_appends(&p.appends).unwrap();
    };
    take(
        &mut g,
        &[
            entity(),
            brd("BRD-1.1", "CR-1", ""),
            cr("CR-1", "proposed", "brdRefs: [BRD-1.1]\n"),
            cr("CR-10", "draft", "brdRefs: []\n"),
        ],
        &mut ids,
    );
    if suspect {
        take(&mut g, &[brd("BRD-1.1", "CR-1", "Now configurable.\n")], &mut ids);
        let n = g.node_id(&ArtifactKey::new(ArtifactKind::ChangeRequest, "CR-1")).unwrap();
        assert!(g.is_suspect(n), "setup: CR-1 is suspect");
    }
    (g, ids)
}

/// What an intake should do: be accepted, or be refused with these `(file, rule, code)` problems.
enum Expect {
    Accepted,
    Refused(&'static [(&'static str, &'static str, &'static str)]),
}

fn check(name: &str, suspect: bool, files: &[SourceFile], expect: Expect) {
    let (g, mut ids) = world(suspect);
    let result = plan(&g, files, &mut ids, &FixedClock(2));
    match (expect, result) {
        (Expect::Accepted, Ok(p)) => {
            // What is accepted replays: the graph takes the plan's events as the journal would.
            let mut after = g.clone();
            after.apply_appends(&p.appends).unwrap_or_else(|e| panic!("{name}: accepted plan does not apply: {e}"));
        }
        (Expect::Accepted, Err(problems)) => panic!("{name}: refused: {problems:#?}"),
        (Expect::Refused(want), Ok(_)) => panic!("{name}: accepted, expected {} problem(s)", want.len()),
        (Expect::Refused(want), Err(problems)) => {
            let got: Vec<(&str, &str, &str)> = problems
                .iter()
                .map(|p| (p.file.as_str(), p.rule.as_str(), p.detail.get(1..13).unwrap_or("")))
                .collect();
            assert_eq!(got, want.to_vec(), "{name}: {problems:#?}");
            for p in &problems {
                assert_eq!(p.pointer, "/state", "{name}");
                assert!(!p.hint.is_empty(), "{name}");
            }
        }
    }
}

#[test]
fn intake_holds_every_gate_that_a_transition_holds() {
    use Expect::{Accepted, Refused};
    let depends = "brdRefs: []\ndependsOn: [CR-1]\n";
    // Creation in a state reached only through approval, with a suspect change request upstream.
    check(
        "approved on a suspect",
        true,
        &[cr("CR-2", "approved", depends)],
        Refused(&[("CR-2.md", "suspect", "STRATA-E0704")]),
    );
    check(
        "done on a suspect",
        true,
        &[cr("CR-2", "done", depends)],
        Refused(&[("CR-2.md", "suspect", "STRATA-E0704")]),
    );
    check(
        "in-progress on a suspect",
        true,
        &[cr("CR-2", "in-progress", depends)],
        Refused(&[("CR-2.md", "suspect", "STRATA-E0704")]),
    );
    // States reachable without approval are fine, suspect or not.
    check("proposed on a suspect", true, &[cr("CR-2", "proposed", depends)], Accepted);
    check("cancelled on a suspect", true, &[cr("CR-2", "cancelled", depends)], Accepted);
    check(
        "approved on nothing suspect",
        true,
        &[cr("CR-2", "approved", "brdRefs: []\ndependsOn: [CR-10]\n")],
        Accepted,
    );
    check("done with nothing suspect", false, &[cr("CR-2", "done", depends)], Accepted);
    // Every refusal is listed, not only the first.
    check(
        "two at once",
        true,
        &[
            cr("CR-2", "approved", depends),
            cr("CR-3", "review", "brdRefs: [BRD-1.1]\n"),
            brd("BRD-1.1", "CR-1, CR-3", "Now configurable.\n"),
        ],
        Refused(&[("CR-2.md", "suspect", "STRATA-E0704"), ("CR-3.md", "suspect", "STRATA-E0704")]),
    );
    // Moves by an update of the file's state: the table, then the gate.
    check(
        "update into approved on a suspect",
        true,
        &[cr("CR-1", "approved", "brdRefs: [BRD-1.1]\n")],
        Refused(&[("CR-1.md", "suspect", "STRATA-E0704")]),
    );
    check("update into approved, nothing suspect", false, &[cr("CR-1", "approved", "brdRefs: [BRD-1.1]\n")], Accepted);
    check(
        "update skipping states",
        false,
        &[cr("CR-1", "done", "brdRefs: [BRD-1.1]\n")],
        Refused(&[("CR-1.md", "lifecycle", "STRATA-E0702")]),
    );
    // The same intake changing something upstream counts, whichever order the streams go in:
    // CR-10 sorts before CR-2, so its change applies before CR-2 is created; change requests sort
    // before requirements, so CR-30 is created before BRD-1.1 changes.
    check(
        "upstream changed in the same intake, applied first",
        false,
        &[
            cr("CR-10", "draft", "brdRefs: []\n").with_body("edited"),
            cr("CR-2", "approved", "brdRefs: []\ndependsOn: [CR-10]\n"),
        ],
        Refused(&[("CR-2.md", "suspect", "STRATA-E0704")]),
    );
    check(
        "upstream changed in the same intake, applied after",
        false,
        &[cr("CR-30", "approved", "brdRefs: [BRD-1.1]\n"), brd("BRD-1.1", "CR-1, CR-30", "Now configurable.\n")],
        Refused(&[("CR-30.md", "suspect", "STRATA-E0704")]),
    );
    // Promotion-only states: only with the promotion's back-links on both sides.
    check(
        "promoted without a promotion",
        false,
        &[issue("ISS-1", "promoted", "")],
        Refused(&[("ISS-1.md", "lifecycle", "STRATA-E0703")]),
    );
    check(
        "promoted to a change request that does not say so",
        false,
        &[issue("ISS-1", "promoted", "promotedTo: CR-10\n")],
        Refused(&[("ISS-1.md", "lifecycle", "STRATA-E0703")]),
    );
    check(
        "promoted with both back-links",
        false,
        &[issue("ISS-1", "promoted", "promotedTo: CR-5\n"), cr("CR-5", "draft", "brdRefs: []\npromotedFrom: ISS-1\n")],
        Accepted,
    );
    check("resolved without a promotion", false, &[issue("ISS-1", "resolved", "")], Accepted);
    check("triaged without a promotion", false, &[issue("ISS-1", "triaged", "")], Accepted);
}

trait WithBody {
    fn with_body(self, body: &str) -> SourceFile;
}

impl WithBody for SourceFile {
    fn with_body(mut self, body: &str) -> SourceFile {
        self.bytes.extend_from_slice(body.as_bytes());
        self
    }
}

#[test]
fn an_intake_refusal_says_what_the_transition_says() {
    let (g, mut ids) = world(true);
    let key = ArtifactKey::new(ArtifactKind::ChangeRequest, "CR-1");
    let clock = FixedClock(3);
    let command = commands::transition(&g, &key, "approved", None, &mut Ctx { ids: &mut ids, clock: &clock })
        .expect_err("the command refuses");
    let problems =
        plan(&g, &[cr("CR-1", "approved", "brdRefs: [BRD-1.1]\n")], &mut ids, &clock).expect_err("intake refuses");
    assert_eq!(problems.len(), 1);
    assert_eq!(problems[0].detail, command.to_string());
    assert!(problems[0].detail.contains("change-request:CR-1"), "{}", problems[0].detail);
    // A new change request depending on it names what is suspect the same way.
    let problems =
        plan(&g, &[cr("CR-2", "approved", "brdRefs: []\ndependsOn: [CR-1]\n")], &mut ids, &clock).expect_err("refused");
    assert_eq!(
        problems[0].detail,
        "[STRATA-E0704] change-request:CR-2 cannot be approved while these are suspect: change-request:CR-1; review them with `strata artifact review`"
    );
    assert!(problems[0].hint.contains("or take it in as proposed"), "{}", problems[0].hint);
    // A promotion-only move by update says what `artifact transition` says.
    let (mut g, mut ids) = world(false);
    let p = plan(&g, &[issue("ISS-1", "triaged", "")], &mut ids, &clock).unwrap();
    g.apply_appends(&p.appends).unwrap();
    let key = ArtifactKey::new(ArtifactKind::Issue, "ISS-1");
    let command = commands::transition(&g, &key, "promoted", None, &mut Ctx { ids: &mut ids, clock: &clock })
        .expect_err("the command refuses");
    let problems = plan(&g, &[issue("ISS-1", "promoted", "")], &mut ids, &clock).expect_err("intake refuses");
    assert_eq!(problems[0].detail, command.to_string());
}
