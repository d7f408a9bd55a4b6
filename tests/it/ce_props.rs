//! Property tests of the dispatch engine: the router is total and deterministic with
//! canonically ordered reasons; path overlap is symmetric and containment-correct; the
//! reference-compatible canonical JSON is stable.

use proptest::prelude::*;
use serde_json::{Map, Value, json};
use strata_engine::ce::json as cj;
use strata_engine::ce::paths::{Workspace, overlaps};
use strata_engine::ce::router::{Mode, Reason, RouteFacts, route};
use strata_engine::ce::{Code, Context, run};

fn opt_bool() -> impl Strategy<Value = Option<bool>> {
    prop_oneof![Just(None), Just(Some(true)), Just(Some(false))]
}

fn path() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(vec!["src", "api", "web", "a.rs", "B.rs", "lib"]), 1..4)
        .prop_map(|s| s.join("/"))
}

fn paths() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(path(), 0..3)
}

fn put(m: &mut Map<String, Value>, k: &str, v: Option<Value>) {
    if let Some(v) = v {
        m.insert(k.to_owned(), v);
    }
}

prop_compose! {
    fn facts()(
        flags in prop::collection::vec(opt_bool(), 14),
        role in prop::sample::select(vec!["", "builder", "reviewer", "analyst", "code-writer", "builder-contaminated"]),
        lineage_role in prop::sample::select(vec!["", "builder", "analyst"]),
        owned in paths(), resolved in paths(),
        writers in prop::collection::vec(paths().prop_filter("a writer owns a path", |p| !p.is_empty()), 0..3),
        nesting in 0u64..4, max_nesting in 1u64..4, inherited in 0u64..4,
        sensitivity in prop::sample::select(vec!["", "normal", "restricted", "isolated", "other"]),
        coupling in prop::sample::select(vec!["", "tight", "moderate"]),
        affinity in prop::sample::select(vec!["", "high", "low"]),
        peers in 0u64..4, latency in 0.0f64..1.0,
        scopes in prop::collection::vec(paths().prop_filter("a writer scope owns a path", |p| !p.is_empty()), 0..3),
        with_team in any::<bool>(), with_lineage in any::<bool>(),
    ) -> Value {
        let b = |i: usize| flags[i].map(Value::Bool);
        let mut m = Map::new();
        if !role.is_empty() { m.insert("role".into(), json!(role)); }
        put(&mut m, "is_writer", b(0));
        put(&mut m, "trivial", b(1));
        put(&mut m, "blocking", b(2));
        put(&mut m, "independent_reviewer", b(3));
        put(&mut m, "capsule_sufficient", b(4));
        if !owned.is_empty() { m.insert("owned_files".into(), json!(owned)); }
        if !resolved.is_empty() { m.insert("resolved_owned_files".into(), json!(resolved)); }
        m.insert("active_writers".into(), json!(writers.iter().map(|w| json!({"owned_files": w})).collect::<Vec<_>>()));
        m.insert("nesting_depth".into(), json!(nesting));
        m.insert("max_nesting_depth".into(), json!(max_nesting));
        m.insert("active_inherited_writers".into(), json!(inherited));
        if !sensitivity.is_empty() { m.insert("sensitivity".into(), json!(sensitivity)); }
        if !coupling.is_empty() { m.insert("coupling".into(), json!(coupling)); }
        let mut inh = Map::new();
        if !affinity.is_empty() { inh.insert("affinity".into(), json!(affinity)); }
        put(&mut inh, "safe", b(5));
        put(&mut inh, "within_budget", b(6));
        put(&mut inh, "full_supported", b(7));
        put(&mut inh, "recent_supported", b(8));
        put(&mut inh, "recent_sufficient", b(9));
        m.insert("inheritance".into(), Value::Object(inh));
        if with_lineage {
            let mut l = Map::new();
            put(&mut l, "compatible", b(10));
            put(&mut l, "resumable", b(11));
            if !lineage_role.is_empty() { l.insert("role".into(), json!(lineage_role)); }
            m.insert("lineage".into(), Value::Object(l));
        }
        if with_team {
            m.insert("team".into(), json!({
                "coordination_required": flags[12] == Some(true), "peers": peers, "provider_supported": true,
                "safe": flags[13] != Some(false), "sensitivity_approved": true, "within_budget": true,
                "latency_ratio": latency, "scopes": scopes.iter().map(|s| json!({"owned_files": s})).collect::<Vec<_>>(),
            }));
        }
        Value::Object(m)
    }
}

fn ctx() -> Context {
    Context { now_ns: 0, workspace: Workspace::default(), warm_lease_minutes: 20 }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn the_router_is_total_and_deterministic_with_canonical_reasons(input in facts()) {
        let f = RouteFacts::from_json(&input, &Workspace::default()).expect("generated facts are well typed");
        let first = route(&f);
        match &first {
            Ok(d) => {
                prop_assert!(Mode::ALL.contains(&d.mode));
                prop_assert!(!d.reason_codes.is_empty());
                // The wire form lists the reasons in canonical order without duplicates.
                let wire = run("route", &json!({"input": input}), &ctx()).expect("same facts, same answer");
                let listed: Vec<Reason> = wire["reason_codes"].as_array().unwrap().iter().map(|r| Reason::parse(r.as_str().unwrap()).unwrap()).collect();
                prop_assert!(listed.windows(2).all(|w| w[0] < w[1]), "{listed:?}");
                prop_assert_eq!(wire["mode"].as_str(), Some(d.mode.as_str()));
            }
            // The one rejection well-typed facts can meet: a writer with no owned path.
            Err(e) => {
                prop_assert_eq!(e.code, Code::WriterScopeRequired);
                prop_assert!(f.is_writer() && f.proposed.is_empty());
            }
        }
        prop_assert_eq!(route(&f), first.clone());
        let again = RouteFacts::from_json(&input, &Workspace::default()).unwrap();
        prop_assert_eq!(route(&again), first);
    }

    #[test]
    fn overlap_is_symmetric_and_containment_correct(
        a in prop::collection::vec(prop::sample::select(vec!["x", "y", "xy", "z"]), 1..4),
        b in prop::collection::vec(prop::sample::select(vec!["x", "y", "xy", "z"]), 1..4),
    ) {
        let (pa, pb) = (a.join("/"), b.join("/"));
        prop_assert_eq!(overlaps(&pa, &pb), overlaps(&pb, &pa));
        let prefix = |p: &[&str], q: &[&str]| p.len() <= q.len() && p == &q[..p.len()];
        prop_assert_eq!(overlaps(&pa, &pb), prefix(&a, &b) || prefix(&b, &a));
        let child = format!("{}/child", pa);
        prop_assert!(overlaps(&pa, &child));
        prop_assert!(overlaps(&pa, &pa));
    }

    #[test]
    fn reference_canonical_json_is_a_fixed_point_and_ignores_key_order(v in json_value()) {
        let once = cj::to_string(&v);
        let parsed: Value = serde_json::from_str(&once).unwrap();
        prop_assert_eq!(cj::to_string(&parsed), once.clone());
        // Rebuilding every object in reverse key order changes nothing.
        prop_assert_eq!(cj::to_string(&reversed(&v)), once);
    }
}

fn reversed(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.reverse();
            Value::Object(keys.into_iter().map(|k| (k.clone(), reversed(&m[k]))).collect())
        }
        Value::Array(a) => Value::Array(a.iter().map(reversed).collect()),
        other => other.clone(),
    }
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|i| json!(i)),
        (-1e30f64..1e30).prop_map(|f| json!(f)),
        "[a-z😀～\\n\"\\\\é]{0,6}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-zA-Z😀～_]{0,4}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}
