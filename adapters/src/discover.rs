//! Discovery: a BM25 full-text index over the documents of one journal position
//! ([`strata_engine::kb::discover::documents`]), and the ranking `strata discover` prints.
//!
//! The index is tantivy's, held in memory (`Index::create_in_ram`), built by one indexing thread
//! in one commit. A ranking is deterministic: every matching document is scored (BM25 over the
//! title, the text and the entity's name, title weighted highest), then sorted by score and, on
//! equal scores, by `kind:id`; the same documents and the same text give the same ranking. The
//! query is not parsed as a query language: its words are analysed as the documents' are
//! (lower-cased, English stop words dropped, stemmed), so no input is a syntax error.
//!
//! Why tantivy: it is the maintained Rust full-text engine (BM25 scoring, analysers with
//! stemming and stop words, an in-RAM directory), supports Rust 1.88+, and builds without its
//! mmap and compression features, which an in-memory index of this size does not need.

use std::collections::{BTreeMap, BTreeSet};

use strata_engine::kb::discover::Doc;
use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, BoostQuery, Occur, Query, TermQuery};
use tantivy::schema::{FAST, Field, IndexRecordOption, Schema, TextFieldIndexing, TextOptions};
use tantivy::tokenizer::{
    Language, LowerCaser, RemoveLongFilter, SimpleTokenizer, Stemmer, StopWordFilter, TextAnalyzer,
};
use tantivy::{Index, IndexReader, TantivyDocument, Term};

/// Bytes of a discovery request's text.
pub const QUERY_BYTES_MAX: usize = 2_000;
/// Distinct searchable words of one request (the rest are ignored, in order of appearance).
pub const QUERY_TERMS_MAX: usize = 64;
/// Results one request may ask for.
pub const RESULTS_MAX: usize = 100;
/// Documents one index holds.
pub const DOCS_MAX: usize = 1_000_000;
/// The indexing thread's memory budget (tantivy's minimum is 15 MB).
const WRITER_BYTES_MAX: usize = 50_000_000;
/// Tokens longer than this are dropped (base64, hashes).
const TOKEN_BYTES_MAX: usize = 40;
const ANALYZER: &str = "strata-en";
/// Field weights: a word in the title counts most, in the entity's name least.
const BOOST_TITLE: f32 = 2.0;
const BOOST_TEXT: f32 = 1.0;
const BOOST_ENTITY: f32 = 0.5;

/// Why a discovery request was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DiscoverError {
    /// Nothing searchable in the text.
    #[error(
        "[STRATA-E2500] the discovery text {0:?} has no searchable word (only stop words, punctuation or nothing); describe the change in a few words"
    )]
    NoWords(String),
    /// The text is too long.
    #[error(
        "[STRATA-E2501] the discovery text is {0} bytes, more than the {QUERY_BYTES_MAX} allowed; give the request's gist, not the whole document"
    )]
    TooLong(usize),
    /// A result count outside the bounds.
    #[error("[STRATA-E2502] --limit {0} is outside 1–{RESULTS_MAX}; ask for at most {RESULTS_MAX} results")]
    Limit(usize),
    /// More documents than an index holds.
    #[error(
        "[STRATA-E2503] the knowledge base has {0} searchable documents, more than the {DOCS_MAX} one discovery index holds; discover over an earlier position or split the knowledge base"
    )]
    TooMany(usize),
    /// The index failed (a bug: tantivy over memory fails only on a bug).
    #[error("[STRATA-E2504] the discovery index failed: {0}; this is a bug in strata, report it")]
    Index(String),
}

impl From<tantivy::TantivyError> for DiscoverError {
    fn from(e: tantivy::TantivyError) -> DiscoverError {
        DiscoverError::Index(e.to_string())
    }
}

/// One ranked document.
#[derive(Clone, Debug, PartialEq)]
pub struct Hit {
    /// 1-based rank.
    pub rank: usize,
    /// BM25 score (summed over fields, weighted).
    pub score: f32,
    /// The document's kind name (`brd-requirement`, `chunk`, …).
    pub kind: &'static str,
    /// Its id or slug.
    pub id: String,
    /// Its entity.
    pub entity: Option<String>,
    /// Its title.
    pub title: String,
    /// The words of the request found in it, as the request wrote them, in request order.
    pub matched: Vec<String>,
}

/// An in-memory index of one position's documents.
pub struct Discovery {
    reader: IndexReader,
    fields: [Field; 3],
    analyzer: TextAnalyzer,
    docs: Vec<Doc>,
    /// Per document, the analysed terms of its three fields.
    terms: Vec<BTreeSet<String>>,
    /// The journal position the documents were taken at.
    pub seq: u64,
}

fn analyzer() -> Result<TextAnalyzer, DiscoverError> {
    let stop = StopWordFilter::new(Language::English)
        .ok_or_else(|| DiscoverError::Index("no English stop words in this tantivy build".into()))?;
    Ok(TextAnalyzer::builder(SimpleTokenizer::default())
        .filter(RemoveLongFilter::limit(TOKEN_BYTES_MAX))
        .filter(LowerCaser)
        .filter(stop)
        .filter(Stemmer::new(Language::English))
        .build())
}

/// `(term, the text it was read from)` for each token of `text`, in order.
fn analyse(a: &mut TextAnalyzer, text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stream = a.token_stream(text);
    while stream.advance() {
        let t = stream.token();
        out.push((t.text.clone(), text.get(t.offset_from..t.offset_to).unwrap_or(&t.text).to_owned()));
    }
    out
}

impl Discovery {
    /// Indexes `docs` (in the order given, which [`strata_engine::kb::discover::documents`]
    /// makes the key order), taken at journal position `seq`.
    pub fn build(docs: Vec<Doc>, seq: u64) -> Result<Discovery, DiscoverError> {
        if docs.len() > DOCS_MAX {
            return Err(DiscoverError::TooMany(docs.len()));
        }
        let mut schema = Schema::builder();
        let text = TextOptions::default().set_indexing_options(
            TextFieldIndexing::default().set_tokenizer(ANALYZER).set_index_option(IndexRecordOption::WithFreqs),
        );
        let fields = [
            schema.add_text_field("title", text.clone()),
            schema.add_text_field("text", text.clone()),
            schema.add_text_field("entity", text),
        ];
        let ord = schema.add_u64_field("ord", FAST);
        let index = Index::create_in_ram(schema.build());
        let mut analyzer = analyzer()?;
        index.tokenizers().register(ANALYZER, analyzer.clone());
        let mut writer = index.writer_with_num_threads::<TantivyDocument>(1, WRITER_BYTES_MAX)?;
        let mut terms = Vec::with_capacity(docs.len());
        for (i, d) in docs.iter().enumerate() {
            let mut doc = TantivyDocument::default();
            let mut set = BTreeSet::new();
            for (f, value) in fields.iter().zip([&d.title, &d.text, &d.entity_name]) {
                doc.add_text(*f, value);
                set.extend(analyse(&mut analyzer, value).into_iter().map(|(t, _)| t));
            }
            doc.add_u64(ord, i as u64);
            writer.add_document(doc)?;
            terms.push(set);
        }
        writer.commit()?;
        let reader = index.reader()?;
        Ok(Discovery { reader, fields, analyzer, docs, terms, seq })
    }

    /// Number of indexed documents.
    pub fn len(&self) -> usize {
        self.docs.len()
    }

    /// True when nothing is indexed.
    pub fn is_empty(&self) -> bool {
        self.docs.is_empty()
    }

    /// The indexed documents, in index order.
    pub fn docs(&self) -> &[Doc] {
        &self.docs
    }

    /// The `limit` best documents for `text`, restricted to the kinds `only` names when it is
    /// not empty.
    pub fn search(&self, text: &str, limit: usize, only: &[&str]) -> Result<Vec<Hit>, DiscoverError> {
        if text.len() > QUERY_BYTES_MAX {
            return Err(DiscoverError::TooLong(text.len()));
        }
        if limit == 0 || limit > RESULTS_MAX {
            return Err(DiscoverError::Limit(limit));
        }
        // Distinct terms in order of appearance, each with the words it was read from.
        let mut words: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut order: Vec<String> = Vec::new();
        for (term, word) in analyse(&mut self.analyzer.clone(), text) {
            let seen = words.entry(term.clone()).or_default();
            if seen.is_empty() {
                if order.len() == QUERY_TERMS_MAX {
                    words.remove(&term);
                    continue;
                }
                order.push(term);
            }
            if !seen.contains(&word) {
                seen.push(word);
            }
        }
        if order.is_empty() {
            return Err(DiscoverError::NoWords(text.to_owned()));
        }
        let mut clauses: Vec<(Occur, Box<dyn Query>)> = Vec::new();
        for term in &order {
            for (f, boost) in self.fields.iter().zip([BOOST_TITLE, BOOST_TEXT, BOOST_ENTITY]) {
                let q = TermQuery::new(Term::from_field_text(*f, term), IndexRecordOption::WithFreqs);
                clauses.push((Occur::Should, Box::new(BoostQuery::new(Box::new(q), boost))));
            }
        }
        let query = BooleanQuery::new(clauses);
        let searcher = self.reader.searcher();
        // Every match is scored, so ties at the cut are broken by key, not by document address.
        let all = searcher.search(&query, &TopDocs::with_limit(self.docs.len().max(1)).order_by_score())?;
        let mut scored: Vec<(f32, usize)> = Vec::with_capacity(all.len());
        for (score, addr) in all {
            let column = searcher.segment_reader(addr.segment_ord).fast_fields().u64("ord")?;
            let Some(i) = column.first(addr.doc_id).map(|i| i as usize).filter(|&i| i < self.docs.len()) else {
                return Err(DiscoverError::Index(format!("document {addr:?} has no position")));
            };
            if only.is_empty() || only.contains(&self.docs[i].kind.name()) {
                scored.push((score, i));
            }
        }
        scored.sort_by(|a, b| {
            b.0.total_cmp(&a.0)
                .then_with(|| (self.docs[a.1].kind, &self.docs[a.1].id).cmp(&(self.docs[b.1].kind, &self.docs[b.1].id)))
        });
        scored.truncate(limit);
        Ok(scored
            .into_iter()
            .enumerate()
            .map(|(r, (score, i))| {
                let d = &self.docs[i];
                let matched = order
                    .iter()
                    .filter(|t| self.terms[i].contains(*t))
                    .flat_map(|t| words.get(t).into_iter().flatten().cloned())
                    .collect();
                Hit {
                    rank: r + 1,
                    score,
                    kind: d.kind.name(),
                    id: d.id.clone(),
                    entity: d.entity.clone(),
                    title: d.title.clone(),
                    matched,
                }
            })
            .collect())
    }
}
