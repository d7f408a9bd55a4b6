//! Virtual paths of knowledge-base items, and the glob language of context profiles.
//!
//! Profiles name content by path, the way the seed's profiles named files: `specs/<entity>/…`,
//! `changes/CR-189`, `summaries/L3`. Every artifact and summary has exactly one virtual path, so
//! a `never` glob excludes the same thing however it was reached (a literal entry, a template
//! variable, or the impact closure of a change request).

use crate::kb::graph::{Graph, Group, Node, NodeId};
use crate::kb::kind::ArtifactKind;

/// Where virtual paths lie, in one line (for messages about a glob that matches nothing).
pub const LAYOUT: &str = "virtual paths are entities/<id>, specs/<entity>/{requirements,domains,backend,screens}/<id>, changes/<id>, backlog/<id>, issues/<id>, docs/<entity>/{research,devlog}/<id>, design/<entity>/<id>, stack/<entity>/{concerns,skills}/<id>, impl/<entity>/<id>, routes/<entity>/<id>, summaries/L3, summaries/L2/<entity>, rules/pipeline, continuation/<task>";

/// The virtual path of a task's continuation status (what its earlier attempts did).
pub fn continuation(task: &str) -> String {
    format!("continuation/{task}")
}

/// The virtual path of the system summary.
pub const SYSTEM_SUMMARY: &str = "summaries/L3";

/// The virtual path of an entity's L2 summary.
pub fn entity_summary(entity: &str) -> String {
    format!("summaries/L2/{entity}")
}

/// The virtual path of an artifact.
pub fn artifact_path(node: &Node) -> String {
    path_for(&node.key, node.fields.get("entity").and_then(|v| v.as_str()))
}

/// The virtual path of node `n` of `g`, read from its key and entity link without decoding the
/// node (the same path as [`artifact_path`] of [`Graph::node`]).
pub fn node_path(g: &Graph, n: NodeId) -> String {
    path_for(g.key(n), g.entity_field(n))
}

fn path_for(key: &crate::kb::kind::ArtifactKey, entity: Option<&str>) -> String {
    let entity = entity.unwrap_or("_");
    let id = &key.id;
    match key.kind {
        ArtifactKind::Entity => format!("entities/{id}"),
        ArtifactKind::BrdRequirement => format!("specs/{entity}/requirements/{id}"),
        ArtifactKind::FunctionalDomain => format!("specs/{entity}/domains/{id}"),
        ArtifactKind::BackendModule => format!("specs/{entity}/backend/{id}"),
        ArtifactKind::UiScreen => format!("specs/{entity}/screens/{id}"),
        ArtifactKind::ChangeRequest => format!("changes/{id}"),
        ArtifactKind::BacklogItem => format!("backlog/{id}"),
        ArtifactKind::Issue => format!("issues/{id}"),
        ArtifactKind::ResearchNote => format!("docs/{entity}/research/{id}"),
        ArtifactKind::Devlog => format!("docs/{entity}/devlog/{id}"),
        ArtifactKind::DesignProfile => format!("design/{entity}/{id}"),
        ArtifactKind::StackConcern => format!("stack/{entity}/concerns/{id}"),
        ArtifactKind::TechSkill => format!("stack/{entity}/skills/{id}"),
        ArtifactKind::ImplementationRef => format!("impl/{entity}/{id}"),
        ArtifactKind::ModificationRoute => format!("routes/{entity}/{id}"),
    }
}

/// The directory segments of the virtual paths of a path group (the id is the last segment).
fn group_dir(g: &Group) -> Vec<&str> {
    let e = g.entity.as_str();
    match g.kind {
        ArtifactKind::Entity => vec!["entities"],
        ArtifactKind::BrdRequirement => vec!["specs", e, "requirements"],
        ArtifactKind::FunctionalDomain => vec!["specs", e, "domains"],
        ArtifactKind::BackendModule => vec!["specs", e, "backend"],
        ArtifactKind::UiScreen => vec!["specs", e, "screens"],
        ArtifactKind::ChangeRequest => vec!["changes"],
        ArtifactKind::BacklogItem => vec!["backlog"],
        ArtifactKind::Issue => vec!["issues"],
        ArtifactKind::ResearchNote => vec!["docs", e, "research"],
        ArtifactKind::Devlog => vec!["docs", e, "devlog"],
        ArtifactKind::DesignProfile => vec!["design", e],
        ArtifactKind::StackConcern => vec!["stack", e, "concerns"],
        ArtifactKind::TechSkill => vec!["stack", e, "skills"],
        ArtifactKind::ImplementationRef => vec!["impl", e],
        ArtifactKind::ModificationRoute => vec!["routes", e],
    }
}

/// What the last segment of a path must match once a glob has matched its directory.
#[derive(Debug, PartialEq, Eq)]
enum Last<'a> {
    /// Any segment.
    Any,
    /// Segments matching this segment pattern.
    Like(&'a str),
}

/// Every way glob segments `p` can match directory segments `d` followed by exactly one more
/// segment, as what that segment must match. `**` may match segments of `d`, the last segment,
/// or nothing.
fn last_segment_patterns<'a>(p: &[&'a str], d: &[&str], out: &mut Vec<Last<'a>>) {
    if d.is_empty() {
        let mut single = p.iter().filter(|s| **s != "**");
        match (single.next(), single.next()) {
            (None, None) if !p.is_empty() => out.push(Last::Any),
            (Some(s), None) if !s.is_empty() && s.chars().all(|c| c == '*') => out.push(Last::Any),
            (Some(s), None) => out.push(Last::Like(s)),
            _ => {}
        }
        return;
    }
    let Some((first, rest)) = p.split_first() else { return };
    if *first == "**" {
        last_segment_patterns(rest, d, out);
        last_segment_patterns(p, &d[1..], out);
    } else if segment_match(first, d[0]) {
        last_segment_patterns(rest, &d[1..], out);
    }
}

/// Existing artifacts whose virtual path matches `pattern`, sorted by key: decided once per path
/// group (its directory) and per artifact only in groups where the glob constrains the id, so the
/// cost follows the groups and the matches, not the size of the base.
pub fn matching(g: &Graph, pattern: &str) -> Vec<NodeId> {
    let mut out = Vec::new();
    for_matching(g, pattern, &mut |n| {
        out.push(n);
        true
    });
    out.sort_by(|a, b| g.key(*a).cmp(g.key(*b)));
    out
}

/// Whether any existing artifact's virtual path matches `pattern` (stops at the first).
pub fn any_matching(g: &Graph, pattern: &str) -> bool {
    let mut any = false;
    for_matching(g, pattern, &mut |_| {
        any = true;
        false
    });
    any
}

/// Calls `f` for each existing artifact whose virtual path matches `pattern`, group by group,
/// until it returns false.
fn for_matching(g: &Graph, pattern: &str, f: &mut dyn FnMut(NodeId) -> bool) {
    let p: Vec<&str> = pattern.split('/').collect();
    for (group, members) in g.groups() {
        let mut lasts = Vec::new();
        last_segment_patterns(&p, &group_dir(group), &mut lasts);
        let all = lasts.contains(&Last::Any);
        let candidates: Box<dyn Iterator<Item = &NodeId>> = if lasts.is_empty() {
            // No one-segment id completes a match; only ids of several segments might.
            Box::new(g.slashed_ids().iter().filter(|n| members.contains(n)))
        } else {
            Box::new(members.iter())
        };
        for &n in candidates {
            let id = &g.key(n).id;
            let hit = if all {
                true
            } else if id.contains('/') {
                // An id of several segments: the directory analysis does not apply.
                glob_match(pattern, &node_path(g, n))
            } else {
                lasts.iter().any(|l| matches!(l, Last::Like(s) if segment_match(s, id)))
            };
            if hit && !f(n) {
                return;
            }
        }
    }
}

/// Every virtual path in the knowledge base that `pattern` matches, sorted: the pipeline rules
/// (`rules/pipeline`), the system summary (`summaries/L3`), each entity's L2 summary
/// (`summaries/L2/<entity>`) and every existing artifact. What a profile glob can reach, and what
/// `strata prompt paths` lists.
pub fn virtual_paths(g: &Graph, pattern: &str) -> Vec<String> {
    let mut out: Vec<String> = fixed_paths(g).filter(|p| glob_match(pattern, p)).collect();
    out.extend(matching(g, pattern).into_iter().map(|n| node_path(g, n)));
    out.sort_unstable();
    out
}

/// Whether `pattern` matches any virtual path of [`virtual_paths`] (stops at the first).
pub fn any_virtual_path(g: &Graph, pattern: &str) -> bool {
    fixed_paths(g).any(|p| glob_match(pattern, &p)) || any_matching(g, pattern)
}

/// The paths that are not artifacts: the pipeline rules, the system summary, and one L2 summary
/// per existing entity.
fn fixed_paths(g: &Graph) -> impl Iterator<Item = String> + '_ {
    let entities = matching(g, "entities/*");
    [super::assemble::PIPELINE_RULES_PATH.to_owned(), SYSTEM_SUMMARY.to_owned()]
        .into_iter()
        .chain(entities.into_iter().map(|n| entity_summary(&g.key(n).id)))
}

/// Glob match over `/`-separated paths: `*` matches within one segment, `**` matches any number
/// of whole segments (including none), `?` matches one character; everything else is literal.
pub fn glob_match(pattern: &str, path: &str) -> bool {
    let p: Vec<&str> = pattern.split('/').collect();
    let s: Vec<&str> = path.split('/').collect();
    match_segments(&p, &s)
}

fn match_segments(p: &[&str], s: &[&str]) -> bool {
    wildcard(p, s, |x| *x == "**", |x, y| segment_match(x, y))
}

fn segment_match(p: &str, s: &str) -> bool {
    let p: Vec<char> = p.chars().collect();
    let s: Vec<char> = s.chars().collect();
    wildcard(&p, &s, |c| *c == '*', |c, d| *c == '?' || c == d)
}

/// The classic iterative wildcard match with one backtrack point: `star` marks a pattern element
/// matching any run (including none), `one` says whether a pattern element matches a subject
/// element. Linear in practice, O(n·m) at worst, no recursion.
fn wildcard<T>(p: &[T], s: &[T], star: impl Fn(&T) -> bool, one: impl Fn(&T, &T) -> bool) -> bool {
    let (mut pi, mut si) = (0usize, 0usize);
    let mut back: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() && star(&p[pi]) {
            back = Some((pi, si));
            pi += 1;
        } else if pi < p.len() && one(&p[pi], &s[si]) {
            pi += 1;
            si += 1;
        } else if let Some((bp, bs)) = back {
            pi = bp + 1;
            si = bs + 1;
            back = Some((bp, bs + 1));
        } else {
            return false;
        }
    }
    while pi < p.len() && star(&p[pi]) {
        pi += 1;
    }
    pi == p.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matching_by_group_equals_matching_every_path() {
        let fx = crate::kb::fixture::generate(&crate::kb::fixture::FixtureSpec::seed_scale(3));
        let (_, g) = fx.in_memory("strata.test/paths").unwrap();
        let entity = g.groups().keys().find(|k| !k.entity.is_empty() && k.entity != "_").unwrap().entity.clone();
        let some_id = g.artifacts()[17].key.id.clone();
        let globs = [
            "specs/*/screens/**".to_owned(),
            "specs/*/backend/**".into(),
            "changes/*/plan-internal/**".into(),
            "changes/*".into(),
            "changes/CR-1?".into(),
            "**".into(),
            "**/screens/*".into(),
            "**/*".into(),
            "*/*".into(),
            "specs/**".into(),
            format!("specs/{entity}/**"),
            format!("specs/{entity}/*/*"),
            format!("docs/{entity}/research/*"),
            format!("**/{some_id}"),
            format!("**/**/{some_id}"),
            "specs/*/*/*-1*".into(),
            "entities/*".into(),
            "summaries/L3".into(),
            "specs".into(),
            "**/requirements/**/*".into(),
            "changes//*".into(),
            "changes/".into(),
            "design/*/*".into(),
            "stack/*/skills/*".into(),
            "**/concerns/*".into(),
            "impl/**".into(),
            format!("routes/{entity}/*"),
        ];
        for glob in globs {
            let want: Vec<NodeId> = g
                .artifacts()
                .into_iter()
                .filter(|n| glob_match(&glob, &artifact_path(n)))
                .map(|n| g.node_id(&n.key).unwrap())
                .collect();
            assert_eq!(any_matching(&g, &glob), !want.is_empty(), "{glob}");
            assert_eq!(matching(&g, &glob), want, "{glob}");
        }
    }

    #[test]
    fn virtual_paths_list_summaries_rules_and_artifacts_sorted() {
        let fx = crate::kb::fixture::generate(&crate::kb::fixture::FixtureSpec::seed_scale(3));
        let (_, g) = fx.in_memory("strata.test/paths").unwrap();
        let all = virtual_paths(&g, "**");
        let entities = g.artifacts().iter().filter(|n| n.key.kind == ArtifactKind::Entity).count();
        assert_eq!(all.len(), g.len() + 2 + entities);
        assert!(all.windows(2).all(|w| w[0] < w[1]), "sorted, no duplicates");
        assert!(all.contains(&"rules/pipeline".to_owned()) && all.contains(&"summaries/L3".to_owned()));
        let backend = virtual_paths(&g, "specs/*/backend/**");
        assert!(!backend.is_empty() && backend.iter().all(|p| p.split('/').nth(2) == Some("backend")));
        assert!(virtual_paths(&g, "specs/*/modules/**").is_empty());
        for (glob, kind) in [
            ("design/*/*", ArtifactKind::DesignProfile),
            ("stack/*/concerns/*", ArtifactKind::StackConcern),
            ("stack/*/skills/*", ArtifactKind::TechSkill),
            ("impl/*/*", ArtifactKind::ImplementationRef),
            ("routes/*/*", ArtifactKind::ModificationRoute),
        ] {
            let n = g.artifacts().iter().filter(|a| a.key.kind == kind).count();
            assert!(n > 0 && virtual_paths(&g, glob).len() == n, "{glob}");
        }
        assert!(!any_virtual_path(&g, "specs/*/modules/**"));
        assert!(any_virtual_path(&g, "summaries/L2/*") && any_virtual_path(&g, "specs/*/backend/**"));
    }

    #[test]
    fn globs_match_segments_like_the_seed_profiles_expect() {
        assert!(glob_match("specs/*/backend/**", "specs/billing/backend/billing-api-1"));
        assert!(!glob_match("specs/*/backend/**", "specs/billing/screens/s1"));
        assert!(glob_match("specs/**", "specs/a/b/c"));
        assert!(glob_match("**/screens/*", "specs/billing/screens/x"));
        assert!(glob_match("changes/*", "changes/CR-1"));
        assert!(!glob_match("changes/*", "changes/CR-1/extra"));
        assert!(glob_match("changes/CR-1?", "changes/CR-12"));
        assert!(!glob_match("changes/CR-1?", "changes/CR-1"));
        assert!(glob_match("docs/*/research/*", "docs/billing/research/RN-1"));
        assert!(glob_match("summaries/L3", "summaries/L3"));
        assert!(glob_match("**", "anything/at/all"));
        assert!(glob_match("a/**/b", "a/b"));
        assert!(glob_match("a/**/b", "a/x/y/b"));
        assert!(!glob_match("a/**/b", "a/x/y/c"));
    }
}
