//! `strata telemetry …`: record efficiency events, strata's own usage and the provider's session
//! totals in the workspace journal, and report rollups and reconciliation.
//!
//! `record` reads one JSON request on stdin (at most 1 MiB, enforced while reading; shapes in
//! `strata_engine::telemetry::decide`), decides it against the `telemetry` projection and appends
//! the event to the session's stream expecting the version it decided against; when another
//! writer moved that stream in between it decides again. A rejection appends nothing. With a
//! daemon running, the request is sent to it with the command (like every journal command).

use std::io::Read as _;
use std::process::ExitCode;

use clap::Subcommand;
use serde_json::{Value, json};
use strata_engine::telemetry::decide::{self, REQUEST_BYTES_MAX, Request};
use strata_engine::telemetry::report;
use strata_engine::telemetry::state::Telemetry;
use strata_journal::projection::catch_up_one;
use strata_journal::{ExpectedVersion, StreamAppend};

use crate::app::append::{AppendError, Decided, decide_and_append};
use crate::app::workspace::Workspace;
use crate::system::{SystemClock, V7Ids};
use crate::table::Table;

#[derive(Subcommand, Debug)]
pub(crate) enum TelemetryCommand {
    /// Record one request from stdin: {"kind":"efficiency","session":S,"event":{…}},
    /// {"kind":"usage","session":S,"provider":P,"accounting_source":C,"cumulative":{…}, …} or
    /// {"kind":"session","session":S,"provider":P,"totals":{…}}. Counters: input_tokens,
    /// cache_creation_tokens, cache_read_tokens, output_tokens, cost_micros, wall_ms (null or
    /// left out: unknown).
    Record,
    /// Rollups per provider, model, profile, mode and stratum, and reconciliation with the
    /// provider's totals per session, per arm and overall.
    Report,
}

pub(crate) fn run(ws: &Workspace, cmd: TelemetryCommand, json: bool) -> anyhow::Result<ExitCode> {
    match cmd {
        TelemetryCommand::Record => {
            let bytes = ws
                .stdin_bytes(REQUEST_BYTES_MAX as u64)
                .map_err(|e| anyhow::anyhow!("[STRATA-E1508] stdin cannot be read: {e}"))?;
            record(ws, &mut bytes.as_slice(), json)
        }
        TelemetryCommand::Report => report_cmd(ws, json),
    }
}

fn read_request(input: &mut dyn std::io::Read) -> anyhow::Result<Request> {
    let mut bytes = Vec::new();
    input
        .take(REQUEST_BYTES_MAX as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| anyhow::anyhow!("[STRATA-E1508] stdin cannot be read: {e}"))?;
    if bytes.len() > REQUEST_BYTES_MAX {
        anyhow::bail!("[STRATA-E1508] stdin holds more than {REQUEST_BYTES_MAX} bytes; send one request at a time");
    }
    let v: Value = serde_json::from_slice(&bytes).map_err(|e| {
        anyhow::anyhow!("[STRATA-E1501] stdin is not one JSON document (line {}, column {})", e.line(), e.column())
    })?;
    Ok(Request::parse(&v)?)
}

fn record(ws: &Workspace, input: &mut dyn std::io::Read, json: bool) -> anyhow::Result<ExitCode> {
    let req = read_request(input)?;
    let journal = ws.open_journal("telemetry record")?;
    let decided = decide_and_append(&journal, &mut Telemetry::default(), |state| {
        let d = decide::decide(state, &req, &mut V7Ids, &SystemClock)?;
        let answer = (d.event.event_type.clone(), d.stream.clone(), d.event.payload.clone());
        let append = StreamAppend {
            stream: d.stream,
            expected: ExpectedVersion::Exact(d.expected_version),
            events: vec![d.event],
        };
        Ok(Decided { appends: vec![append], answer })
    });
    let done = match decided {
        Err(AppendError::Contended { .. }) => {
            anyhow::bail!("[STRATA-E1509] the session's stream kept moving under this decision; run it again")
        }
        r => super::appended(r, |e: strata_engine::telemetry::TelemetryError| e.into())?,
    };
    let ((event_type, stream, payload), seq) = (done.answer, done.seq);
    let payload: Value = serde_json::from_slice(&payload)?;
    ws.finish(&journal)?;
    if json {
        outln!(ws, "{}", json!({"ok": true, "type": event_type, "stream": stream, "seq": seq, "payload": payload}));
    } else {
        outln!(ws, "recorded {event_type} on {stream} at seq {seq}");
        if let Some(delta) = payload.get("delta").and_then(Value::as_object) {
            let cells: Vec<String> = delta.iter().map(|(k, v)| format!("{k}={}", unknown_dash(v))).collect();
            outln!(ws, "delta: {}", cells.join(" "));
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn unknown_dash(v: &Value) -> String {
    if v.is_null() { "-".to_owned() } else { v.to_string() }
}

fn report_cmd(ws: &Workspace, json: bool) -> anyhow::Result<ExitCode> {
    let journal = ws.open_journal("telemetry report")?;
    let mut state = Telemetry::default();
    catch_up_one(&mut state, &journal)?;
    ws.finish(&journal)?;
    let r = report::report(&state);
    if json {
        outln!(ws, "{r}");
        return Ok(ExitCode::SUCCESS);
    }
    let mut t = Table::new(&[
        "PROVIDER",
        "MODEL",
        "PROFILE",
        "MODE",
        "STRATUM",
        "CALLS",
        "EFF.",
        "COST",
        "P50",
        "P75",
        "P95",
        "TOKENS P50",
        "WALL P50",
        "EST. COST",
    ]);
    for g in r["rollups"].as_array().into_iter().flatten() {
        let cost = &g["billed"]["cost_micros"];
        let [sum, p50, p75, p95] = per_currency(cost, ["sum", "p50", "p75", "p95"]);
        let [est] = per_currency(&g["estimated"]["cost_micros"], ["sum"]);
        t.row(vec![
            text(&g["provider"]),
            text(&g["model"]),
            text(&g["profile"]),
            text(&g["mode"]),
            text(&g["stratum"]),
            g["invocations"].to_string(),
            g["efficiency_events"].to_string(),
            sum,
            p50,
            p75,
            p95,
            unknown_dash(&g["billed"]["tokens"]["p50"]),
            unknown_dash(&g["wall_ms"]["p50"]),
            est,
        ]);
    }
    outln!(ws, "{}", t.render().trim_end());
    let mut e = Table::new(&[
        "PROVIDER",
        "PROFILE",
        "MODE",
        "EVENTS",
        "ACCEPTED",
        "REJECTED",
        "CHECKS",
        "PROMPT BYTES P50",
        "CAPSULE BYTES P50",
        "REWORK P95",
    ]);
    for g in r["rollups"].as_array().into_iter().flatten().filter(|g| g["efficiency_events"].as_u64() > Some(0)) {
        let o = &g["outcome"];
        e.row(vec![
            text(&g["provider"]),
            text(&g["profile"]),
            text(&g["mode"]),
            g["efficiency_events"].to_string(),
            o["accepted"].to_string(),
            o["rejected"].to_string(),
            format!("{} of {}", o["verify_passed"], o["verify_total"]),
            unknown_dash(&g["logical"]["prompt_bytes"]["p50"]),
            unknown_dash(&g["logical"]["capsule_bytes"]["p50"]),
            unknown_dash(&o["rework_rounds"]["p95"]),
        ]);
    }
    outln!(ws);
    outln!(ws, "efficiency events (logical and outcome figures; billed figures are the usage rows above):");
    outln!(ws, "{}", e.render().trim_end());
    let rec = &r["reconciliation"];
    let mut t = Table::new(&["SCOPE", "CURRENCY", "VERDICT", "COST EVENTS", "COST REPORTED", "DIFFERENCE"]);
    let mut row = |name: String, s: &Value| {
        let c = &s["counters"]["cost_micros"];
        t.row(vec![
            name,
            text(&s["currency"]),
            text(&s["verdict"]),
            unknown_dash(&c["events"]),
            unknown_dash(&c["reported"]),
            unknown_dash(&c["difference"]),
        ]);
    };
    for (name, s) in rec["sessions"].as_object().into_iter().flatten() {
        row(format!("session {name}"), s);
    }
    for (name, s) in rec["arms"].as_object().into_iter().flatten() {
        row(format!("arm {name}"), s);
    }
    row("overall".to_owned(), &rec["overall"]);
    outln!(ws);
    outln!(ws, "reconciliation (within {}%; costs in micros):", rec["tolerance_percent"]);
    outln!(ws, "{}", t.render().trim_end());
    let l = &rec["largest_cost_discrepancy"];
    if l.is_object() {
        outln!(
            ws,
            "largest single-session cost discrepancy: session {} ({} of {} micros, {})",
            text(&l["session"]),
            unknown_dash(&l["difference"]),
            unknown_dash(&l["reported"]),
            text(&l["verdict"])
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn text(v: &Value) -> String {
    v.as_str().map_or_else(|| unknown_dash(v), str::to_owned)
}

/// The named figures of a per-currency cost map as `N CUR` cells (`;` between currencies).
fn per_currency<const N: usize>(costs: &Value, keys: [&str; N]) -> [String; N] {
    keys.map(|k| {
        let parts: Vec<String> =
            costs.as_object().into_iter().flatten().map(|(cur, f)| format!("{} {cur}", unknown_dash(&f[k]))).collect();
        if parts.is_empty() { "-".to_owned() } else { parts.join("; ") }
    })
}
