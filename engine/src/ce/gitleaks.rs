//! The gitleaks default rules, used as data (`rules/gitleaks.json`, MIT, provenance and
//! transformation in `rules/README.md`): the secret half of the privacy scanner beyond strata's
//! own rules.
//!
//! Semantics follow gitleaks: a rule's regex runs only when one of its keywords occurs
//! (case-insensitively; the privacy scanner's one keyword pass finds them); the secret is the rule's secret
//! group, else the first non-empty group, else the whole match; a secret at or below the rule's
//! Shannon entropy, a `generic-*` secret without a digit, or one an allowlist covers (the global
//! one, or the rule's own on the secret, the match or the line, with stopwords) is not a finding.
//! Patterns are RE2 syntax and run as ASCII byte regexes, as in Go. A rule compiles the first time
//! one of its keywords occurs.

use std::sync::{LazyLock, OnceLock};

use regex::bytes::{Regex, RegexBuilder};
use serde::Deserialize;

const DATA: &str = include_str!("rules/gitleaks.json");

#[derive(Deserialize)]
struct Doc {
    global: AllowData,
    rules: Vec<RuleData>,
}

#[derive(Deserialize)]
struct RuleData {
    id: String,
    pattern: String,
    secret_group: Option<usize>,
    keywords: Vec<String>,
    min_entropy: f64,
    allowlists: Vec<AllowData>,
}

#[derive(Deserialize)]
struct AllowData {
    #[serde(default)]
    condition: Option<String>,
    #[serde(default)]
    target: Option<String>,
    regexes: Vec<String>,
    stopwords: Vec<String>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Target {
    Secret,
    Match,
    Line,
}

struct Allow {
    all: bool,
    target: Target,
    regexes: Vec<Regex>,
    stopwords: Vec<String>,
}

impl Allow {
    fn build(d: &AllowData) -> Result<Allow, String> {
        let target = match d.target.as_deref() {
            None | Some("secret") => Target::Secret,
            Some("match") => Target::Match,
            Some("line") => Target::Line,
            Some(t) => return Err(format!("allowlist target {t}")),
        };
        Ok(Allow {
            all: d.condition.as_deref() == Some("and"),
            target,
            regexes: d.regexes.iter().map(|r| compile(r)).collect::<Result<_, _>>()?,
            stopwords: d.stopwords.iter().map(|s| s.to_ascii_lowercase()).collect(),
        })
    }

    fn allows(&self, secret: &[u8], whole: &[u8], line: &[u8]) -> bool {
        let text = match self.target {
            Target::Secret => secret,
            Target::Match => whole,
            Target::Line => line,
        };
        let by_regex = self.regexes.iter().any(|r| r.is_match(text));
        let lower = secret.to_ascii_lowercase();
        let by_word = self.stopwords.iter().any(|w| contains(&lower, w.as_bytes()));
        if self.all {
            (self.regexes.is_empty() || by_regex) && (self.stopwords.is_empty() || by_word)
        } else {
            by_regex || by_word
        }
    }
}

struct Rule {
    data: RuleData,
    compiled: OnceLock<Result<(Regex, Vec<Allow>), String>>,
}

impl Rule {
    fn compiled(&self) -> &Result<(Regex, Vec<Allow>), String> {
        self.compiled.get_or_init(|| {
            let re = compile(&self.data.pattern).map_err(|e| format!("gitleaks rule {}: {e}", self.data.id))?;
            let allow = self.data.allowlists.iter().map(Allow::build).collect::<Result<_, _>>()?;
            Ok((re, allow))
        })
    }
}

struct Set {
    rules: Vec<Rule>,
    global: Allow,
}

fn compile(pattern: &str) -> Result<Regex, String> {
    RegexBuilder::new(pattern).unicode(false).size_limit(64 << 20).build().map_err(|e| e.to_string())
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || hay.windows(needle.len()).any(|w| w == needle)
}

static SET: LazyLock<Result<Set, String>> = LazyLock::new(|| {
    let doc: Doc = serde_json::from_str(DATA).map_err(|e| format!("gitleaks rules are not readable: {e}"))?;
    let global = Allow::build(&doc.global)?;
    let rules = doc.rules.into_iter().map(|data| Rule { data, compiled: OnceLock::new() }).collect();
    Ok(Set { rules, global })
});

/// Every rule and allowlist compiles (a test runs this, so a rule Rust cannot run never ships).
pub fn compile_all() -> Result<usize, String> {
    let set = SET.as_ref().map_err(Clone::clone)?;
    for r in &set.rules {
        r.compiled().as_ref().map_err(Clone::clone)?;
    }
    Ok(set.rules.len())
}

/// Shannon entropy of `s` in bits per byte.
pub fn entropy(s: &[u8]) -> f64 {
    let mut counts = [0usize; 256];
    for b in s {
        counts[usize::from(*b)] += 1;
    }
    let n = s.len() as f64;
    counts.iter().filter(|c| **c > 0).map(|c| *c as f64 / n).map(|p| -p * p.log2()).sum()
}

/// Each rule's lower-case keywords, in data order (`None` if the rules cannot be loaded): the
/// privacy scanner folds them into its one keyword pass.
pub(crate) fn keywords() -> Option<Vec<&'static [String]>> {
    let set = SET.as_ref().ok()?;
    Some(set.rules.iter().map(|r| r.data.keywords.as_slice()).collect())
}

/// The id of the first gitleaks rule (in data order) with a finding in `text`; `Some("gitleaks")`
/// if the rules cannot be loaded or one cannot compile (fail closed). A direct check for tools
/// and tests, with a substring test per keyword; the privacy scanner finds keywords in one pass.
pub fn find(text: &str) -> Option<&'static str> {
    let Ok(set) = &*SET else { return Some("gitleaks") };
    let lower = text.to_ascii_lowercase();
    (0..set.rules.len())
        .filter(|r| set.rules[*r].data.keywords.iter().any(|k| lower.contains(k.as_str())))
        .find_map(|r| check(r, text))
}

/// Rule `rule`'s id if it has a finding in `text` (or cannot compile: fail closed).
pub(crate) fn check(rule: usize, text: &str) -> Option<&'static str> {
    let Ok(set) = &*SET else { return Some("gitleaks") };
    let rule = set.rules.get(rule)?;
    let Ok((re, allow)) = rule.compiled() else { return Some(rule.data.id.as_str()) };
    let bytes = text.as_bytes();
    // Keywords hit often in prose ("capital" holds "api"); a match test on the lazy DFA is far
    // cheaper than capture groups, which run only when there is a match.
    if !re.is_match(bytes) {
        return None;
    }
    re.captures_iter(bytes)
        .any(|cap| {
            let Some(whole) = cap.get(0) else { return false };
            let secret = match rule.data.secret_group {
                Some(g) => cap.get(g),
                None => cap.iter().skip(1).flatten().find(|c| !c.is_empty()).or(Some(whole)),
            };
            let Some(secret) = secret.map(|s| s.as_bytes()).filter(|s| !s.is_empty()) else { return false };
            if rule.data.min_entropy > 0.0 && entropy(secret) <= rule.data.min_entropy {
                return false;
            }
            if rule.data.id.starts_with("generic") && !secret.iter().any(u8::is_ascii_digit) {
                return false;
            }
            let start = bytes[..whole.start()].iter().rposition(|b| *b == b'\n').map_or(0, |p| p + 1);
            let end = bytes[whole.end()..].iter().position(|b| *b == b'\n').map_or(bytes.len(), |p| whole.end() + p);
            let line = &bytes[start..end];
            !set.global.allows(secret, whole.as_bytes(), line)
                && !allow.iter().any(|a| a.allows(secret, whole.as_bytes(), line))
        })
        .then_some(rule.data.id.as_str())
}
