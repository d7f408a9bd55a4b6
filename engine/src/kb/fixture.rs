//! A deterministic, seed-scale knowledge base: 15 entities across the four tiers, 164
//! specification files (requirements, domains, modules, screens) totalling about 615,000 o200k
//! tokens, plus change requests, initiatives, issues, research notes and devlogs, the artifacts
//! of the seed's further prompt sections (a design profile, stack concerns and tech skills per
//! entity, an implementation reference per module and screen, modification routes), all with
//! consistent two-way cross-references (module dependencies within an entity and from products to
//! foundation and cross-cutting modules, screens calling `module#method`), and a way to inject
//! known defects.
//!
//! The same seed gives the same files, byte for byte. The generator is a pure function of the
//! seed (a local SplitMix64 sequence, not an RNG service), so tests, benchmarks and the bundled
//! example share one knowledge base without checking megabytes of text into the repository.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::artifact::ArtifactDraft;
use super::intake::SourceFile;
use super::kind::{ArtifactKey, ArtifactKind};

/// SplitMix64: a tiny, well-known deterministic sequence.
#[derive(Clone, Debug)]
pub struct Sequence(u64);

impl Sequence {
    /// Starts at `seed`.
    pub fn new(seed: u64) -> Sequence {
        Sequence(seed)
    }

    /// Next 64 bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }

    fn pick<'a>(&mut self, items: &'a [&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

/// The shape of a generated knowledge base.
#[derive(Clone, Debug)]
pub struct FixtureSpec {
    /// Seed.
    pub seed: u64,
    /// `(entity id, display name, tier, requirements, domains, modules, screens)` per entity.
    pub entities: Vec<(String, String, &'static str, usize, usize, usize, usize)>,
    /// Target o200k tokens per requirement, domain, module and screen body (approximate).
    pub tokens: [usize; 4],
    /// Change requests per entity.
    pub change_requests: usize,
    /// Issues per entity.
    pub issues: usize,
    /// Whether to generate the artifacts of the seed's further prompt sections (design profiles,
    /// stack concerns, tech skills, implementation references, modification routes).
    pub sections: bool,
}

impl FixtureSpec {
    /// The seed-scale knowledge base: 15 entities, 164 specification files, ~615k tokens.
    pub fn seed_scale(seed: u64) -> FixtureSpec {
        let e =
            |id: &str, name: &str, tier: &'static str, r, d, m, s| (id.to_owned(), name.to_owned(), tier, r, d, m, s);
        FixtureSpec {
            seed,
            entities: vec![
                e("billing", "Billing", "product", 5, 1, 2, 7),
                e("ai-sales", "AI Sales", "product", 5, 1, 2, 7),
                e("crm", "CRM", "product", 5, 1, 2, 7),
                e("analytics", "Analytics", "product", 5, 1, 2, 7),
                e("support-desk", "Support Desk", "product", 5, 1, 2, 7),
                e("marketplace", "Marketplace", "product", 5, 1, 2, 7),
                e("platform", "Platform", "foundation", 3, 1, 1, 1),
                e("data-lake", "Data Lake", "foundation", 3, 1, 1, 1),
                e("identity", "Identity", "foundation", 3, 1, 1, 1),
                e("messaging", "Messaging", "foundation", 3, 1, 1, 1),
                e("observability", "Observability", "foundation", 3, 1, 1, 1),
                e("agentic-flow-framework", "Agentic Flow Framework", "discipline", 4, 1, 1, 2),
                e("qa-practice", "QA Practice", "discipline", 4, 1, 1, 2),
                e("design-system", "Design System", "discipline", 4, 1, 1, 2),
                e("shared-services", "Shared Services", "cross-cutting", 6, 2, 4, 8),
            ],
            tokens: [560, 6900, 5900, 5050],
            change_requests: 4,
            issues: 3,
            sections: true,
        }
    }

    /// A large synthetic graph for benchmarks: `entities` product entities (plus one
    /// cross-cutting) with `per_entity` specification artifacts each and short bodies.
    pub fn scaled(seed: u64, entities: usize, per_entity: usize) -> FixtureSpec {
        let r = (per_entity / 4).max(1);
        let d = (per_entity / 20).max(1);
        let m = (per_entity / 8).max(1);
        let s = per_entity.saturating_sub(r + d + m).max(1);
        let mut list: Vec<_> =
            (0..entities).map(|i| (format!("product-{i}"), format!("Product {i}"), "product", r, d, m, s)).collect();
        list.push(("shared-services".into(), "Shared Services".into(), "cross-cutting", r, d, m, s));
        FixtureSpec {
            seed,
            entities: list,
            tokens: [20, 20, 20, 20],
            change_requests: (per_entity / 10).max(1),
            issues: (per_entity / 20).max(1),
            sections: false,
        }
    }
}

/// A generated knowledge base.
#[derive(Clone, Debug)]
pub struct Fixture {
    /// Every artifact, in generation order.
    pub drafts: Vec<ArtifactDraft>,
}

const WORDS: &[&str] = &[
    "invoice",
    "customer",
    "account",
    "ledger",
    "payment",
    "order",
    "catalog",
    "session",
    "token",
    "record",
    "report",
    "export",
    "import",
    "schedule",
    "workflow",
    "approval",
    "review",
    "audit",
    "policy",
    "quota",
    "region",
    "tenant",
    "profile",
    "template",
    "notification",
    "channel",
    "queue",
    "batch",
    "snapshot",
    "version",
    "draft",
    "threshold",
    "discount",
    "forecast",
    "pipeline",
    "segment",
    "metric",
    "dashboard",
    "filter",
    "summary",
    "detail",
    "history",
    "retry",
    "timeout",
    "cache",
    "index",
    "query",
    "response",
    "request",
    "payload",
    "field",
    "column",
    "entry",
];
const VERBS: &[&str] = &[
    "validates",
    "records",
    "computes",
    "publishes",
    "rejects",
    "archives",
    "reconciles",
    "exports",
    "schedules",
    "notifies",
    "updates",
    "locks",
    "releases",
    "aggregates",
    "filters",
    "displays",
    "retries",
    "escalates",
    "signs",
];
const ADJECTIVES: &[&str] = &[
    "pending",
    "approved",
    "corrected",
    "overdue",
    "partial",
    "final",
    "active",
    "archived",
    "shared",
    "regional",
    "monthly",
    "daily",
    "external",
    "internal",
    "primary",
    "secondary",
    "locked",
    "visible",
    "stale",
    "current",
];
const ACTORS: &[&str] =
    &["accountant", "customer", "sales agent", "support agent", "administrator", "auditor", "analyst", "operator"];

fn sentence(rng: &mut Sequence) -> String {
    let a = rng.pick(ACTORS);
    let w1 = rng.pick(WORDS);
    let w2 = rng.pick(WORDS);
    let v = rng.pick(VERBS);
    let adj = rng.pick(ADJECTIVES);
    match rng.below(5) {
        0 => {
            format!("When the {a} opens a {adj} {w1}, the system {v} the {w2} and keeps the previous value for audit.")
        }
        1 => format!("The {w1} service {v} every {adj} {w2} before it is shown to the {a}."),
        2 => format!(
            "A {adj} {w1} must not change its {w2} once the {a} has confirmed it; corrections create a new version."
        ),
        3 => format!(
            "If the {w2} is {adj}, the {w1} {v} it within the configured window and raises a notification otherwise."
        ),
        _ => format!(
            "Each {w1} carries the {w2} it was derived from, so the {a} can trace a {adj} value back to its source."
        ),
    }
}

/// Prose of about `tokens` o200k tokens, in sections.
fn prose(rng: &mut Sequence, title: &str, tokens: usize) -> String {
    const SECTIONS: &[&str] = &["Purpose", "Behaviour", "Rules", "Edge cases", "Data", "Errors", "Notes"];
    let mut out = format!("# {title}\n\n");
    // About 21 o200k tokens per generated sentence (measured on this vocabulary).
    let sentences = (tokens / 21).max(1);
    let mut section = 0;
    let mut written = 0;
    while written < sentences {
        out.push_str(&format!("## {}\n\n", SECTIONS[section % SECTIONS.len()]));
        section += 1;
        let para = 4 + rng.below(4);
        for _ in 0..para.min(sentences - written) {
            out.push_str(&sentence(rng));
            out.push(' ');
            written += 1;
        }
        out.push_str("\n\n");
        if rng.chance(30) && written < sentences {
            for _ in 0..3 {
                out.push_str(&format!("- {}\n", sentence(rng)));
                written += 1;
            }
            out.push('\n');
        }
    }
    out
}

struct Builder {
    rng: Sequence,
    drafts: BTreeMap<ArtifactKey, ArtifactDraft>,
    order: Vec<ArtifactKey>,
}

impl Builder {
    fn add(&mut self, kind: ArtifactKind, id: &str, state: &str, fields: Value, body: String, source: String) {
        let key = ArtifactKey::new(kind, id);
        let fields = match fields {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        self.order.push(key.clone());
        self.drafts
            .insert(key.clone(), ArtifactDraft { key, state: state.to_owned(), fields, body, source: Some(source) });
    }

    fn push_link(&mut self, kind: ArtifactKind, id: &str, field: &str, target: &str) {
        if let Some(d) = self.drafts.get_mut(&ArtifactKey::new(kind, id)) {
            super::intake::with(&mut d.fields, field, target);
        }
    }

    fn set(&mut self, kind: ArtifactKind, id: &str, field: &str, value: Value) {
        if let Some(d) = self.drafts.get_mut(&ArtifactKey::new(kind, id)) {
            d.fields.insert(field.to_owned(), value);
        }
    }
}

/// Generates the knowledge base described by `spec`.
pub fn generate(spec: &FixtureSpec) -> Fixture {
    use ArtifactKind as K;
    let mut b = Builder { rng: Sequence::new(spec.seed), drafts: BTreeMap::new(), order: Vec::new() };
    let cross = spec.entities.iter().find(|e| e.2 == "cross-cutting").map(|e| e.0.clone());
    let mut cr_no = 0usize;
    let mut iss_no = 0usize;
    let mut rn_no = 0usize;
    let mut dl_no = 0usize;
    let mut shared_modules: Vec<String> = Vec::new();
    // (entity, tier, modules) per entity, for the module dependencies across entities.
    let mut entity_modules: Vec<(String, &str, Vec<String>)> = Vec::new();
    // (entity, name, tier, modules, screens) per entity, for the sections' artifacts.
    let mut described: Vec<Described> = Vec::new();
    // Cross-cutting first, so product requirements can use its modules.
    let mut ordered: Vec<&(String, String, &str, usize, usize, usize, usize)> =
        spec.entities.iter().filter(|e| e.2 == "cross-cutting").collect();
    ordered.extend(spec.entities.iter().filter(|e| e.2 != "cross-cutting"));
    for (ei, (eid, name, tier, nr, nd, nm, ns)) in ordered.into_iter().enumerate() {
        let dir = eid.clone();
        b.add(
            K::Entity,
            eid,
            "active",
            json!({"name": name, "tier": tier, "description": format!("{name}: the {tier} branch of the knowledge base.")}),
            String::new(),
            format!("{dir}/entity.json"),
        );
        let domains: Vec<String> = (0..*nd).map(|i| format!("{eid}-domain-{}", i + 1)).collect();
        let modules: Vec<String> = (0..*nm).map(|i| format!("{eid}-api-{}", i + 1)).collect();
        let screens: Vec<String> = (0..*ns).map(|i| format!("{eid}-screen-{}", i + 1)).collect();
        let brds: Vec<String> = (0..*nr).map(|i| format!("BRD-{}.{}", ei + 1, i + 1)).collect();
        if Some(eid) == cross.as_ref() {
            shared_modules = modules.clone();
        }
        for (i, d) in domains.iter().enumerate() {
            let title = format!("{name} domain {}", i + 1);
            let body = prose(&mut b.rng, &title, spec.tokens[1]);
            let actors: Vec<&str> =
                (0..3).map(|_| b.rng.pick(ACTORS)).collect::<std::collections::BTreeSet<_>>().into_iter().collect();
            let rules = [sentence(&mut b.rng), sentence(&mut b.rng)];
            let fields = json!({
                "entity": eid, "title": title, "actors": actors,
                "stateMachines": [{"name": format!("{d}-record"), "states": ["draft", "active", "closed"],
                    "transitions": [{"from": "draft", "to": "active", "on": "confirm"}, {"from": "active", "to": "closed", "on": "close"}]}],
                "validationRules": rules,
                "brdRequirements": [], "backendModules": [], "uiScreens": []
            });
            b.add(K::FunctionalDomain, d, "active", fields, body, format!("{dir}/domains/{d}.md"));
        }
        for (i, m) in modules.iter().enumerate() {
            let title = format!("{name} API {}", i + 1);
            let body = prose(&mut b.rng, &title, spec.tokens[2]);
            b.add(K::BackendModule, m, "active", json!({"entity": eid, "title": title, "brdRequirements": [], "functionalDomains": [], "apiMethods": []}), body, format!("{dir}/modules/{m}.md"));
        }
        for (i, s) in screens.iter().enumerate() {
            let title = format!("{name} screen {}", i + 1);
            let body = prose(&mut b.rng, &title, spec.tokens[3]);
            let components: Vec<String> = (0..3).map(|k| format!("{}Panel{k}", b.rng.pick(WORDS))).collect();
            let state = if b.rng.chance(80) { "active" } else { "draft" };
            let field = b.rng.pick(WORDS);
            // Named as `module#method` once the entity's methods exist (below).
            let source = modules.first().cloned().unwrap_or_else(|| "api".into());
            let fields = json!({"entity": eid, "title": title, "components": components, "dataBindings": [{"field": field, "source": source}], "actions": [], "brdRequirements": [], "functionalDomains": []});
            b.add(K::UiScreen, s, state, fields, body, format!("{dir}/screens/{s}.md"));
        }
        // Domains own the entity's modules and screens.
        for (mi, m) in modules.iter().enumerate() {
            let d = &domains[mi % domains.len()];
            b.push_link(K::FunctionalDomain, d, "backendModules", m);
            b.push_link(K::BackendModule, m, "functionalDomains", d);
        }
        for (si, s) in screens.iter().enumerate() {
            let d = &domains[si % domains.len()];
            b.push_link(K::FunctionalDomain, d, "uiScreens", s);
            b.push_link(K::UiScreen, s, "functionalDomains", d);
        }
        for (ri, r) in brds.iter().enumerate() {
            let title = format!("{name} requirement {}", ri + 1);
            let body = prose(&mut b.rng, &title, spec.tokens[0]);
            let state = if b.rng.chance(60) { "approved" } else { "implemented" };
            let criterion = format!(
                "WHEN the {} is {} THE SYSTEM SHALL {} it",
                b.rng.pick(WORDS),
                b.rng.pick(ADJECTIVES),
                b.rng.pick(VERBS)
            );
            let fields = json!({"entity": eid, "title": title, "functionalDomains": [], "backendModules": [], "uiScreens": [], "acceptanceCriteria": [criterion]});
            b.add(K::BrdRequirement, r, state, fields, body, format!("{dir}/requirements/{r}.md"));
            let d = domains[ri % domains.len()].clone();
            b.push_link(K::BrdRequirement, r, "functionalDomains", &d);
            b.push_link(K::FunctionalDomain, &d, "brdRequirements", r);
            let m = modules[ri % modules.len()].clone();
            b.push_link(K::BrdRequirement, r, "backendModules", &m);
            b.push_link(K::BackendModule, &m, "brdRequirements", r);
            for k in 0..(1 + ri % 2).min(screens.len()) {
                let s = screens[(ri * 2 + k) % screens.len()].clone();
                b.push_link(K::BrdRequirement, r, "uiScreens", &s);
                b.push_link(K::UiScreen, &s, "brdRequirements", r);
            }
            if *tier == "product" && ri % 3 == 0 && !shared_modules.is_empty() {
                let m = shared_modules[ri % shared_modules.len()].clone();
                b.push_link(K::BrdRequirement, r, "backendModules", &m);
                b.push_link(K::BackendModule, &m, "brdRequirements", r);
            }
            if ri > 0 && b.rng.chance(30) {
                b.push_link(K::BrdRequirement, r, "dependsOn", &brds[ri - 1]);
            }
        }
        // Every screen and module is reached by at least one requirement of its entity.
        for (si, s) in screens.iter().enumerate() {
            let has = b.drafts[&ArtifactKey::new(K::UiScreen, s)].fields["brdRequirements"]
                .as_array()
                .is_some_and(|a| !a.is_empty());
            if !has {
                let r = brds[si % brds.len()].clone();
                b.push_link(K::BrdRequirement, &r, "uiScreens", s);
                b.push_link(K::UiScreen, s, "brdRequirements", &r);
            }
        }
        // Traces: API methods and screen actions point at requirements their artifact lists.
        for m in &modules {
            let reqs: Vec<String> =
                link_list(&b.drafts[&ArtifactKey::new(K::BackendModule, m)].fields, "brdRequirements");
            let methods: Vec<Value> = reqs
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    let verb = b.rng.pick(&["get", "list", "create", "update", "reissue", "archive"]);
                    let noun = b.rng.pick(WORDS);
                    json!({"name": format!("{verb}{}{i}", capitalise(noun)), "signature": format!("{verb}_{noun}(id: {}Id) -> {}", capitalise(noun), capitalise(noun)), "brdRef": r})
                })
                .collect();
            b.set(K::BackendModule, m, "apiMethods", Value::Array(methods));
        }
        // Module dependencies inside the entity: every module calls its entity's first one.
        for m in modules.iter().skip(1) {
            b.push_link(K::BackendModule, m, "dependsOn", &modules[0]);
            b.push_link(K::BackendModule, &modules[0], "dependedOnBy", m);
        }
        entity_modules.push((eid.clone(), *tier, modules.clone()));
        described.push((eid.clone(), name.clone(), *tier, modules.clone(), screens.clone()));
        // `module#method` of the entity's method tracing each requirement (the first one).
        let mut method_for: BTreeMap<String, String> = BTreeMap::new();
        for m in &modules {
            let fields = &b.drafts[&ArtifactKey::new(K::BackendModule, m)].fields;
            for method in fields.get("apiMethods").and_then(Value::as_array).into_iter().flatten() {
                if let (Some(name), Some(r)) = (method["name"].as_str(), method["brdRef"].as_str()) {
                    method_for.entry(r.to_owned()).or_insert_with(|| format!("{m}#{name}"));
                }
            }
        }
        for s in &screens {
            let reqs: Vec<String> = link_list(&b.drafts[&ArtifactKey::new(K::UiScreen, s)].fields, "brdRequirements");
            let actions: Vec<Value> = reqs
                .iter()
                .map(|r| {
                    let mut a = json!({"name": b.rng.pick(VERBS), "brdRef": r});
                    if let Some(call) = method_for.get(r) {
                        a["call"] = Value::String(call.clone());
                    }
                    a
                })
                .collect();
            b.set(K::UiScreen, s, "actions", Value::Array(actions));
            let draft = &b.drafts[&ArtifactKey::new(K::UiScreen, s)];
            let mut bindings = draft.fields.get("dataBindings").cloned().unwrap_or(Value::Null);
            if let Some(first) = bindings.get_mut(0)
                && let Some(module) = first["source"].as_str().map(str::to_owned)
            {
                let method = method_for.values().find(|c| c.starts_with(&format!("{module}#")));
                first["source"] = Value::String(method.cloned().unwrap_or_else(|| format!("{module}.get")));
            }
            b.set(K::UiScreen, s, "dataBindings", bindings);
        }
        // Change requests, an initiative grouping them, issues, notes and devlogs.
        let ncr = if *tier == "product" { spec.change_requests } else { spec.change_requests.div_ceil(2) };
        let mut crs: Vec<String> = Vec::new();
        for i in 0..ncr {
            cr_no += 1;
            let cr = format!("CR-{cr_no}");
            let refs: Vec<String> = (0..1 + b.rng.below(2))
                .map(|k| brds[(i + k) % brds.len()].clone())
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            let state = ["draft", "approved", "in-progress", "done", "done"][b.rng.below(5)];
            let title = format!("Change {} of {name}", i + 1);
            let body = prose(&mut b.rng, &title, 180);
            b.add(
                K::ChangeRequest,
                &cr,
                state,
                json!({"entity": eid, "title": title, "brdRefs": refs}),
                body,
                format!("changes/{cr}.md"),
            );
            for r in &refs {
                b.push_link(K::BrdRequirement, r, "linkedCrs", &cr);
            }
            if i > 0 && b.rng.chance(20) {
                b.push_link(K::ChangeRequest, &cr, "dependsOn", &crs[i - 1]);
            }
            crs.push(cr);
        }
        let bi = format!("BI-{}", ei + 1);
        let mut bi_brds = std::collections::BTreeSet::new();
        for cr in &crs {
            b.set(K::ChangeRequest, cr, "linkedBacklogItem", Value::String(bi.clone()));
            for r in link_list(&b.drafts[&ArtifactKey::new(K::ChangeRequest, cr)].fields, "brdRefs") {
                bi_brds.insert(r);
            }
        }
        for r in &bi_brds {
            b.push_link(K::BrdRequirement, r, "linkedBacklogItems", &bi);
        }
        b.add(
            K::BacklogItem,
            &bi,
            "in-progress",
            json!({"entity": eid, "title": format!("{name} initiative"), "linkedCrIds": crs, "linkedBrdRefs": bi_brds.iter().collect::<Vec<_>>()}),
            String::new(),
            format!("backlog/{bi}.json"),
        );
        let nis = if *tier == "product" { spec.issues } else { spec.issues.div_ceil(2) };
        let mut issues = Vec::new();
        for i in 0..nis {
            iss_no += 1;
            let iss = format!("ISS-{iss_no}");
            let (state, promoted) = match i % 3 {
                0 => ("open", None),
                1 => ("triaged", None),
                _ => ("promoted", crs.get(i % crs.len().max(1)).cloned()),
            };
            let title = format!("{} {} in {name}", capitalise(b.rng.pick(ADJECTIVES)), b.rng.pick(WORDS));
            let body = prose(&mut b.rng, &title, 120);
            let category = ["defect", "process-gap", "performance"][i % 3];
            let severity = ["low", "medium", "high", "critical"][b.rng.below(4)];
            let mut fields = json!({"entity": eid, "title": title, "category": category, "severity": severity});
            if let Some(cr) = &promoted {
                let taken = b.drafts[&ArtifactKey::new(K::ChangeRequest, cr)].fields.contains_key("promotedFrom");
                if taken {
                    fields["promotedTo"] = Value::Null;
                } else {
                    fields["promotedTo"] = Value::String(cr.clone());
                    b.set(K::ChangeRequest, cr, "promotedFrom", Value::String(iss.clone()));
                }
            }
            if fields.get("promotedTo") == Some(&Value::Null) {
                if let Value::Object(m) = &mut fields {
                    m.remove("promotedTo");
                }
                b.add(K::Issue, &iss, "triaged", fields, body, format!("issues/{iss}.md"));
            } else {
                b.add(K::Issue, &iss, state, fields, body, format!("issues/{iss}.md"));
            }
            issues.push(iss);
        }
        if ei % 2 == 0 && !issues.is_empty() {
            rn_no += 1;
            dl_no += 1;
            let rn = format!("RN-{rn_no}");
            let dl = format!("DL-{dl_no}");
            let title = format!("Observations on {name}");
            let body = prose(&mut b.rng, &title, 300);
            b.add(
                K::ResearchNote,
                &rn,
                "published",
                json!({"entity": eid, "title": title, "relatedIssues": [issues[0]], "relatedDevlogs": [dl]}),
                body,
                format!("research/{rn}.md"),
            );
            let title = format!("Working log for {name}");
            let body = prose(&mut b.rng, &title, 200);
            b.add(
                K::Devlog,
                &dl,
                "recorded",
                json!({"entity": eid, "title": title, "date": format!("2026-11-{:02}", 1 + ei % 28), "relatedIssues": [issues[0]], "relatedCrs": crs.first().cloned().into_iter().collect::<Vec<_>>()}),
                body,
                format!("devlog/{dl}.md"),
            );
        }
    }
    // Across entities, a product's first module calls a foundation module and a cross-cutting
    // one (the shared authentication module of the seed's example), spread so no module is
    // depended on by more than a few hundred.
    let providers = |tier: &str| -> Vec<String> {
        entity_modules.iter().filter(|e| e.1 == tier).filter_map(|e| e.2.first().cloned()).collect()
    };
    let (foundation, shared) = (providers("foundation"), cross_modules(&entity_modules));
    for (pi, (_, _, modules)) in entity_modules.iter().filter(|e| e.1 == "product").enumerate() {
        let Some(m) = modules.first() else { continue };
        for list in [&foundation, &shared] {
            if list.is_empty() {
                continue;
            }
            let p = &list[pi % list.len()];
            b.push_link(K::BackendModule, m, "dependsOn", p);
            b.push_link(K::BackendModule, p, "dependedOnBy", m);
        }
    }
    if spec.sections {
        sections(&mut b, spec.seed, &described);
    }
    let drafts = b.order.iter().filter_map(|k| b.drafts.remove(k)).collect();
    Fixture { drafts }
}

/// An entity as the sections' artifacts need it: id, name, tier, modules, screens.
type Described = (String, String, &'static str, Vec<String>, Vec<String>);

const STACKS: &[&str] = &["postgresql", "rust", "react", "kafka", "redis", "terraform"];
const VOICES: &[&str] = &[
    "Plain and exact; second person; numbers always with their unit",
    "Warm and brief; first person plural; no jargon on screens",
    "Neutral and precise; third person; every warning says what to do next",
];

/// The artifacts behind the seed's further prompt sections, per entity: a design profile, stack
/// concerns and tech skills (more for the cross-cutting entity), an implementation reference
/// per module and screen, and two modification routes. Drawn from their own sequence after
/// everything else, so the rest of the fixture is what it was without them.
fn sections(b: &mut Builder, seed: u64, described: &[Described]) {
    use ArtifactKind as K;
    let mut rng = Sequence::new(seed ^ 0x5ec7_1095_5ec7_1095);
    for (eid, name, tier, modules, screens) in described {
        let title = format!("{name} design profile");
        let body = prose(&mut rng, &title, 120);
        let colour = |rng: &mut Sequence| format!("#{:06x}", rng.next_u64() & 0xff_ffff);
        let colours = json!({"primary": colour(&mut rng), "accent": colour(&mut rng), "surface": "#ffffff"});
        let brand = format!("{name}: the {} {} for every {}", rng.pick(ADJECTIVES), rng.pick(WORDS), rng.pick(ACTORS));
        let voice = rng.pick(VOICES);
        let id = format!("{eid}-design");
        let fields = json!({"entity": eid, "title": title, "brand": brand, "colours": colours, "voice": voice});
        b.add(K::DesignProfile, &id, "active", fields, body, format!("{eid}/design/{id}.md"));
        let shared = *tier == "cross-cutting";
        for i in 1..=(if shared { 3 } else { 1 }) {
            let id = format!("{eid}-concern-{i}");
            let stack = rng.pick(STACKS);
            let title = format!("{name}: {stack} concern {i}");
            let body = prose(&mut rng, &title, 80);
            let severity = if rng.chance(50) { "must" } else { "advice" };
            let fields = json!({"entity": eid, "title": title, "stack": stack, "concern": sentence(&mut rng), "severity": severity, "appliesTo": [format!("src/{eid}/**")]});
            b.add(K::StackConcern, &id, "active", fields, body, format!("{eid}/stack/{id}.md"));
        }
        for i in 1..=(if shared { 2 } else { 1 }) {
            let id = format!("{eid}-skill-{i}");
            let technology = rng.pick(STACKS);
            let title = format!("{name}: working with {technology}");
            let body = prose(&mut rng, &title, 80);
            let fields = json!({"entity": eid, "title": title, "technology": technology, "skill": sentence(&mut rng), "commands": [format!("cargo test -p {eid}")]});
            b.add(K::TechSkill, &id, "active", fields, body, format!("{eid}/stack/{id}.md"));
        }
        for m in modules {
            let id = format!("{m}-impl");
            let title = format!("{m} in the repository");
            let body = prose(&mut rng, &title, 60);
            let symbol = format!("{}{}", capitalise(rng.pick(WORDS)), capitalise(rng.pick(WORDS)));
            let fields = json!({"entity": eid, "title": title, "backendModule": m, "sources": [format!("src/{eid}/{m}.rs"), format!("src/{eid}/{m}/tests.rs")], "symbols": [symbol]});
            b.add(K::ImplementationRef, &id, "active", fields, body, format!("{eid}/impl/{id}.md"));
        }
        for s in screens {
            let id = format!("{s}-impl");
            let title = format!("{s} in the repository");
            let body = prose(&mut rng, &title, 60);
            let fields =
                json!({"entity": eid, "title": title, "uiScreen": s, "sources": [format!("web/{eid}/{s}.tsx")]});
            b.add(K::ImplementationRef, &id, "active", fields, body, format!("{eid}/impl/{id}.md"));
        }
        let (m0, s0) = (modules.first().cloned().unwrap_or_default(), screens.first().cloned().unwrap_or_default());
        let routes = [
            (
                "add-api-method",
                "add an API method",
                vec![format!("schemas/{eid}/api.json"), format!("src/{eid}/{m0}.rs"), format!("web/{eid}/client.ts")],
            ),
            (
                "add-screen-field",
                "add a field to a screen",
                vec![format!("web/{eid}/{s0}.tsx"), format!("src/{eid}/{m0}.rs")],
            ),
        ];
        for (slug, change, places) in routes {
            let id = format!("{eid}-{slug}");
            let title = format!("{name}: {change}");
            let body = prose(&mut rng, &title, 60);
            let steps = ["update the specification", "change the code where listed", "add a test beside it"];
            let fields = json!({"entity": eid, "title": title, "change": change, "where": places, "steps": steps});
            b.add(K::ModificationRoute, &id, "active", fields, body, format!("{eid}/routes/{id}.md"));
        }
    }
}

/// The cross-cutting entity's modules (every one of them may be called from a product).
fn cross_modules(entity_modules: &[(String, &str, Vec<String>)]) -> Vec<String> {
    entity_modules.iter().filter(|e| e.1 == "cross-cutting").flat_map(|e| e.2.iter().cloned()).collect()
}

fn link_list(fields: &Map<String, Value>, field: &str) -> Vec<String> {
    fields
        .get(field)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

impl Fixture {
    /// The drafts as intake files: JSON for entities and backlog items, Markdown with YAML front
    /// matter for everything else.
    pub fn files(&self) -> Vec<SourceFile> {
        self.drafts.iter().map(render).collect()
    }

    /// A draft by key.
    pub fn get_mut(&mut self, key: &ArtifactKey) -> Option<&mut ArtifactDraft> {
        self.drafts.iter_mut().find(|d| d.key == *key)
    }

    /// Drafts of `kind`.
    pub fn of(&self, kind: ArtifactKind) -> impl Iterator<Item = &ArtifactDraft> {
        self.drafts.iter().filter(move |d| d.key.kind == kind)
    }

    /// Takes the fixture in to a new in-memory journal named `origin` (fixed ids and clock) and
    /// returns the journal with the graph at its head; for tests, benchmarks and measurements.
    pub fn in_memory(&self, origin: &str) -> Result<(strata_journal::Journal, super::graph::Graph), String> {
        use crate::ports::{CountingIds, FixedClock};
        let journal = strata_journal::Journal::in_memory(origin).map_err(|e| e.to_string())?;
        let mut g = super::graph::Graph::new();
        let plan = super::intake::plan(&g, &self.files(), &mut CountingIds::new(1), &FixedClock(0))
            .map_err(|p| format!("the fixture does not take in: {} problems, first {:?}", p.len(), p.first()))?;
        journal.append_multi_blocking(plan.appends).map_err(|e| e.to_string())?.map_err(|e| e.to_string())?;
        journal.scan(1, u64::MAX, |r, _| g.apply_record(r).map(|()| true)).map_err(|e| e.to_string())??;
        Ok((journal, g))
    }
}

/// Renders a draft as the intake file its `source` names.
pub fn render(d: &ArtifactDraft) -> SourceFile {
    let path = d.source.clone().unwrap_or_else(|| format!("{}.md", d.key.id));
    if path.ends_with(".json") {
        let mut doc = d.document();
        if d.body.is_empty()
            && let Value::Object(m) = &mut doc
        {
            m.remove("body");
        }
        let text = serde_json::to_string_pretty(&doc).unwrap_or_default() + "\n";
        return SourceFile { path, bytes: text.into_bytes() };
    }
    let mut fm = String::from("---\n");
    fm.push_str(&format!("kind: {}\nid: {}\nstate: {}\n", d.key.kind.name(), yaml_scalar(&d.key.id), d.state));
    for (k, v) in &d.fields {
        fm.push_str(&format!("{k}: {}\n", yaml_value(v)));
    }
    fm.push_str("---\n");
    fm.push_str(&d.body);
    SourceFile { path, bytes: fm.into_bytes() }
}

/// YAML flow style is a superset of JSON, so JSON renders every value unambiguously.
fn yaml_value(v: &Value) -> String {
    match v {
        Value::String(s) => yaml_scalar(s),
        other => other.to_string(),
    }
}

fn yaml_scalar(s: &str) -> String {
    Value::String(s.to_owned()).to_string()
}

/// A defect to plant in a clean fixture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Defect {
    /// Remove the back-link of a change request → requirement reference.
    MissingInverse,
    /// Reference a requirement that does not exist.
    Dangling,
    /// Make two requirements depend on each other.
    Cycle,
    /// Link a change request to a requirement of another (non cross-cutting) entity.
    CrossEntity,
    /// Make an entity's first module depend on a module that depends on it.
    ModuleCycle,
    /// Make a product's module depend on another product's module (both sides declared).
    ModuleCrossEntity,
    /// Make a screen action call a method its module does not have.
    UnresolvedCall,
}

/// Where a planted defect is, as the validator should report it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Planted {
    /// Which defect.
    pub defect: Defect,
    /// The rule the validator should report.
    pub rule: &'static str,
    /// The artifact the finding should be about.
    pub artifact: ArtifactKey,
    /// The field.
    pub field: String,
}

fn entity_tier<'a>(fx: &'a Fixture, entity: &str) -> &'a str {
    fx.drafts
        .iter()
        .find(|d| d.key.kind == ArtifactKind::Entity && d.key.id == entity)
        .and_then(|d| d.fields.get("tier").and_then(Value::as_str))
        .unwrap_or("")
}

/// Plants `defect` somewhere chosen by `choice`; `None` if the fixture offers no place for it.
pub fn plant(fx: &mut Fixture, defect: Defect, choice: u64) -> Option<Planted> {
    use ArtifactKind as K;
    let mut rng = Sequence::new(choice);
    let crs: Vec<ArtifactDraft> =
        fx.of(K::ChangeRequest).filter(|d| !link_list(&d.fields, "brdRefs").is_empty()).cloned().collect();
    match defect {
        Defect::MissingInverse => {
            let cr = crs.get(rng.below(crs.len()))?;
            let brd = link_list(&cr.fields, "brdRefs")[0].clone();
            let d = fx.get_mut(&ArtifactKey::new(K::BrdRequirement, &brd))?;
            let list = super::intake::without(d.fields.get("linkedCrs")?, &cr.key.id);
            d.fields.insert("linkedCrs".into(), list);
            Some(Planted { defect, rule: "missing-inverse", artifact: cr.key.clone(), field: "brdRefs".into() })
        }
        Defect::Dangling => {
            let cr = crs.get(rng.below(crs.len()))?.key.clone();
            let missing = format!("BRD-9{}.{}", rng.below(900) + 100, rng.below(9) + 1);
            let d = fx.get_mut(&cr)?;
            super::intake::with(&mut d.fields, "brdRefs", &missing);
            Some(Planted { defect, rule: "dangling", artifact: cr, field: "brdRefs".into() })
        }
        Defect::Cycle => {
            let brds: Vec<ArtifactKey> = fx.of(K::BrdRequirement).map(|d| d.key.clone()).collect();
            let a = brds.get(rng.below(brds.len()))?.clone();
            let entity = fx.drafts.iter().find(|d| d.key == a)?.entity()?.to_owned();
            let b = brds
                .iter()
                .find(|k| **k != a && fx.drafts.iter().any(|d| d.key == **k && d.entity() == Some(entity.as_str())))?
                .clone();
            super::intake::with(&mut fx.get_mut(&a)?.fields, "dependsOn", &b.id);
            super::intake::with(&mut fx.get_mut(&b)?.fields, "dependsOn", &a.id);
            let first = if a < b { a } else { b };
            Some(Planted { defect, rule: "cycle", artifact: first, field: "dependsOn".into() })
        }
        Defect::CrossEntity => {
            let cr = crs.get(rng.below(crs.len()))?.clone();
            let cr_entity = cr.entity()?.to_owned();
            if entity_tier(fx, &cr_entity) == "cross-cutting" {
                return None;
            }
            let target = fx
                .of(K::BrdRequirement)
                .find(|d| d.entity().is_some_and(|e| e != cr_entity && entity_tier(fx, e) != "cross-cutting"))?
                .key
                .clone();
            super::intake::with(&mut fx.get_mut(&cr.key)?.fields, "brdRefs", &target.id);
            super::intake::with(&mut fx.get_mut(&target)?.fields, "linkedCrs", &cr.key.id);
            let (a, b) = (cr.key.clone(), target);
            Some(Planted { defect, rule: "cross-entity", artifact: if a < b { a } else { b }, field: "brdRefs".into() })
        }
        Defect::ModuleCycle => {
            // A module that depends on another of its entity: the other now depends on it too.
            let deps: Vec<(ArtifactKey, String)> = fx
                .of(K::BackendModule)
                .flat_map(|d| link_list(&d.fields, "dependsOn").into_iter().map(|t| (d.key.clone(), t)))
                .filter(|(k, t)| {
                    let e = fx.drafts.iter().find(|d| d.key == *k).and_then(ArtifactDraft::entity);
                    fx.drafts.iter().any(|d| d.key.kind == K::BackendModule && d.key.id == *t && d.entity() == e)
                })
                .collect();
            let (a, b) = deps.get(rng.below(deps.len()))?.clone();
            let b = ArtifactKey::new(K::BackendModule, &b);
            super::intake::with(&mut fx.get_mut(&b)?.fields, "dependsOn", &a.id);
            super::intake::with(&mut fx.get_mut(&a)?.fields, "dependedOnBy", &b.id);
            Some(Planted { defect, rule: "cycle", artifact: if a < b { a } else { b }, field: "dependsOn".into() })
        }
        Defect::ModuleCrossEntity => {
            let products: Vec<String> = fx
                .of(K::Entity)
                .filter(|d| d.fields.get("tier").and_then(Value::as_str) == Some("product"))
                .map(|d| d.key.id.clone())
                .collect();
            if products.len() < 2 {
                return None;
            }
            let i = rng.below(products.len());
            let j = (i + 1 + rng.below(products.len() - 1)) % products.len();
            let first_module = |e: &str| {
                fx.of(K::BackendModule)
                    .find(|d| {
                        d.entity() == Some(e)
                            && link_list(&d.fields, "dependsOn").iter().all(|t| {
                                !fx.drafts
                                    .iter()
                                    .any(|x| x.key.kind == K::BackendModule && x.key.id == *t && x.entity() == Some(e))
                            })
                    })
                    .map(|d| d.key.clone())
            };
            let (a, b) = (first_module(&products[i])?, first_module(&products[j])?);
            super::intake::with(&mut fx.get_mut(&a)?.fields, "dependsOn", &b.id);
            super::intake::with(&mut fx.get_mut(&b)?.fields, "dependedOnBy", &a.id);
            let (artifact, field) = if a < b { (a, "dependsOn") } else { (b, "dependedOnBy") };
            Some(Planted { defect, rule: "cross-entity", artifact, field: field.into() })
        }
        Defect::UnresolvedCall => {
            let screens: Vec<ArtifactKey> = fx
                .of(K::UiScreen)
                .filter(|d| d.fields.get("actions").and_then(|a| a.get(0)).and_then(|a| a.get("call")).is_some())
                .map(|d| d.key.clone())
                .collect();
            let s = screens.get(rng.below(screens.len()))?.clone();
            let d = fx.get_mut(&s)?;
            let call = d.fields["actions"][0]["call"].as_str()?.to_owned();
            let module = call.split_once('#')?.0;
            d.fields["actions"][0]["call"] = Value::String(format!("{module}#noSuchMethod"));
            Some(Planted { defect, rule: "unresolved", artifact: s, field: "actions/0/call".into() })
        }
    }
}
