//! Virtual paths of knowledge-base items, and the glob language of context profiles.
//!
//! Profiles name content by path, the way the seed's profiles named files: `specs/<entity>/…`,
//! `changes/CR-189`, `summaries/L3`. Every artifact and summary has exactly one virtual path, so
//! a `never` glob excludes the same thing however it was reached (a literal entry, a template
//! variable, or the impact closure of a change request).

use crate::kb::graph::Node;
use crate::kb::kind::ArtifactKind;

/// The virtual path of the system summary.
pub const SYSTEM_SUMMARY: &str = "summaries/L3";

/// The virtual path of an entity's L2 summary.
pub fn entity_summary(entity: &str) -> String {
    format!("summaries/L2/{entity}")
}

/// The virtual path of an artifact.
pub fn artifact_path(node: &Node) -> String {
    let entity = node.fields.get("entity").and_then(|v| v.as_str()).unwrap_or("_");
    let id = &node.key.id;
    match node.key.kind {
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
    }
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
