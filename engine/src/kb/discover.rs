//! What discovery searches: the documents `strata discover` indexes, taken from the knowledge
//! base and the Knowledge API's chunks as of one journal position.
//!
//! Discovery is the first, approximate phase before the exact traversal: from a sentence ("multi-
//! currency rounding is wrong on invoices") to the entities, specifications and knowledge chunks
//! it concerns. This module only decides *what* each document says (its title, its searchable
//! text, its entity) and in which order documents are given to the index (by key), so the same
//! position gives the same documents byte for byte; the full-text index itself (BM25) lives at
//! the edge, which may spawn threads.

use serde_json::Value;

use super::graph::Graph;
use super::kind::ArtifactKind;
use crate::knowledge::state::Knowledge;

/// What a document is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum DocKind {
    /// An artifact: an entity or one of the four specification layers.
    Artifact(ArtifactKind),
    /// A knowledge chunk of the Knowledge API.
    Chunk,
}

impl DocKind {
    /// The kind's name as output shows it (`brd-requirement`, `chunk`).
    pub fn name(self) -> &'static str {
        match self {
            DocKind::Artifact(k) => k.name(),
            DocKind::Chunk => "chunk",
        }
    }
}

/// One searchable document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Doc {
    /// What it is.
    pub kind: DocKind,
    /// Artifact id or chunk slug.
    pub id: String,
    /// The entity it belongs to (its own id for an entity; none for a chunk).
    pub entity: Option<String>,
    /// Its title (an entity's name).
    pub title: String,
    /// Everything else searchable: body and the fields that describe it.
    pub text: String,
    /// The name of its entity (so "billing" finds billing's specifications), empty if none.
    pub entity_name: String,
}

impl Doc {
    /// `kind:id`, the tie-breaker of every ranking.
    pub fn key(&self) -> String {
        format!("{}:{}", self.kind.name(), self.id)
    }
}

/// Documents longer than this are cut at a character boundary before indexing (the specification
/// bodies are at most 196,608 bytes by schema; chunks are bounded by the Knowledge API).
pub const DOC_TEXT_BYTES_MAX: usize = 262_144;

/// The documents of the graph (entities and specifications that exist) and of the knowledge
/// projection (chunks not retired), sorted by key.
pub fn documents(g: &Graph, knowledge: Option<&Knowledge>) -> Vec<Doc> {
    use ArtifactKind as K;
    let mut docs = Vec::new();
    let names: std::collections::BTreeMap<String, String> = g
        .artifacts_of(K::Entity)
        .into_iter()
        .map(|e| (e.key.id.clone(), e.fields.get("name").and_then(Value::as_str).unwrap_or(&e.key.id).to_owned()))
        .collect();
    for kind in [K::Entity, K::BrdRequirement, K::FunctionalDomain, K::BackendModule, K::UiScreen] {
        for n in g.artifacts_of(kind) {
            let f = &n.fields;
            let entity = if kind == K::Entity {
                Some(n.key.id.clone())
            } else {
                f.get("entity").and_then(Value::as_str).map(str::to_owned)
            };
            let title = match kind {
                K::Entity => names.get(&n.key.id).cloned().unwrap_or_default(),
                _ => f.get("title").and_then(Value::as_str).unwrap_or("").to_owned(),
            };
            let mut text = String::new();
            let mut add = |s: &str| {
                if !s.is_empty() {
                    text.push_str(s);
                    text.push('\n');
                }
            };
            add(&words_of_id(&n.key.id));
            for field in ["description", "acceptanceCriteria", "actors", "validationRules", "components"] {
                strings_in(f.get(field), &mut add);
            }
            for (list, keys) in [
                ("apiMethods", &["name", "signature"][..]),
                ("dataBindings", &["field", "source"][..]),
                ("actions", &["name", "call"][..]),
                ("stateMachines", &["name"][..]),
            ] {
                for item in f.get(list).and_then(Value::as_array).into_iter().flatten() {
                    for k in keys {
                        if let Some(s) = item.get(*k).and_then(Value::as_str) {
                            add(&split_identifier(s));
                        }
                    }
                }
            }
            add(&n.body);
            let entity_name = entity.as_ref().and_then(|e| names.get(e)).cloned().unwrap_or_default();
            docs.push(Doc { kind: DocKind::Artifact(kind), id: n.key.id.clone(), entity, title, text, entity_name });
        }
    }
    if let Some(k) = knowledge {
        for c in k.chunks().filter(|c| !c.retired) {
            let text = format!("{}\n{}\n{}", words_of_id(&c.slug), c.concerns.join(" "), c.content);
            docs.push(Doc {
                kind: DocKind::Chunk,
                id: c.slug.clone(),
                entity: None,
                title: c.title.clone(),
                text,
                entity_name: String::new(),
            });
        }
    }
    for d in &mut docs {
        if d.text.len() > DOC_TEXT_BYTES_MAX {
            let mut cut = DOC_TEXT_BYTES_MAX;
            while !d.text.is_char_boundary(cut) {
                cut -= 1;
            }
            d.text.truncate(cut);
        }
    }
    docs.sort_by(|a, b| (a.kind, &a.id).cmp(&(b.kind, &b.id)));
    docs
}

fn strings_in(v: Option<&Value>, add: &mut impl FnMut(&str)) {
    match v {
        Some(Value::String(s)) => add(s),
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).for_each(add),
        _ => {}
    }
}

/// `multi-currency-api` → `multi currency api`: ids are searchable by their words.
fn words_of_id(id: &str) -> String {
    id.replace(['-', '.', '_'], " ")
}

/// `getInvoice0` → `getInvoice0 get Invoice 0`, `billing-api-1#getInvoice0` likewise: the
/// identifier as written and its camel-case words.
pub fn split_identifier(s: &str) -> String {
    let mut words = String::with_capacity(s.len() * 2);
    let mut prev: Option<char> = None;
    for c in s.chars() {
        let boundary = match prev {
            Some(p) => {
                (p.is_lowercase() && c.is_uppercase())
                    || (p.is_alphabetic() && c.is_ascii_digit())
                    || (p.is_ascii_digit() && c.is_alphabetic())
            }
            None => false,
        };
        if boundary {
            words.push(' ');
        }
        words.push(if c.is_alphanumeric() { c } else { ' ' });
        prev = Some(c);
    }
    format!("{s} {words}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_searchable_by_their_words_and_documents_come_sorted_by_key() {
        assert_eq!(split_identifier("getInvoice0"), "getInvoice0 get Invoice 0");
        assert_eq!(split_identifier("api#listOrders"), "api#listOrders api list Orders");
        assert_eq!(words_of_id("multi-currency-api"), "multi currency api");
        let fx = super::super::fixture::generate(&super::super::fixture::FixtureSpec::seed_scale(7));
        let (_j, g) = fx.in_memory("strata.test/discover").unwrap();
        let docs = documents(&g, None);
        let specs = fx.drafts.iter().filter(|d| d.key.kind.is_spec() || d.key.kind == ArtifactKind::Entity).count();
        assert_eq!(docs.len(), specs);
        assert!(docs.windows(2).all(|w| (w[0].kind, &w[0].id) < (w[1].kind, &w[1].id)));
        let api = docs.iter().find(|d| d.id == "billing-api-1").unwrap();
        assert_eq!(api.entity_name, "Billing");
        assert!(api.text.contains("billing api 1"), "its id's words");
        assert_eq!(documents(&g, None), docs, "the same graph, the same documents");
    }
}
