//! The HTML report of a run: one self-contained file (no script, no external resource) drawn
//! from the result document ([`crate::result`]) with inline SVG charts: the rollout timeline with
//! its verdicts, the gate scorecard per window, a forest plot per gate, the paired cost scatter,
//! the cost ECDFs with p50/p75/p95 markers, the faults injected and the invariants checked, and a
//! provenance footer with the seed, the journal head and the reproduction command.
//!
//! Charts people read: every chart has its axes with scales and units; a forest plot states its
//! one sign convention (improvement to the right, so a gate whose measure passes when low is
//! drawn negated), labels the threshold line with its value and prints the measured value beside
//! each row; the scorecard is also a text table (metric, condition, measured, verdict), colour
//! being a second channel only.

use std::fmt::Write as _;

use serde_json::Value;

/// Chart size.
const W: f64 = 640.0;
const H: f64 = 240.0;
const PAD: f64 = 40.0;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => esc(s),
        Value::Null => "—".to_owned(),
        other => esc(&other.to_string()),
    }
}

fn verdict_color(v: &str) -> &'static str {
    match v {
        "Pass" | "Advance" => "#2e7d32",
        "Inconclusive" | "Hold" => "#f9a825",
        "Error" => "#6d4c41",
        _ => "#c62828",
    }
}

/// Linear scale from `[lo, hi]` to `[a, b]`.
fn scale(x: f64, lo: f64, hi: f64, a: f64, b: f64) -> f64 {
    if (hi - lo).abs() < f64::EPSILON { (a + b) / 2.0 } else { a + (x - lo) / (hi - lo) * (b - a) }
}

fn svg_open(out: &mut String, id: &str, title: &str, height: f64) {
    let _ = write!(
        out,
        r#"<figure><figcaption>{}</figcaption><svg id="{id}" xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" viewBox="0 0 {W} {height}" role="img" aria-label="{}">"#,
        esc(title),
        esc(title)
    );
}

/// An axis for values `lo..hi`, drawn from `from` to `to` (pixels along it) at `at` (pixels
/// across): the line, five ticks with their values, and `label` (with its unit).
struct Axis<'a> {
    lo: f64,
    hi: f64,
    from: f64,
    to: f64,
    at: f64,
    label: &'a str,
    fmt: fn(f64) -> String,
}

/// Draws `a` horizontally (`vertical` false: along x, at y = `at`) or vertically.
fn axis(out: &mut String, a: &Axis<'_>, vertical: bool) {
    let (class, at) = (if vertical { "axis axis-y" } else { "axis axis-x" }, a.at);
    // (x1, y1, x2, y2) of a segment given along/across the axis.
    let seg = |p0: f64, q0: f64, p1: f64, q1: f64| if vertical { (q0, p0, q1, p1) } else { (p0, q0, p1, q1) };
    let (x1, y1, x2, y2) = seg(a.from, at, a.to, at);
    let _ = write!(
        out,
        r##"<g class="{class}"><line x1="{x1:.1}" x2="{x2:.1}" y1="{y1:.1}" y2="{y2:.1}" stroke="#333"/>"##
    );
    for i in 0..=4 {
        let v = a.lo + (a.hi - a.lo) * f64::from(i) / 4.0;
        let p = scale(v, a.lo, a.hi, a.from, a.to);
        let (tick_out, text_at, anchor) = if vertical { (-4.0, -6.0, "end") } else { (4.0, 14.0, "middle") };
        let (x1, y1, x2, y2) = seg(p, at, p, at + tick_out);
        let (tx, ty) = if vertical { (at + text_at, p + 3.0) } else { (p, at + text_at) };
        let _ = write!(
            out,
            r##"<line x1="{x1:.1}" x2="{x2:.1}" y1="{y1:.1}" y2="{y2:.1}" stroke="#333"/><text class="tick" x="{tx:.1}" y="{ty:.1}" font-size="9" text-anchor="{anchor}">{}</text>"##,
            esc(&(a.fmt)(v))
        );
    }
    let mid = (a.from + a.to) / 2.0;
    let place = if vertical {
        format!(r#"x="12" y="{mid:.1}" transform="rotate(-90 12 {mid:.1})""#)
    } else {
        format!(r#"x="{mid:.1}" y="{:.1}""#, at + 27.0)
    };
    let _ = write!(
        out,
        r#"<text class="axis-label" {place} font-size="10" text-anchor="middle">{}</text></g>"#,
        esc(a.label)
    );
}

fn whole(v: f64) -> String {
    format!("{v:.0}")
}

fn two(v: f64) -> String {
    format!("{v:.2}")
}

/// What a gate measures and which way it passes: `(what, unit, higher_is_better)`.
pub fn gate_sense(gate: &str) -> (&'static str, &'static str, bool) {
    match gate {
        "sample_size" => ("pairs used", "pairs", true),
        "median_cost" => ("median cost saving per task", "fraction of baseline", true),
        "median_wall_time" => ("median wall-time saving per task", "fraction of baseline", true),
        "p75_cost" => ("cost saving at the 75th percentile", "fraction of baseline", true),
        "p95_cost" => ("p95 cost increase", "fraction of baseline", false),
        "quality" => ("quality change, paired per task", "points", true),
        "rework" => ("rework increase", "fraction of baseline", false),
        "security" => ("new security findings", "findings", false),
        "reconciliation" => ("worst billing discrepancy", "fraction", false),
        _ => ("measure", "", true),
    }
}

/// The condition a gate passes on, in words with its threshold.
fn condition(gate: &str, threshold: f64) -> String {
    let (_, unit, higher) = gate_sense(gate);
    match (gate, higher) {
        ("sample_size", _) => format!("pairs ≥ {threshold:.0}"),
        ("security", _) => format!("findings ≤ {threshold:.0}"),
        (_, true) => format!("lower 95% bound ≥ {threshold:.4} ({unit})"),
        (_, false) => format!("upper 95% bound ≤ {threshold:.4} ({unit})"),
    }
}

/// A gate's measured value: the estimate and its bounds when there are any.
fn measured(x: &Value) -> String {
    let f = |k: &str| x[k].as_f64().filter(|v| v.is_finite());
    match (f("estimate"), f("lower_95"), f("upper_95")) {
        (None, _, _) => "not computable".to_owned(),
        (Some(e), Some(l), Some(u)) => format!("{e:.4} [{l:.4}, {u:.4}]"),
        (Some(e), Some(l), None) => format!("{e:.4} [{l:.4}, ∞)"),
        (Some(e), None, Some(u)) => format!("{e:.4} (−∞, {u:.4}]"),
        (Some(e), None, None) => format!("{e:.4}"),
    }
}

/// `(estimate, lower, upper, threshold)` on the chart's one convention, improvement to the right:
/// a gate that passes when its measure is low is negated (its bounds swap).
pub fn improvement_axis(gate: &str, e: f64, l: f64, u: f64, t: f64) -> (f64, f64, f64, f64) {
    if gate_sense(gate).2 { (e, l, u, t) } else { (-e, -u, -l, -t) }
}

/// The scorecard as text: per gate of the last window, the metric, the condition, the measured
/// value and the verdict (the verdict word first; its colour only repeats it).
fn scorecard_text(out: &mut String, windows: &[Value]) {
    let Some(last) = windows.last() else { return };
    let _ = write!(
        out,
        r#"<table id="scorecard-text"><caption>Gate scorecard, last window ({} → {}): metric, pass condition, measured value [one-sided 95% bounds], verdict</caption><tr><th>metric</th><th>condition</th><th>measured</th><th>verdict</th></tr>"#,
        text(&last["stage"]),
        text(&last["to"])
    );
    for x in last["gates"].as_array().map(Vec::as_slice).unwrap_or_default() {
        let gate = x["gate"].as_str().unwrap_or("");
        let verdict = x["verdict"].as_str().unwrap_or("Error");
        let _ = write!(
            out,
            r#"<tr><td>{} <small>({})</small></td><td>{}</td><td>{}</td><td style="border-left:6px solid {}">{}</td></tr>"#,
            esc(gate),
            esc(gate_sense(gate).0),
            esc(&condition(gate, x["threshold"].as_f64().unwrap_or(f64::NAN))),
            esc(&measured(x)),
            verdict_color(verdict),
            esc(verdict)
        );
    }
    out.push_str("</table>\n");
}

fn svg_close(out: &mut String) {
    out.push_str("</svg></figure>\n");
}

const STAGES: [&str; 6] = ["off", "shadow", "canary-10", "canary-25", "canary-50", "on"];

fn stage_level(s: &str) -> f64 {
    STAGES.iter().position(|x| *x == s).unwrap_or(0) as f64
}

fn timeline(out: &mut String, windows: &[Value]) {
    svg_open(out, "chart-timeline", "Rollout timeline: the stage after each evaluation window, coloured by verdict", H);
    for (i, s) in STAGES.iter().enumerate() {
        let y = scale(i as f64, 0.0, 5.0, H - PAD, PAD / 2.0);
        let _ = write!(
            out,
            r##"<text x="4" y="{:.1}" font-size="10">{s}</text><line x1="{PAD}" x2="{W}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/>"##,
            y + 3.0
        );
    }
    let n = windows.len().max(1) as f64;
    let mut prev: Option<(f64, f64)> = None;
    for (i, w) in windows.iter().enumerate() {
        let x = scale(i as f64 + 0.5, 0.0, n, PAD + 30.0, W - 10.0);
        let from = stage_level(w["stage"].as_str().unwrap_or("off"));
        let to = stage_level(w["to"].as_str().unwrap_or("off"));
        let (y0, y1) = (scale(from, 0.0, 5.0, H - PAD, PAD / 2.0), scale(to, 0.0, 5.0, H - PAD, PAD / 2.0));
        if let Some((px, py)) = prev {
            let _ = write!(out, r##"<line x1="{px:.1}" y1="{py:.1}" x2="{x:.1}" y2="{y0:.1}" stroke="#999"/>"##);
        }
        let action = w["action"].as_str().unwrap_or("");
        let c = verdict_color(action);
        let _ = write!(
            out,
            r#"<line x1="{x:.1}" y1="{y0:.1}" x2="{x:.1}" y2="{y1:.1}" stroke="{c}" stroke-width="2"/><circle class="window" cx="{x:.1}" cy="{y0:.1}" r="5" fill="{c}"><title>{} → {}: {} ({})</title></circle>"#,
            text(&w["stage"]),
            text(&w["to"]),
            esc(action),
            text(&w["reason"])
        );
        prev = Some((x, y1));
    }
    svg_close(out);
}

fn scorecard(out: &mut String, windows: &[Value]) {
    let gates: Vec<String> = windows
        .first()
        .and_then(|w| w["gates"].as_array())
        .map(|g| g.iter().filter_map(|x| x["gate"].as_str().map(str::to_owned)).collect())
        .unwrap_or_default();
    let rows = gates.len().max(1) as f64;
    let height = 30.0 + rows * 18.0;
    svg_open(out, "chart-scorecard", "Gate scorecard: each gate's verdict in each window", height);
    let n = windows.len().max(1) as f64;
    let cell = ((W - 130.0) / n).min(60.0);
    for (r, g) in gates.iter().enumerate() {
        let y = 24.0 + r as f64 * 18.0;
        let _ = write!(out, r#"<text x="4" y="{:.1}" font-size="10">{}</text>"#, y + 11.0, esc(g));
        for (i, w) in windows.iter().enumerate() {
            let v = w["gates"]
                .as_array()
                .and_then(|a| a.iter().find(|x| x["gate"] == g.as_str()))
                .and_then(|x| x["verdict"].as_str())
                .unwrap_or("Error");
            let x = 130.0 + i as f64 * cell;
            let _ = write!(
                out,
                r##"<rect class="cell" x="{x:.1}" y="{y:.1}" width="{:.1}" height="16" fill="{}" stroke="#fff"><title>{} at {}: {v}</title></rect><text x="{:.1}" y="{:.1}" font-size="9" fill="#fff" text-anchor="middle">{}</text>"##,
                cell - 1.0,
                verdict_color(v),
                esc(g),
                text(&w["stage"]),
                x + (cell - 1.0) / 2.0,
                y + 11.5,
                esc(v.get(..1).unwrap_or("?"))
            );
        }
    }
    for (i, w) in windows.iter().enumerate() {
        let x = 130.0 + i as f64 * cell + 2.0;
        let _ = write!(out, r#"<text x="{x:.1}" y="14" font-size="8">{}</text>"#, text(&w["stage"]));
    }
    svg_close(out);
}

fn forest(out: &mut String, windows: &[Value]) {
    let gates: Vec<String> = windows
        .first()
        .and_then(|w| w["gates"].as_array())
        .map(|g| g.iter().filter_map(|x| x["gate"].as_str().map(str::to_owned)).collect())
        .unwrap_or_default();
    for g in gates {
        let rows: Vec<(String, Value)> = windows
            .iter()
            .filter_map(|w| {
                let x = w["gates"].as_array()?.iter().find(|x| x["gate"] == g.as_str())?.clone();
                Some((w["stage"].as_str().unwrap_or("").to_owned(), x))
            })
            .filter(|(_, x)| x["estimate"].is_number())
            .collect();
        if rows.is_empty() {
            continue;
        }
        let threshold = rows.first().and_then(|(_, x)| x["threshold"].as_f64()).filter(|t| t.is_finite());
        // Every value on the one convention: improvement to the right.
        let plotted: Vec<(f64, f64, f64)> = rows
            .iter()
            .map(|(_, x)| {
                let e = x["estimate"].as_f64().unwrap_or(0.0);
                let l = x["lower_95"].as_f64().filter(|v| v.is_finite()).unwrap_or(e);
                let u = x["upper_95"].as_f64().filter(|v| v.is_finite()).unwrap_or(e);
                let (e, l, u, _) = improvement_axis(&g, e, l, u, threshold.unwrap_or(0.0));
                (e, l, u)
            })
            .collect();
        let t_plot = threshold.map(|t| improvement_axis(&g, 0.0, 0.0, 0.0, t).3);
        let vals: Vec<f64> =
            plotted.iter().flat_map(|(e, l, u)| [*e, *l, *u]).chain(t_plot).filter(|v| v.is_finite()).collect();
        let lo = vals.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = vals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let pad = ((hi - lo) * 0.05).max(1e-6);
        let (lo, hi) = (lo - pad, hi + pad);
        let body = 30.0 + rows.len() as f64 * 16.0;
        let height = body + 34.0;
        let id = format!("chart-forest-{}", g.replace(|c: char| !c.is_ascii_alphanumeric(), "-"));
        let (what, unit, higher) = gate_sense(&g);
        let shown = if higher { what.to_owned() } else { format!("{what}, negated") };
        svg_open(
            out,
            &id,
            &format!(
                "Forest plot, {g}: {shown} per window, estimate and one-sided 95% bounds; right is better; the dashed line is the threshold"
            ),
            height,
        );
        let (x0, x1) = (130.0, W - 205.0);
        let x_of = |v: f64| scale(v, lo, hi, x0, x1);
        if let (Some(t), Some(tp)) = (threshold, t_plot) {
            let tx = x_of(tp);
            let _ = write!(
                out,
                r##"<line class="threshold" x1="{tx:.1}" x2="{tx:.1}" y1="10" y2="{:.1}" stroke="#555" stroke-dasharray="4 3"/><text class="threshold-label" x="{tx:.1}" y="9" font-size="9" text-anchor="middle">threshold {}</text>"##,
                body - 6.0,
                esc(&condition(&g, t))
            );
        }
        let _ = write!(out, r#"<text x="{:.1}" y="9" font-size="9">measured (as recorded)</text>"#, x1 + 8.0);
        for (i, ((stage, x), (e, l, u))) in rows.iter().zip(&plotted).enumerate() {
            let y = 22.0 + i as f64 * 16.0;
            let c = verdict_color(x["verdict"].as_str().unwrap_or(""));
            let _ = write!(
                out,
                r#"<text x="4" y="{:.1}" font-size="9">{}</text><line x1="{:.1}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}" stroke="{c}" stroke-width="2"/><circle class="estimate" cx="{:.1}" cy="{y:.1}" r="3.5" fill="{c}"><title>{stage}: {}</title></circle><text class="measured" x="{:.1}" y="{:.1}" font-size="9">{} {}</text>"#,
                y + 3.0,
                esc(stage),
                x_of(*l),
                x_of(*u),
                x_of(*e),
                esc(&measured(x)),
                x1 + 8.0,
                y + 3.0,
                esc(&measured(x)),
                esc(x["verdict"].as_str().unwrap_or(""))
            );
        }
        let axis_label =
            if higher { format!("{what} ({unit}) → better") } else { format!("−({what}) ({unit}) → better") };
        axis(out, &Axis { lo, hi, from: x0, to: x1, at: body, label: &axis_label, fmt: two }, false);
        svg_close(out);
    }
}

fn scatter(out: &mut String, pairs: &[Value]) {
    svg_open(
        out,
        "chart-scatter",
        "Paired cost: baseline (x) against candidate (y) per simulated task; the diagonal is no change",
        H + 60.0,
    );
    let costs: Vec<(f64, f64)> =
        pairs.iter().filter_map(|p| Some((p["baseline_cost"].as_f64()?, p["candidate_cost"].as_f64()?))).collect();
    let hi = costs.iter().map(|(a, b)| a.max(*b)).fold(1.0, f64::max);
    let (x0, x1, y0, y1) = (PAD + 30.0, W - 20.0, H + 60.0 - PAD, 10.0);
    let _ = write!(
        out,
        r##"<line class="diagonal" x1="{x0}" y1="{y0}" x2="{x1}" y2="{y1}" stroke="#999" stroke-dasharray="4 3"/><text x="{:.1}" y="{:.1}" font-size="9" fill="#777">no change</text><text x="{:.1}" y="{:.1}" font-size="9" fill="#777">below the line: the candidate is cheaper</text>"##,
        x1 - 60.0,
        y1 + 14.0,
        x1 - 190.0,
        y0 - 8.0
    );
    let label = "baseline cost per task (micro-units)";
    axis(out, &Axis { lo: 0.0, hi, from: x0, to: x1, at: y0, label, fmt: whole }, false);
    let label = "candidate cost (micro-units)";
    axis(out, &Axis { lo: 0.0, hi, from: y0, to: y1, at: x0, label, fmt: whole }, true);
    for (a, b) in costs {
        let _ = write!(
            out,
            r##"<circle class="pair" cx="{:.1}" cy="{:.1}" r="2" fill="#1565c0" fill-opacity="0.5"/>"##,
            scale(a, 0.0, hi, x0, x1),
            scale(b, 0.0, hi, y0, y1)
        );
    }
    svg_close(out);
}

/// The `q` quantile (type 7) of sorted `v`.
fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let h = (v.len() - 1) as f64 * q;
    let (lo, hi) = (h.floor() as usize, h.ceil() as usize);
    v[lo] + (h - lo as f64) * (v[hi] - v[lo])
}

fn ecdf(out: &mut String, pairs: &[Value]) {
    svg_open(
        out,
        "chart-ecdf",
        "Cost ECDFs, baseline (grey) and candidate (blue), with p50, p75 and p95 marked",
        H + 10.0,
    );
    let arm = |k: &str| -> Vec<f64> {
        let mut v: Vec<f64> = pairs.iter().filter_map(|p| p[k].as_f64()).collect();
        v.sort_by(f64::total_cmp);
        v
    };
    let (base, cand) = (arm("baseline_cost"), arm("candidate_cost"));
    let hi = base.iter().chain(&cand).copied().fold(1.0, f64::max);
    let label = "cost per task (micro-units)";
    axis(out, &Axis { lo: 0.0, hi, from: PAD, to: W - 20.0, at: H - PAD, label, fmt: whole }, false);
    let label = "share of tasks at or below";
    axis(out, &Axis { lo: 0.0, hi: 1.0, from: H - PAD, to: 10.0, at: PAD, label, fmt: two }, true);
    let _ = write!(
        out,
        r##"<g class="legend"><text x="{:.1}" y="{:.1}" font-size="10" fill="#757575">— baseline</text><text x="{:.1}" y="{:.1}" font-size="10" fill="#1565c0">— candidate</text></g>"##,
        W - 120.0,
        H - PAD - 30.0,
        W - 120.0,
        H - PAD - 16.0
    );
    for (v, color, class) in [(&base, "#757575", "ecdf-baseline"), (&cand, "#1565c0", "ecdf-candidate")] {
        let n = v.len().max(1) as f64;
        let mut d = String::new();
        for (i, x) in v.iter().enumerate() {
            let px = scale(*x, 0.0, hi, PAD, W - 20.0);
            let py = scale((i + 1) as f64 / n, 0.0, 1.0, H - PAD, 10.0);
            let _ = write!(d, "{}{px:.1},{py:.1} ", if i == 0 { "M" } else { "L" });
        }
        let _ = write!(out, r#"<path class="{class}" d="{d}" fill="none" stroke="{color}" stroke-width="1.5"/>"#);
        for (q, label) in [(0.5, "p50"), (0.75, "p75"), (0.95, "p95")] {
            let x = scale(quantile(v, q), 0.0, hi, PAD, W - 20.0);
            let y = scale(q, 0.0, 1.0, H - PAD, 10.0);
            let _ = write!(
                out,
                r#"<circle class="marker" cx="{x:.1}" cy="{y:.1}" r="3" fill="{color}"><title>{label} {:.0}</title></circle><text x="{:.1}" y="{:.1}" font-size="8" fill="{color}">{label}</text>"#,
                quantile(v, q),
                x + 4.0,
                y - 3.0
            );
        }
    }
    svg_close(out);
}

fn table(out: &mut String, id: &str, caption: &str, rows: &serde_json::Map<String, Value>) {
    let _ = write!(out, r#"<table id="{id}"><caption>{}</caption>"#, esc(caption));
    for (k, v) in rows {
        let _ = write!(out, "<tr><th>{}</th><td>{}</td></tr>", esc(k), text(v));
    }
    out.push_str("</table>\n");
}

/// The report of `result` (a `strata.simulation-result/v1` document).
pub fn render(result: &Value) -> String {
    let mut out = String::with_capacity(64 * 1024);
    let title = format!("strata simulation: {} seed {}", text(&result["scenario"]), text(&result["seed"]));
    let _ = write!(
        out,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title}</title><style>body{{font:14px system-ui,sans-serif;margin:2em;max-width:60em}}figure{{margin:1.5em 0}}figcaption{{font-weight:600;margin-bottom:.3em}}table{{border-collapse:collapse;margin:1em 0}}th,td{{border:1px solid #ccc;padding:.2em .6em;text-align:left}}.synthetic{{background:#fff3e0;border:1px solid #f9a825;padding:.4em .8em}}footer{{margin-top:2em;font-size:12px;color:#444}}code{{font-size:12px}}</style></head><body>\n<h1>{title}</h1>\n"
    );
    if result["synthetic"].as_bool().unwrap_or(true) {
        out.push_str("<p class=\"synthetic\" id=\"synthetic\">Every figure here is simulated (synthetic): it shows what strata does under the modelled workload and faults, and can never pass promotion.</p>\n");
    }
    let rollout = &result["rollout"];
    if let Some(windows) = rollout["windows"].as_array() {
        let _ = writeln!(
            out,
            "<p id=\"outcome\">The rollout ended at <b>{}</b>{}. The real promotion, given the simulated pairs: provenance {} ({}).</p>",
            text(&rollout["final_stage"]),
            if rollout["rolled_back"].as_bool().unwrap_or(false) { ", rolled back" } else { "" },
            text(&rollout["promotion"]["provenance"]),
            text(&rollout["promotion"]["reason"])
        );
        timeline(&mut out, windows);
        scorecard(&mut out, windows);
        scorecard_text(&mut out, windows);
        forest(&mut out, windows);
        let pairs = rollout["pairs_sample"].as_array().cloned().unwrap_or_default();
        scatter(&mut out, &pairs);
        ecdf(&mut out, &pairs);
    } else {
        out.push_str("<p id=\"outcome\">This scenario has no rollout: its faults and invariants follow.</p>\n");
    }
    let empty = serde_json::Map::new();
    table(&mut out, "faults", "Faults injected", result["faults"].as_object().unwrap_or(&empty));
    table(&mut out, "measures", "What was simulated", result["measures"].as_object().unwrap_or(&empty));
    let mut inv = serde_json::Map::new();
    inv.insert("checks made (all passed)".to_owned(), result["invariants"]["checks"].clone());
    inv.insert(
        "invariants".to_owned(),
        Value::from(
            result["invariants"]["checked"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", "))
                .unwrap_or_default(),
        ),
    );
    table(&mut out, "invariants", "Invariants checked after every step", &inv);
    let _ = write!(
        out,
        "<footer id=\"provenance\">Scenario {} · seed {} · steps {} · journal head {} <code>{}</code> · schema {} · reproduce: <code>{}</code></footer>\n</body></html>\n",
        text(&result["scenario"]),
        text(&result["seed"]),
        text(&result["steps"]),
        text(&result["head"]["seq"]),
        text(&result["head"]["hash"]),
        text(&result["schema"]),
        text(&result["reproduce"])
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn improvement_is_always_to_the_right() {
        // p95 cost 40% lower (an increase of -0.40) and a median saving of 0.40 are both
        // improvements: both plot at +0.40, right of thresholds at -0.10 and 0.10.
        assert_eq!(improvement_axis("p95_cost", -0.40, -0.5, -0.3, 0.10), (0.40, 0.3, 0.5, -0.10));
        assert_eq!(improvement_axis("median_cost", 0.40, 0.3, 0.5, 0.10), (0.40, 0.3, 0.5, 0.10));
    }

    #[test]
    fn conditions_and_measured_values_read_as_text() {
        assert_eq!(condition("p95_cost", 0.1), "upper 95% bound ≤ 0.1000 (fraction of baseline)");
        assert_eq!(condition("sample_size", 200.0), "pairs ≥ 200");
        let x = serde_json::json!({"estimate": 0.25, "lower_95": 0.2, "upper_95": null});
        assert_eq!(measured(&x), "0.2500 [0.2000, ∞)");
        assert_eq!(measured(&serde_json::json!({"estimate": null})), "not computable");
    }
}
