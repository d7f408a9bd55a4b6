//! The wire adapter of `strata ce`: the reference runtime's operations with their request and
//! result shapes, typed rejections, and strata's extensions. Each operation reads its request
//! into the typed values of the dispatch core ([`crate::ce::router`], [`crate::ce::lineage`],
//! [`crate::ce::capsule`], …), decides with the core and writes the answer back as JSON: this
//! module and its children are the only place in `ce` where requests are JSON documents.
//!
//! Stateless like the reference by default; [`journaled`] answers the same operations against
//! the journal's [`crate::ce::ledger`], which owns writers, leases, lineage records and vault
//! deltas. `telemetry`, `rollout` and `vault-delta` are wire-only operations (no dispatch
//! decision reads them) and work on JSON throughout.

pub mod capsule;
pub mod facts;
pub mod journaled;
pub mod json;
pub mod lineage;
pub mod rollout;
pub mod route;
pub mod telemetry;
pub mod vault;

use serde_json::{Value, json};

use crate::ce::error::{CeError, Code};
use crate::ce::paths::{self, Workspace};
use crate::ce::router::{self, Reason, RouteFacts};
use crate::ce::{policy, time};
use facts::Obj;

/// Largest request, in bytes (enforced while reading by the adapter).
pub const REQUEST_BYTES_MAX: usize = 1 << 20;

/// The wire operations.
pub const OPERATIONS: [&str; 8] =
    ["route", "lineage", "capsule", "telemetry", "rollout", "result-policy", "vault-delta", "dispatch"];

/// What an operation may consult besides its request.
#[derive(Clone, Debug)]
pub struct Context {
    /// Now, ns since the epoch (the adapter reads the clock; a request's `now` overrides it).
    pub now_ns: i128,
    /// Workspace facts for ownership paths.
    pub workspace: Workspace,
    /// `warm_lease_minutes`.
    pub warm_lease_minutes: u64,
}

/// Runs `op` on `payload` (already known to be a JSON object).
pub fn run(op: &str, payload: &Value, ctx: &Context) -> Result<Value, CeError> {
    let p = Obj::of(payload, "", Code::InvalidRequest)?;
    let with_ws;
    let ctx = match p.object("workspace")? {
        None => ctx,
        Some(w) => {
            with_ws = Context { workspace: workspace_of(&w, &ctx.workspace)?, ..ctx.clone() };
            &with_ws
        }
    };
    match op {
        "route" => {
            let input = p.get("input").ok_or_else(|| CeError::new(Code::InvalidRequest, "input: required object"))?;
            let facts = RouteFacts::from_json(input, &ctx.workspace)?;
            Ok(router::route(&facts)?.to_json())
        }
        "lineage" => Ok(lineage_op(&p, ctx)?.to_json()),
        "rollout" => {
            let input = p.get("input").ok_or_else(|| CeError::new(Code::InvalidRequest, "input: required object"))?;
            Ok(rollout::select(&rollout::RolloutFacts::from_json(input)?)?.to_json())
        }
        "result-policy" => {
            let input = p.get("input").ok_or_else(|| CeError::new(Code::InvalidRequest, "input: required object"))?;
            Ok(policy::resolve(&route::policy_facts(input)?)?.to_json())
        }
        "dispatch" => dispatch(&p, ctx),
        "capsule" => capsule_op(&p),
        "telemetry" => {
            let event =
                p.get("event").ok_or_else(|| CeError::new(Code::EfficiencyEventInvalid, "event: required object"))?;
            telemetry::normalise(event)
        }
        "vault-delta" => {
            let input = p.get("input").ok_or_else(|| CeError::new(Code::InvalidRequest, "input: required object"))?;
            Ok(vault::decide(input)?.to_json())
        }
        _ => Err(CeError::new(Code::UnsupportedOperation, "the operation is not one of the eight")),
    }
}

/// The request's `workspace` facts (a strata extension): `case_sensitive` and `links` (link
/// path → target path, or null for a link out of the workspace), added to `base`.
pub(crate) fn workspace_of(w: &Obj<'_>, base: &Workspace) -> Result<Workspace, CeError> {
    let mut ws = base.clone();
    if let Some(cs) = w.flag("case_sensitive")? {
        ws.case_sensitive = cs;
    }
    if let Some(links) = w.object_or("links", Code::InvalidOwnershipPath)? {
        if links.map().len() > paths::LINKS_MAX {
            return Err(CeError::new(Code::InvalidRequest, "workspace.links: too many links"));
        }
        for (link, target) in links.map() {
            let target = match target {
                Value::Null => None,
                Value::String(t) => Some(t.as_str()),
                _ => {
                    return Err(CeError::new(
                        Code::InvalidOwnershipPath,
                        "workspace.links: a target is a path or null",
                    ));
                }
            };
            let (k, v) = paths::link_fact(&ws, link, target)?;
            ws.links.insert(k, v);
        }
    }
    Ok(ws)
}

/// Adds link facts discovered in the request's workspace ([`crate::ce::links::discover`]) to
/// its `workspace.links`, where a request states its own: the decision takes them as any other
/// link fact (and, with a journal, records them). A fact the request states for the same link
/// with another target contradicts the file system and is refused (`INVALID_FACT`).
pub fn add_links(
    payload: &mut Value,
    links: std::collections::BTreeMap<String, Option<String>>,
) -> Result<(), CeError> {
    if links.is_empty() {
        return Ok(());
    }
    let Some(request) = payload.as_object_mut() else {
        return Err(CeError::new(Code::InvalidRequest, "request: must be an object"));
    };
    let workspace = request.entry("workspace").or_insert_with(|| json!({}));
    if workspace.is_null() {
        *workspace = json!({});
    }
    let Some(workspace) = workspace.as_object_mut() else {
        return Err(CeError::new(Code::InvalidFact, "workspace: must be an object or null"));
    };
    let stated = workspace.entry("links").or_insert_with(|| json!({}));
    if stated.is_null() {
        *stated = json!({});
    }
    let Some(stated) = stated.as_object_mut() else {
        return Err(CeError::new(Code::InvalidOwnershipPath, "workspace.links: must be an object or null"));
    };
    // Compared lexically and case-folded (a contradiction under either reading is refused),
    // with what the request states, not with other discovered links.
    let key = |p: &str| paths::lexical(p, "link").map(|l| l.to_lowercase()).ok();
    let given: Vec<(Option<String>, Value)> = stated.iter().map(|(k, v)| (key(k), v.clone())).collect();
    for (link, target) in links {
        let same = given.iter().find(|(k, _)| k.is_some() && *k == key(&link));
        match same {
            None => {
                stated.insert(link, target.map_or(Value::Null, Value::from));
            }
            Some((_, given)) => {
                let agrees = match (given.as_str(), &target) {
                    (None, None) => given.is_null(),
                    (Some(g), Some(t)) => key(g).is_some() && key(g) == key(t),
                    _ => false,
                };
                if !agrees {
                    return Err(CeError::new(
                        Code::InvalidFact,
                        "workspace.links: a stated link contradicts the workspace's file system",
                    ));
                }
            }
        }
    }
    Ok(())
}

/// `capsule`: `{capsule, max_bytes?, artifact_path?, artifact_roots?, verify?}` → the sealed
/// capsule (a given hash is replaced; with `verify: true` it must be the content's).
fn capsule_op(p: &Obj<'_>) -> Result<Value, CeError> {
    Ok(capsule::to_json(&seal_request(p)?.capsule))
}

/// Reads a `capsule` request and runs the pipeline on it.
pub(crate) fn seal_request(p: &Obj<'_>) -> Result<crate::ce::capsule::Sealed, CeError> {
    let Some(capsule) = p.map().get("capsule") else {
        return Err(CeError::new(Code::CapsuleSchemaInvalid, "capsule: required"));
    };
    let max_bytes = match p.map().get("max_bytes") {
        None => capsule::MAX_BYTES_DEFAULT,
        Some(Value::Null) => return Err(CeError::new(Code::InvalidRequest, "max_bytes: null is not a size")),
        Some(_) => match p.count("max_bytes", Code::InvalidRequest)? {
            Some(n) if n > 0 => n,
            _ => return Err(CeError::new(Code::InvalidRequest, "max_bytes: must be a positive integer")),
        },
    };
    let artifact_path = p.string_or("artifact_path", Code::CapsuleArtifactRefInvalid)?;
    let artifact_roots = p.strings("artifact_roots", Code::CapsuleArtifactRefInvalid)?;
    // `verify` (strata): the capsule handed in must be the one its hash names.
    let verify = match p.map().get("verify") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(CeError::new(Code::InvalidRequest, "verify: must be true, false or null")),
    };
    let sealed = capsule::seal_typed(&capsule::SealRequest { capsule, max_bytes, artifact_path, artifact_roots })?;
    if verify {
        capsule::check_claim(capsule)?;
    }
    Ok(sealed)
}

/// `now` from the request when given (strict RFC 3339), else the context's clock.
fn now_of(o: &Obj<'_>, ctx: &Context) -> Result<i128, CeError> {
    match o.get("now") {
        None => Ok(ctx.now_ns),
        Some(Value::String(s)) => time::parse_rfc3339(s, "now"),
        Some(_) => Err(CeError::new(Code::InvalidDateTime, "now: must be an RFC 3339 string")),
    }
}

fn lineage_op(p: &Obj<'_>, ctx: &Context) -> Result<crate::ce::lineage::Evaluation, CeError> {
    let current = p.get("current").ok_or_else(|| CeError::new(Code::InvalidRequest, "current: required object"))?;
    let now = now_of(p, ctx)?;
    lineage::evaluate(p.get("lineage"), current, now, ctx.warm_lease_minutes)
}

/// `x.input` when it is an object, else `x` itself.
pub(crate) fn inner(v: &Value) -> &Value {
    v.get("input").filter(|i| i.is_object()).unwrap_or(v)
}

/// Combined dispatch: lineage evaluated first (only HOT allows resume), routing rebuilt from
/// it, rollout selected from the router's result, result policy resolved.
fn dispatch(p: &Obj<'_>, ctx: &Context) -> Result<Value, CeError> {
    let eval = match dispatch_lineage(p)? {
        None => None,
        Some((l, current)) => {
            Some(lineage::evaluate(l.get("lineage"), current, now_of(&l, ctx)?, ctx.warm_lease_minutes)?)
        }
    };
    Ok(dispatch_plan(p, ctx, eval.as_ref(), |_| Ok(()))?.to_json())
}

/// A dispatch request's `lineage` and its `current`, with role and sensitivity checked to agree
/// with the routing facts (a conflict is refused, never resolved by weakening isolation).
pub(crate) fn dispatch_lineage<'a>(p: &Obj<'a>) -> Result<Option<(Obj<'a>, &'a Value)>, CeError> {
    let Some(l) = p.object("lineage")? else { return Ok(None) };
    let Some(current) = l.get("current").filter(|c| c.is_object()) else {
        return Err(CeError::new(Code::InvalidRequest, "lineage.current: required object"));
    };
    if let Some(routing) = p.get("routing").map(inner).filter(|v| v.is_object()) {
        for key in ["role", "sensitivity"] {
            if let (Some(a), Some(b)) = (routing.get(key), current.get(key))
                && a != b
            {
                return Err(CeError::new(Code::DispatchFactMismatch, format!("{key}: routing and lineage disagree")));
            }
        }
    }
    Ok(Some((l, current)))
}

/// What combined dispatch decided.
pub(crate) struct DispatchPlan {
    /// The routing facts as routed (lineage folded in, `adjust` applied).
    pub facts: RouteFacts,
    /// The route.
    pub route: router::Route,
    /// The rollout selection.
    pub selection: rollout::Selection,
    lineage: Value,
    result_policy: Value,
}

impl DispatchPlan {
    fn to_json(&self) -> Value {
        json!({
            "routing": self.route.to_json(),
            "rollout": self.selection.to_json(),
            "lineage": self.lineage,
            "result_policy": self.result_policy,
        })
    }
}

/// Dispatch given the lineage evaluation (`None` without `lineage`): the routing facts are
/// rebuilt from it, `adjust` may replace state in them, then route, rollout and result policy.
///
/// Unlike the reference, shadow and canary can compare: the caller's `actual_mode` (what would
/// run without the optimiser) is kept as the baseline, and the router's mode is always the
/// recommendation. Hard guards (ownership conflict, nesting limit, isolation) override the
/// baseline: whatever is selected never breaks them.
pub(crate) fn dispatch_plan(
    p: &Obj<'_>,
    ctx: &Context,
    eval: Option<&crate::ce::lineage::Evaluation>,
    adjust: impl FnOnce(&mut RouteFacts) -> Result<(), CeError>,
) -> Result<DispatchPlan, CeError> {
    let routing = p.get("routing").map(inner).filter(|v| v.is_object());
    let Some(routing) = routing else {
        return Err(CeError::new(Code::InvalidRequest, "routing: required object"));
    };
    let mut rebuilt = routing.clone();
    let mut lineage_result = Value::Null;
    if let (Some((l, current)), Some(eval)) = (dispatch_lineage(p)?, eval) {
        let record = l.get("lineage");
        let hot = eval.state == crate::ce::lineage::State::Hot;
        if let Some(r) = rebuilt.as_object_mut() {
            for key in ["role", "sensitivity"] {
                if let Some(v) = current.get(key).filter(|v| !v.is_null()) {
                    r.insert(key.to_owned(), v.clone());
                }
            }
            let reviewer = routing.get("independent_reviewer") == Some(&Value::Bool(true))
                || current.get("independent_reviewer") == Some(&Value::Bool(true));
            r.insert("independent_reviewer".to_owned(), Value::Bool(reviewer));
            let mut lin = routing.get("lineage").and_then(Value::as_object).cloned().unwrap_or_default();
            for key in ["lineage_id", "role"] {
                lin.insert(key.to_owned(), record.and_then(|x| x.get(key)).cloned().unwrap_or(Value::Null));
            }
            lin.insert("compatible".to_owned(), Value::Bool(hot));
            lin.insert("resumable".to_owned(), Value::Bool(hot));
            r.insert("lineage".to_owned(), Value::Object(lin));
        }
        lineage_result = eval.to_json();
    }
    let mut facts = RouteFacts::from_json(&rebuilt, &ctx.workspace)?;
    adjust(&mut facts)?;
    let route = router::route(&facts)?;
    let Some(rollout_v) = p.get("rollout").map(inner).filter(|v| v.is_object()) else {
        return Err(CeError::new(Code::InvalidRequest, "rollout: required object"));
    };
    let mut rf = rollout::RolloutFacts::from_json(rollout_v)?;
    rf.recommended_mode = Some(route.mode);
    let hard_guard = route.reason_codes.iter().any(|r| {
        matches!(
            r,
            Reason::WriterOwnershipConflict
                | Reason::NestingLimit
                | Reason::SensitivityIsolation
                | Reason::ReviewIndependence
        )
    });
    if hard_guard || rf.actual_mode.is_none() {
        rf.actual_mode = Some(route.mode);
    }
    let selection = rollout::select(&rf)?;
    let result_policy = match p.get("result_policy") {
        None => Value::Null,
        Some(v) => policy::resolve(&route::policy_facts(inner(v))?)?.to_json(),
    };
    Ok(DispatchPlan { facts, route, selection, lineage: lineage_result, result_policy })
}

/// Every string value of `v` at any depth, in document order, after `check_key` accepts each
/// object key and `check_str` each string (the first refusal, in walk order, is returned).
pub(crate) fn strings_of<'a, E>(
    v: &'a Value,
    check_key: &impl Fn(&str) -> Result<(), E>,
    check_str: &impl Fn(&str) -> Result<(), E>,
    out: &mut Vec<&'a str>,
) -> Result<(), E> {
    match v {
        Value::String(s) => {
            check_str(s)?;
            out.push(s);
            Ok(())
        }
        Value::Array(items) => items.iter().try_for_each(|x| strings_of(x, check_key, check_str, out)),
        Value::Object(m) => m.iter().try_for_each(|(k, x)| {
            check_key(k)?;
            strings_of(x, check_key, check_str, out)
        }),
        _ => Ok(()),
    }
}
