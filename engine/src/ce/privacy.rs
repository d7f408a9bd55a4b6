//! The privacy scanner shared by capsules and telemetry: secret-like values, provider and
//! session identifiers, raw transcript markers, and (for telemetry) repository-identifying
//! content such as paths, URLs and emails.
//!
//! Secrets are also checked against the gitleaks default rules ([`super::gitleaks`]), after
//! strata's own. Rules are data ([`RULES`]): an id, a class, lower-case keywords and a regex. A rule's regex
//! runs only on text that contains one of its keywords (one Aho–Corasick pass finds them), so
//! ordinary prose costs one linear scan. Rules are written to catch the shape of real tokens
//! (fixed prefixes, lengths, a digit in an identifier, a value that is not a placeholder) so that
//! engineering prose passes: "run-the-full-suite before merge", "thread-safety review pending",
//! "Store secret: none", "Use sk-learn-compatible estimators".

use std::collections::BTreeMap;
use std::sync::LazyLock;

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, AhoCorasickKind, MatchKind};
use regex::Regex;

/// What a rule detects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Class {
    /// A credential, key or token.
    Secret,
    /// A provider, session, thread, agent or run identifier.
    ProviderId,
    /// Raw transcript, prompt or log content.
    Transcript,
    /// Repository-identifying or personal content (telemetry only): paths, URLs, emails.
    Identifying,
}

/// One rule.
pub struct RuleDef {
    /// Stable id (reported, never the matched text).
    pub id: &'static str,
    /// Class.
    pub class: Class,
    /// Lower-case keywords; the regex runs only if one occurs (case-insensitively).
    pub keywords: &'static [&'static str],
    /// The pattern (Rust `regex` syntax).
    pub regex: &'static str,
    /// For assignment rules: capture group 1 is the value, which must not be a placeholder.
    pub value_group: bool,
}

/// The rule set.
pub const RULES: &[RuleDef] = &[
    // Authorization headers and bearer tokens.
    RuleDef {
        id: "bearer-token",
        class: Class::Secret,
        keywords: &["bearer"],
        regex: r"(?i)\bbearer\s+([A-Za-z0-9._~+/=-]{8,})",
        value_group: true,
    },
    RuleDef {
        id: "basic-auth-header",
        class: Class::Secret,
        keywords: &["basic"],
        regex: r"(?i)authorization\s*[:=]\s*basic\s+[A-Za-z0-9+/=]{2,}",
        value_group: false,
    },
    RuleDef {
        id: "token-auth-header",
        class: Class::Secret,
        keywords: &["token", "apikey"],
        regex: r"(?i)authorization\s*[:=]\s*(?:token|apikey)\s+(\S{8,})",
        value_group: true,
    },
    // Package registries and forges.
    RuleDef {
        id: "npm-token",
        class: Class::Secret,
        keywords: &["npm_"],
        regex: r"\bnpm_[A-Za-z0-9]{20,}",
        value_group: false,
    },
    RuleDef {
        id: "github-token",
        class: Class::Secret,
        keywords: &["ghp_", "gho_", "ghu_", "ghs_", "ghr_"],
        regex: r"\bgh[pousr]_[A-Za-z0-9]{12,}",
        value_group: false,
    },
    RuleDef {
        id: "github-fine-grained-token",
        class: Class::Secret,
        keywords: &["github_pat_"],
        regex: r"\bgithub_pat_[A-Za-z0-9_]{22,}",
        value_group: false,
    },
    RuleDef {
        id: "gitlab-token",
        class: Class::Secret,
        keywords: &["glpat-"],
        regex: r"\bglpat-[A-Za-z0-9_-]{12,}",
        value_group: false,
    },
    // Chat, payments, clouds.
    RuleDef {
        id: "slack-token",
        class: Class::Secret,
        keywords: &["xox", "xapp-"],
        regex: r"\b(?:xox[abposr]-[A-Za-z0-9-]{10,}|xapp-\d-[A-Za-z0-9-]{10,})",
        value_group: false,
    },
    RuleDef {
        id: "slack-webhook",
        class: Class::Secret,
        keywords: &["hooks.slack.com"],
        regex: r"hooks\.slack\.com/(?:services|workflows)/[A-Za-z0-9+/_-]{20,}",
        value_group: false,
    },
    RuleDef {
        id: "stripe-key",
        class: Class::Secret,
        keywords: &["_live_", "_test_"],
        regex: r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{10,}",
        value_group: false,
    },
    RuleDef {
        id: "provider-api-key",
        class: Class::Secret,
        keywords: &["sk-", "rk-", "pk-"],
        regex: r"\b(?:sk|rk|pk)-(?:ant-[a-z0-9]+-|proj-|live[_-]|test[_-])?([A-Za-z0-9_-]{16,})",
        value_group: true,
    },
    RuleDef {
        id: "aws-access-key-id",
        class: Class::Secret,
        keywords: &["akia", "asia", "abia", "acca", "a3t"],
        regex: r"\b(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b",
        value_group: false,
    },
    RuleDef {
        id: "aws-secret-access-key",
        class: Class::Secret,
        keywords: &["aws", "secret_access", "secretaccess"],
        regex: r#"(?i)(?:aws)?_?secret_?access_?key["']?\s*[:=]\s*["']?([A-Za-z0-9/+=]{40})\b"#,
        value_group: true,
    },
    RuleDef {
        id: "google-api-key",
        class: Class::Secret,
        keywords: &["aiza"],
        regex: r"\bAIza[0-9A-Za-z_-]{35}",
        value_group: false,
    },
    RuleDef {
        id: "google-oauth-secret",
        class: Class::Secret,
        keywords: &["gocspx-"],
        regex: r"\bGOCSPX-[A-Za-z0-9_-]{28}",
        value_group: false,
    },
    // Keys and signed tokens.
    RuleDef {
        id: "private-key",
        class: Class::Secret,
        keywords: &["private key"],
        regex: r"-----BEGIN[ A-Z0-9]*PRIVATE KEY( BLOCK)?-----",
        value_group: false,
    },
    RuleDef {
        id: "jwt",
        class: Class::Secret,
        keywords: &["eyj"],
        regex: r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
        value_group: false,
    },
    // Credentials in URLs and connection strings.
    RuleDef {
        id: "credential-url",
        class: Class::Secret,
        keywords: &["://"],
        regex: r"(?i)\b[a-z][a-z0-9+.-]*://[^\s/:@]+:[^\s/@]+@[^\s/]+",
        value_group: false,
    },
    RuleDef {
        id: "jdbc-password",
        class: Class::Secret,
        keywords: &["jdbc:"],
        regex: r"(?i)\bjdbc:[^\s]*?(?:password|passwd)=[^\s;&]+",
        value_group: false,
    },
    // Assignments of a secret-named key to a value that is not a placeholder.
    RuleDef {
        id: "secret-assignment",
        class: Class::Secret,
        keywords: &[
            "password",
            "passwd",
            "api_key",
            "api-key",
            "apikey",
            "access_token",
            "access-token",
            "refresh_token",
            "refresh-token",
            "auth_token",
            "secret",
        ],
        regex: r#"(?i)(?:password|passwd|api[_-]?key|access[_-]token|refresh[_-]token|auth[_-]token|client[_-]secret|secret[_-]key|secret)["']?\s*[:=]\s*["']?([^\s"',;]{4,})"#,
        value_group: true,
    },
    // Provider, session, thread, agent and run identifiers (the value must look like an id).
    RuleDef {
        id: "provider-session-id",
        class: Class::ProviderId,
        keywords: &["claude", "codex", "provider"],
        regex: r"(?i)\b(?:claude|codex|provider)[ _-]?(?:session|thread|agent|run)(?:[ _-]?id)?\s*[:=#]?\s*([A-Za-z0-9_-]{6,})",
        value_group: true,
    },
    RuleDef {
        id: "labelled-session-id",
        class: Class::ProviderId,
        keywords: &["session", "thread", "agent", "run"],
        regex: r"(?i)\b(?:session|thread|agent|run)(?:[ _-]?id)?\s*[:=#]\s*([A-Za-z0-9_-]{6,})",
        value_group: true,
    },
    RuleDef {
        id: "prefixed-session-id",
        class: Class::ProviderId,
        keywords: &["sess", "thread", "agent", "run"],
        regex: r"(?i)\b(?:sess|session|thread|agent|run)[_-]([A-Za-z0-9_-]{8,})",
        value_group: true,
    },
    // Raw transcripts: a marker that introduces content, or a dialogue of role lines.
    RuleDef {
        id: "transcript-marker",
        class: Class::Transcript,
        keywords: &["raw", "verbatim", "full"],
        regex: r"(?i)\b(?:(?:raw|verbatim)[ _-]+(?:transcripts?|chats?|conversations?|prompts?|logs?|tool[ _-]output|ambient[ _-]output)\b|full[ _-]+(?:transcripts?|chats?|conversations?|prompts?|logs?|tool[ _-]output|ambient[ _-]output)\s*[:\n])",
        value_group: false,
    },
    RuleDef {
        id: "dialogue-transcript",
        class: Class::Transcript,
        keywords: &["user", "assistant", "human"],
        regex: r"(?im)^\s*(?:user|human)\s*:.*\n(?:.*\n)*?\s*assistant\s*:",
        value_group: false,
    },
    // Repository-identifying content, for telemetry.
    RuleDef {
        id: "url",
        class: Class::Identifying,
        keywords: &["http://", "https://"],
        regex: r"(?i)\bhttps?://\S+",
        value_group: false,
    },
    RuleDef {
        id: "home-path",
        class: Class::Identifying,
        keywords: &["/users/", "/home/", ":\\", "./"],
        regex: r#"(?i)(?:/Users/|/home/|\b[A-Z]:\\|(?:^|[\s"'(])\.\.?/)"#,
        value_group: false,
    },
    RuleDef {
        id: "email",
        class: Class::Identifying,
        keywords: &["@"],
        regex: r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b",
        value_group: false,
    },
    RuleDef {
        id: "repository-label",
        class: Class::Identifying,
        keywords: &["repo", "project"],
        regex: r"(?i)\b(?:repo|repository|project)[_-][A-Za-z0-9][A-Za-z0-9_.-]{2,}",
        value_group: false,
    },
];

/// Values that name no secret (`Store secret: none`, `<your key>`, `os.environ[…]`).
fn is_placeholder(v: &str) -> bool {
    const WORDS: [&str; 18] = [
        "none",
        "null",
        "nil",
        "n/a",
        "na",
        "empty",
        "redacted",
        "hidden",
        "masked",
        "true",
        "false",
        "required",
        "optional",
        "unset",
        "todo",
        "tbd",
        "example",
        "placeholder",
    ];
    // An environment lookup names where a secret lives, not the secret.
    const LOOKUPS: [&str; 5] = ["os.environ", "process.env", "getenv(", "env[", "env."];
    let lower = v.to_ascii_lowercase();
    let trimmed = lower.trim_matches(|c: char| !c.is_alphanumeric() && c != '/');
    let v = v.trim_end_matches(['`', ')', ']', '}', '.']);
    WORDS.contains(&trimmed)
        || LOOKUPS.iter().any(|l| lower.starts_with(l))
        || (v.starts_with('<') && v.ends_with('>'))
        || v.starts_with("${")
        || v.starts_with("{{")
        || v.starts_with('$')
        || v.chars().all(|c| c == v.chars().next().unwrap_or('*'))
}

/// An identifier-like value: at least two digits (ids are hex, uuids, counters), so a name such
/// as `thread-safety-v2-review` is not taken for one.
fn looks_like_id(v: &str) -> bool {
    v.bytes().filter(u8::is_ascii_digit).count() >= 2
}

/// A token-like value: a digit or an upper-case letter among lower-case ones, not a word list.
fn looks_like_token(v: &str) -> bool {
    let digit = v.bytes().any(|b| b.is_ascii_digit());
    let upper = v.bytes().any(|b| b.is_ascii_uppercase());
    let lower = v.bytes().any(|b| b.is_ascii_lowercase());
    digit || (upper && lower)
}

struct Compiled {
    /// strata's keywords and the gitleaks rules' keywords, in one automaton.
    keywords: AhoCorasick,
    /// Keyword pattern index → strata rule indexes.
    rules_of: Vec<Vec<usize>>,
    /// Keyword pattern index → gitleaks rule indexes.
    gitleaks_of: Vec<Vec<usize>>,
    /// Whether the gitleaks rules loaded (if not, every secret scan fails closed).
    gitleaks: bool,
    regexes: Vec<Regex>,
}

static COMPILED: LazyLock<Result<Compiled, String>> = LazyLock::new(|| {
    let mut words: Vec<&str> = Vec::new();
    let mut rules_of: Vec<Vec<usize>> = Vec::new();
    let mut gitleaks_of: Vec<Vec<usize>> = Vec::new();
    let mut add = |word: &'static str, rule: usize, own: bool| {
        let p = words.iter().position(|w| *w == word).unwrap_or_else(|| {
            words.push(word);
            rules_of.push(Vec::new());
            gitleaks_of.push(Vec::new());
            words.len() - 1
        });
        if own { rules_of[p].push(rule) } else { gitleaks_of[p].push(rule) }
    };
    for (i, r) in RULES.iter().enumerate() {
        for k in r.keywords {
            add(k, i, true);
        }
    }
    let gitleaks = super::gitleaks::keywords();
    for (i, ks) in gitleaks.iter().flatten().enumerate() {
        for k in *ks {
            add(k.as_str(), i, false);
        }
    }
    // A DFA: overlapping search over many short keywords gets little help from a prefilter,
    // and the DFA is several times faster than the NFA the builder picks by default.
    let keywords = AhoCorasickBuilder::new()
        .ascii_case_insensitive(true)
        .match_kind(MatchKind::Standard)
        .kind(Some(AhoCorasickKind::DFA))
        .build(&words)
        .map_err(|e| format!("privacy keywords do not build: {e}"))?;
    let regexes = RULES
        .iter()
        .map(|r| Regex::new(r.regex).map_err(|e| format!("privacy rule {} does not compile: {e}", r.id)))
        .collect::<Result<_, _>>()?;
    Ok(Compiled { keywords, rules_of, gitleaks_of, gitleaks: gitleaks.is_some(), regexes })
});

/// The rules compile, strata's and every gitleaks rule (a test checks this, so a broken rule
/// cannot ship).
pub fn rules_compile() -> Result<(), String> {
    COMPILED.as_ref().map(|_| ()).map_err(Clone::clone)?;
    SHAPE_REGEXES.as_ref().map(|_| ()).map_err(Clone::clone)?;
    super::gitleaks::compile_all().map(|_| ())
}

/// Values joined by `\n`, so one keyword pass covers them all.
struct Joined<'a> {
    text: String,
    /// Byte offset where each value starts in `text`.
    starts: Vec<usize>,
    values: &'a [&'a str],
}

impl<'a> Joined<'a> {
    fn new(values: &'a [&'a str]) -> Joined<'a> {
        let mut starts = Vec::with_capacity(values.len());
        let mut text = String::with_capacity(values.iter().map(|v| v.len() + 1).sum());
        for v in values {
            starts.push(text.len());
            text.push_str(v);
            text.push('\n');
        }
        Joined { text, starts, values }
    }

    /// Value index → (strata rules, gitleaks rules), each sorted, whose keyword occurs inside
    /// that value; gitleaks rules only when `gitleaks`.
    fn keyword_hits(&self, c: &Compiled, gitleaks: bool) -> BTreeMap<usize, (Vec<usize>, Vec<usize>)> {
        let mut hits: BTreeMap<usize, (Vec<usize>, Vec<usize>)> = BTreeMap::new();
        for m in c.keywords.find_overlapping_iter(&self.text) {
            let i = self.starts.partition_point(|s| *s <= m.start()) - 1;
            let p = m.pattern().as_usize();
            let wanted = !c.rules_of[p].is_empty() || (gitleaks && !c.gitleaks_of[p].is_empty());
            if wanted && m.end() <= self.starts[i] + self.values[i].len() {
                let (own, gl) = hits.entry(i).or_default();
                own.extend(&c.rules_of[p]);
                if gitleaks {
                    gl.extend(&c.gitleaks_of[p]);
                }
            }
        }
        for (own, gl) in hits.values_mut() {
            own.sort_unstable();
            own.dedup();
            gl.sort_unstable();
            gl.dedup();
        }
        hits
    }
}

/// A rule that matched (its id is reported, never the matched text).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Finding {
    /// Rule id: one of [`RULES`], or a gitleaks rule id.
    pub id: &'static str,
    /// What it detects.
    pub class: Class,
}

/// The first finding of a class in `classes` in `text`: strata's rules in order, then (for
/// secrets) the gitleaks default rules.
pub fn scan(text: &str, classes: &[Class]) -> Option<Finding> {
    scan_all(&[text], classes)
}

/// The first finding in `texts`: value by value, strata's rules in order, then (for secrets)
/// the gitleaks default rules. One keyword pass over all values decides which rule runs on
/// which value, so a value with no keyword of a rule never meets its regex.
pub fn scan_all(texts: &[&str], classes: &[Class]) -> Option<Finding> {
    let Ok(c) = &*COMPILED else {
        // Fail closed: a scanner that cannot run finds everything private.
        return RULES.first().map(|r| Finding { id: r.id, class: r.class });
    };
    let secrets = classes.contains(&Class::Secret);
    if secrets && !c.gitleaks {
        return Some(Finding { id: "gitleaks", class: Class::Secret });
    }
    let joined = Joined::new(texts);
    joined.keyword_hits(c, secrets).into_iter().find_map(|(i, (own, gitleaks))| {
        let text = texts[i];
        let found = own.iter().find_map(|&r| {
            let rule = &RULES[r];
            let re = &c.regexes[r];
            let hit = classes.contains(&rule.class)
                && if rule.value_group {
                    re.captures_iter(text).any(|cap| cap.get(1).is_some_and(|v| value_ok(rule, v.as_str())))
                } else {
                    re.is_match(text)
                };
            hit.then_some(Finding { id: rule.id, class: rule.class })
        });
        found.or_else(|| {
            gitleaks
                .iter()
                .find_map(|r| super::gitleaks::check(*r, text))
                .map(|id| Finding { id, class: Class::Secret })
        })
    })
}

fn value_ok(rule: &RuleDef, v: &str) -> bool {
    match rule.class {
        Class::ProviderId => looks_like_id(v),
        _ if rule.id == "provider-api-key" => looks_like_token(v),
        _ if rule.id == "bearer-token" => looks_like_token(v) && !is_placeholder(v),
        _ => !is_placeholder(v),
    }
}

/// A token shape as the reference runtime's detectors draw it, without strata's allowances for
/// prose (two digits in an id, 16 characters in an `sk-` key, a digit in a bearer token, no
/// placeholder values). [`shaped`] applies them only to content refused anyway, so that it is
/// refused as private, privacy first, as in the reference; prose that is accepted never meets
/// them.
struct Shape {
    id: &'static str,
    regex: &'static str,
    /// Also a telemetry shape (the reference's telemetry detector lacks labelled ids).
    telemetry: bool,
}

const SHAPES: &[Shape] = &[
    Shape { id: "bearer-token", regex: r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]+", telemetry: true },
    Shape {
        id: "provider-api-key",
        regex: r"(?i)\b(?:sk|rk|pk)-(?:(?:live|test)_)?[A-Za-z0-9_-]{8,}",
        telemetry: true,
    },
    Shape {
        id: "secret-assignment",
        regex: r"(?i)(?:password|passwd|api[_-]key|access[_-]token|refresh[_-]token|secret)\s*[:=]\s*\S{4,}",
        telemetry: true,
    },
    Shape {
        id: "prefixed-session-id",
        regex: r"(?i)\b(?:sess|session|thread|agent|run)[_-][A-Za-z0-9_-]{8,}",
        telemetry: true,
    },
    Shape {
        id: "labelled-session-id",
        regex: r"(?i)\b(?:session|thread|agent|run)(?:[ _-]?id)?\s*[:=#]\s*[A-Za-z0-9_-]{6,}",
        telemetry: false,
    },
];

static SHAPE_REGEXES: LazyLock<Result<Vec<Regex>, String>> = LazyLock::new(|| {
    SHAPES
        .iter()
        .map(|s| Regex::new(s.regex).map_err(|e| format!("privacy shape {} does not compile: {e}", s.id)))
        .collect()
});

/// The first of `texts` (refused for another reason) that has a secret or identifier shape of
/// the reference's detectors: the id of the shape. A shape set that cannot run finds one.
pub fn shaped(texts: &[&str], telemetry: bool) -> Option<&'static str> {
    let Ok(res) = &*SHAPE_REGEXES else { return Some("shapes") };
    texts.iter().find_map(|t| {
        SHAPES.iter().zip(res).find(|(s, re)| (s.telemetry || !telemetry) && re.is_match(t)).map(|(s, _)| s.id)
    })
}

/// Credential key names, refused in capsules and telemetry alike.
const CREDENTIAL_KEYS: &[&str] =
    &["credential", "credentials", "password", "passwd", "api_key", "access_token", "refresh_token", "auth_token"];

/// Further capsule key names: raw content and provider handles.
#[rustfmt::skip]
const CAPSULE_KEYS: &[&str] = &[
    "transcript", "prompt", "chat", "conversation", "log", "logs", "tool_output", "ambient_output", "session",
    "session_id", "thread_id", "agent_id", "run_id", "platform_handle", "provider_handle",
];

/// Further telemetry key names: bodies, handles, and repository or account identifiers
/// (`prompt_bytes` is exempt).
#[rustfmt::skip]
const TELEMETRY_KEYS: &[&str] = &[
    "prompt", "prompt_body", "raw_prompt", "source_body", "source_code", "log", "log_body", "secret",
    "platform_handle", "provider_handle", "provider_session_id", "session_id", "thread_id", "agent_id", "repository",
    "repository_path", "repo", "file_path", "email", "account_id", "account_email", "user_id", "org_id",
    "organization_id", "tenant_id", "subscription_id",
];

/// Whether `key` names private content: equal to a forbidden name, or containing it as a run of
/// `_`-delimited tokens (so `raw_transcript` and `provider_session_id` match).
fn key_matches(key: &str, forbidden: &[&str]) -> bool {
    // Most keys are short snake_case words: compare without allocating.
    let lower_eq =
        |a: &str, b: &str| a.len() == b.len() && a.bytes().zip(b.bytes()).all(|(x, y)| x.to_ascii_lowercase() == y);
    forbidden.iter().any(|f| {
        // `f` must start at a token start and end at a token end.
        key.char_indices().filter(|(i, _)| *i == 0 || key.as_bytes()[i - 1] == b'_').any(|(i, _)| {
            let end = i + f.len();
            key.get(i..end).is_some_and(|s| lower_eq(s, f)) && (end == key.len() || key.as_bytes()[end] == b'_')
        })
    })
}

/// A capsule key that must not appear.
pub fn capsule_key_forbidden(key: &str) -> bool {
    key_matches(key, CREDENTIAL_KEYS) || key_matches(key, CAPSULE_KEYS)
}

/// A telemetry key that must not appear.
pub fn telemetry_key_forbidden(key: &str) -> bool {
    key != "prompt_bytes" && (key_matches(key, CREDENTIAL_KEYS) || key_matches(key, TELEMETRY_KEYS))
}

/// The classes a capsule is scanned for.
pub const CAPSULE_CLASSES: &[Class] = &[Class::Secret, Class::ProviderId, Class::Transcript];
/// The classes telemetry is scanned for: every class.
pub const TELEMETRY_CLASSES: &[Class] = &[Class::Secret, Class::ProviderId, Class::Transcript, Class::Identifying];
