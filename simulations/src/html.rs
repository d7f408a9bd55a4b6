//! The HTML report of a run: one self-contained file (no script, no external resource) drawn
//! from the result document ([`crate::result`]): the rollout timeline with its actions, the gate
//! scorecard per window (a chart and a text table), a forest plot per gate, the paired cost
//! scatter, the cost ECDFs with p50/p75/p95, the faults injected and the invariants checked, and a
//! provenance footer with the seed, the journal head and the reproduction command.
//!
//! Charts people read, drawn with plotters ([`crate::chart`]): every chart has axes with scales
//! and units, a legend where marks differ, and says how to read it under it. A forest plot has
//! one sign convention, improvement to the right: a gate that passes when its measure is low is
//! plotted negated, its scale labelled with the measure's own values running high to low (as the
//! axis says). Its threshold is a labelled line and the measured value is printed beside each
//! row. The scorecard is also a text table (metric, condition, measured, verdict); colour is
//! only ever a second channel beside a word or a shape.

use std::fmt::Write as _;

use plotters::coord::ranged1d::ValueFormatter;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use serde_json::Value;

use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::chart::{self, Area, Chart, Drawn, INK, Ticks, clean, font, layer};

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

fn css_color(c: RGBColor) -> String {
    format!("#{:02x}{:02x}{:02x}", c.0, c.1, c.2)
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
        // A count (pairs, findings) is whole.
        (Some(e), None, None) if matches!(x["gate"].as_str(), Some("sample_size" | "security")) => format!("{e:.0}"),
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
            r#"<tr><td>{} <small>({})</small></td><td>{}</td><td class="value">{}</td><td style="border-left:6px solid {}">{}</td></tr>"#,
            esc(gate),
            esc(gate_sense(gate).0),
            esc(&condition(gate, x["threshold"].as_f64().unwrap_or(f64::NAN))),
            esc(&measured(x)),
            css_color(chart::verdict_color(verdict)),
            esc(verdict)
        );
    }
    out.push_str("</table>\n");
}

/// The rollout's stages, lowest first, with the candidate's share of traffic.
const STAGES: [(&str, &str); 7] = [
    ("off", "0%"),
    ("observe", "0%"),
    ("shadow", "0%, shadowed"),
    ("canary-10", "10%"),
    ("canary-25", "25%"),
    ("canary-50", "50%"),
    ("on", "100%"),
];

fn stage_level(s: &str) -> f64 {
    STAGES.iter().position(|(x, _)| *x == s).unwrap_or(0) as f64
}

type Categories = Ticks;

fn categories(n: usize) -> Ticks {
    Ticks::categories(n)
}

/// The category at tick `v`, if `v` is one.
fn category(names: &[String], v: f64) -> String {
    let i = v.round();
    if (v - i).abs() > 1e-6 || i < 0.0 {
        return String::new();
    }
    names.get(i as usize).cloned().unwrap_or_default()
}

/// `v` with the decimals a scale spanning `span` needs.
fn tick(v: f64, span: f64) -> String {
    let v = if v.abs() < 1e-12 { 0.0 } else { v };
    match span.abs() {
        s if s >= 20.0 => grouped(v),
        s if s >= 2.0 => format!("{v:.1}"),
        s if s >= 0.2 => format!("{v:.2}"),
        _ => format!("{v:.3}"),
    }
}

/// `v` rounded to a whole number, its thousands separated by commas.
fn grouped(v: f64) -> String {
    let digits = format!("{:.0}", v.abs());
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if v.round() < 0.0 { format!("-{out}") } else { out }
}

/// A number as people write it: at most four decimals, no trailing zeros.
fn num(v: f64) -> String {
    let s = format!("{v:.4}");
    let s = if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.') } else { &s };
    if s == "-0" { "0".to_owned() } else { s.to_owned() }
}

/// The windows' labels: their number and the stage evaluated.
fn window_names(windows: &[Value]) -> Vec<String> {
    windows
        .iter()
        .enumerate()
        .map(|(i, w)| clean(&format!("{} {}", i + 1, w["stage"].as_str().unwrap_or("?"))))
        .collect()
}

/// The gates of the first window, in its order.
fn gate_names(windows: &[Value]) -> Vec<String> {
    windows
        .first()
        .and_then(|w| w["gates"].as_array())
        .map(|g| g.iter().filter_map(|x| x["gate"].as_str().map(clean)).collect())
        .unwrap_or_default()
}

fn gate_of<'a>(w: &'a Value, gate: &str) -> Option<&'a Value> {
    w["gates"].as_array()?.iter().find(|x| x["gate"] == gate)
}

/// Text anchored at `h` and `v` of its position.
fn anchored(size: u32, color: RGBColor, h: HPos, v: VPos) -> TextStyle<'static> {
    font(size, color).pos(Pos::new(h, v))
}

type Plot<'a> = ChartContext<
    'a,
    SVGBackend<'a>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;
type CatPlot<'a, X> = ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, Categories>>;

/// Every chart's frame: its margins and the room for the axes' labels (`y_label_px` for the y
/// axis's tick labels and description).
fn frame<'a, 'b>(area: &'a Area<'b>, y_label_px: u32) -> ChartBuilder<'a, 'b, SVGBackend<'b>> {
    let mut b = ChartBuilder::on(area);
    b.margin(14).margin_right(30).x_label_area_size(50).y_label_area_size(y_label_px);
    b
}

/// The axes every chart shares: a light grid, ticks with their values, both descriptions.
fn axes<X, Y>(
    root: &Area<'_>,
    mesh: &mut plotters::chart::MeshStyle<'_, '_, X, Y, SVGBackend<'_>>,
    (x_desc, y_desc): (&str, &str),
) -> Drawn
where
    X: Ranged<ValueType = f64> + ValueFormatter<f64>,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    layer(root, "axes", Some(("text", "tick")))?;
    mesh.light_line_style(TRANSPARENT)
        .bold_line_style(chart::GRID)
        .axis_style(INK)
        .label_style(font(13, INK))
        .axis_desc_style(font(14, INK))
        .x_desc(x_desc)
        .y_desc(y_desc)
        .draw()
}

fn legend<'a, CT: CoordTranslate>(
    root: &Area<'_>,
    c: &mut ChartContext<'a, SVGBackend<'a>, CT>,
    at: SeriesLabelPosition,
) -> Drawn {
    layer(root, "legend", Some(("text", "legend-item")))?;
    c.configure_series_labels()
        .position(at)
        .background_style(WHITE.mix(0.92))
        .border_style(chart::GRID)
        .label_font(font(13, INK))
        .draw()
}

fn timeline(windows: &[Value]) -> String {
    let names = window_names(windows);
    let stages: Vec<String> = STAGES.iter().map(|(s, share)| format!("{s} ({share})")).collect();
    let (xl, yl) = ("evaluation window, in order (stage evaluated)", "rollout stage (candidate's traffic)");
    let path: Vec<String> =
        windows.iter().map(|w| format!("{} {} → {}", text(&w["stage"]), text(&w["action"]), text(&w["to"]))).collect();
    let desc = format!(
        "Each window's mark sits at the stage it evaluated, shaped and coloured by the action (triangle Advance, circle Hold, cross Rollback, the word beside it); its bar goes to the stage after. {}.",
        path.join("; ")
    );
    let chart = Chart::new(
        "chart-timeline",
        "Rollout timeline: the stage of each evaluation window and the action taken",
        &desc,
        330,
        [xl, yl],
    );
    let levels: Vec<(f64, f64, String)> = windows
        .iter()
        .map(|w| {
            let from = stage_level(w["stage"].as_str().unwrap_or("off"));
            (from, stage_level(w["to"].as_str().unwrap_or("off")), clean(w["action"].as_str().unwrap_or("")))
        })
        .collect();
    chart::figure(&chart, |root| {
        let mut c = frame(root, 170).build_cartesian_2d(categories(windows.len()), categories(STAGES.len()))?;
        let (xf, yf) = (|v: &f64| category(&names, *v), |v: &f64| category(&stages, *v));
        axes(root, c.configure_mesh().x_label_formatter(&xf).y_label_formatter(&yf), (xl, yl))?;
        layer(root, "path", None)?;
        c.draw_series(levels.windows(2).enumerate().map(|(i, p)| {
            DashedPathElement::new(vec![(i as f64, p[0].1), (i as f64 + 1.0, p[1].0)], 4, 3, chart::BASELINE)
        }))?;
        c.draw_series(levels.iter().enumerate().map(|(i, (from, to, action))| {
            PathElement::new(vec![(i as f64, *from), (i as f64, *to)], chart::verdict_color(action).stroke_width(3))
        }))?;
        layer(root, "marks", None)?;
        let at = |action: &str| -> Vec<(f64, f64)> {
            levels.iter().enumerate().filter(|(_, l)| l.2 == action).map(|(i, l)| (i as f64, l.0)).collect()
        };
        let (advance, hold, rollback) = (chart::PASS.filled(), chart::HOLD.filled(), chart::FAIL.stroke_width(3));
        c.draw_series(at("Advance").into_iter().map(|p| TriangleMarker::new(p, 7, advance)))?
            .label("Advance: to the next stage")
            .legend(move |(x, y)| TriangleMarker::new((x + 8, y), 6, advance));
        c.draw_series(at("Hold").into_iter().map(|p| Circle::new(p, 6, hold)))?
            .label("Hold: stay, more evidence")
            .legend(move |(x, y)| Circle::new((x + 8, y), 5, hold));
        c.draw_series(at("Rollback").into_iter().map(|p| Cross::new(p, 6, rollback)))?
            .label("Rollback: back to off")
            .legend(move |(x, y)| Cross::new((x + 8, y), 5, rollback));
        layer(root, "windows", Some(("text", "window")))?;
        c.draw_series(levels.iter().enumerate().map(|(i, (from, _, action))| {
            EmptyElement::at((i as f64, *from)) + Text::new(action.clone(), (10, -12), font(13, INK))
        }))?;
        legend(root, &mut c, SeriesLabelPosition::UpperLeft)
    })
}

/// The verdict's word, or its first letter when the cell is narrow.
fn verdict_word(v: &str, wide: bool) -> String {
    if wide { clean(v) } else { v.get(..1).unwrap_or("?").to_owned() }
}

fn scorecard(windows: &[Value]) -> String {
    let gates = gate_names(windows);
    let names = window_names(windows);
    let (xl, yl) = ("evaluation window (stage evaluated)", "gate (pass condition)");
    let wide = windows.len() <= 7;
    let key = if wide { "" } else { " P Pass, I Inconclusive, E Error, F Fail." };
    let value = if wide { " and, under it, the estimate (in the gate's own units, as recorded)" } else { "" };
    let desc = format!(
        "A row per gate, a column per window; each cell says the gate's verdict in that window{value} (its colour repeats it: green Pass, amber Inconclusive, brown Error, red Fail).{key} The table below gives each gate's condition and measured value with its bounds."
    );
    let height_px = 110 + if wide { 42 } else { 30 } * gates.len().max(1) as u32;
    let chart =
        Chart::new("chart-scorecard", "Gate scorecard: each gate's verdict in each window", &desc, height_px, [xl, yl]);
    // The first gate on top, with its pass condition.
    let rows: Vec<String> = gates
        .iter()
        .rev()
        .map(|g| {
            let t = windows.first().and_then(|w| gate_of(w, g)).and_then(|x| x["threshold"].as_f64());
            t.filter(|t| t.is_finite()).map_or_else(|| g.clone(), |t| format!("{g} ({})", short_condition(g, t)))
        })
        .collect();
    chart::figure(&chart, |root| {
        let mut c: CatPlot<'_, Categories> =
            frame(root, 250).build_cartesian_2d(categories(windows.len()), categories(gates.len()))?;
        let (xf, yf) = (|v: &f64| category(&names, *v), |v: &f64| category(&rows, *v));
        axes(root, c.configure_mesh().disable_mesh().x_label_formatter(&xf).y_label_formatter(&yf), (xl, yl))?;
        // (column, row, verdict, estimate)
        let mut cells: Vec<(f64, f64, String, String)> = Vec::new();
        for (i, w) in windows.iter().enumerate() {
            for (r, g) in gates.iter().enumerate() {
                let x = gate_of(w, g);
                let v = x.and_then(|x| x["verdict"].as_str()).unwrap_or("Error");
                cells.push((i as f64, (gates.len() - 1 - r) as f64, clean(v), x.map(estimate).unwrap_or_default()));
            }
        }
        layer(root, "cells", Some(("rect", "cell")))?;
        c.draw_series(cells.iter().map(|(x, y, v, _)| {
            Rectangle::new([(x - 0.48, y - 0.45), (x + 0.48, y + 0.45)], chart::verdict_color(v).filled())
        }))?;
        let ink = |v: &str| if v == "Inconclusive" { INK } else { WHITE };
        layer(root, "verdicts", Some(("text", "verdict")))?;
        c.draw_series(cells.iter().map(|(x, y, v, _)| {
            let at = if wide { y + 0.17 } else { *y };
            Text::new(verdict_word(v, wide), (*x, at), anchored(13, ink(v), HPos::Center, VPos::Center))
        }))?;
        if wide {
            layer(root, "estimates", Some(("text", "cell-value")))?;
            c.draw_series(cells.iter().map(|(x, y, v, e)| {
                Text::new(e.clone(), (*x, y - 0.2), anchored(12, ink(v), HPos::Center, VPos::Center))
            }))?;
        }
        Ok(())
    })
}

/// The condition a gate passes on, short: the bound that must clear the threshold.
fn short_condition(gate: &str, t: f64) -> String {
    match (gate, gate_sense(gate).2) {
        ("sample_size", _) => format!("≥ {} pairs", num(t)),
        ("security", _) => format!("≤ {} findings", num(t)),
        (_, true) => format!("lower bound ≥ {}", num(t)),
        (_, false) => format!("upper bound ≤ {}", num(t)),
    }
}

/// A gate's estimate, short (a count whole), or "n/a" when not computable.
fn estimate(x: &Value) -> String {
    match x["estimate"].as_f64().filter(|v| v.is_finite()) {
        None => "n/a".to_owned(),
        Some(e) if matches!(x["gate"].as_str(), Some("sample_size" | "security")) => format!("{e:.0}"),
        Some(e) => format!("{e:.3}"),
    }
}

/// A forest plot's rows: the window's name, the gate's result, and `(estimate, lower, upper)`
/// on the improvement axis.
type ForestRow<'a> = (String, &'a Value, (f64, f64, f64));

fn forest(windows: &[Value]) -> String {
    let names = window_names(windows);
    let mut out = String::new();
    for g in gate_names(windows) {
        let rows: Vec<ForestRow<'_>> = windows
            .iter()
            .zip(&names)
            .filter_map(|(w, name)| {
                let x = gate_of(w, &g)?;
                let e = x["estimate"].as_f64().filter(|v| v.is_finite())?;
                let l = x["lower_95"].as_f64().filter(|v| v.is_finite()).unwrap_or(e);
                let u = x["upper_95"].as_f64().filter(|v| v.is_finite()).unwrap_or(e);
                let (e, l, u, _) = improvement_axis(&g, e, l, u, 0.0);
                Some((name.clone(), x, (e, l, u)))
            })
            .collect();
        if rows.is_empty() {
            continue;
        }
        let threshold = rows.first().and_then(|(_, x, _)| x["threshold"].as_f64()).filter(|t| t.is_finite());
        out.push_str(&forest_one(&g, &rows, threshold));
    }
    out
}

/// The x range of a forest plot: its values with a margin.
fn span(vals: &[f64]) -> (f64, f64) {
    let lo = vals.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = vals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if !lo.is_finite() || !hi.is_finite() {
        return (-1.0, 1.0);
    }
    let pad = if hi - lo < 1e-9 { lo.abs().max(1.0) * 0.5 } else { (hi - lo) * 0.1 };
    (lo - pad, hi + pad)
}

fn forest_one(g: &str, rows: &[ForestRow<'_>], threshold: Option<f64>) -> String {
    let (what, unit, higher) = gate_sense(g);
    // Plotted values are on the improvement axis; the scale shows the measure's own values.
    let sign = if higher { 1.0 } else { -1.0 };
    let t_plot = threshold.map(|t| sign * t);
    let vals: Vec<f64> = rows.iter().flat_map(|(_, _, (e, l, u))| [*e, *l, *u]).chain(t_plot).collect();
    let (lo, hi) = span(&vals);
    let xl = if higher {
        format!("← worse · {what} ({unit}) · better →")
    } else {
        format!("← worse · {what} ({unit}), scale reversed: lower is better · better →")
    };
    let yl = "window";
    let id = format!("chart-forest-{}", g.replace(|c: char| !c.is_ascii_alphanumeric(), "-"));
    let cond = threshold.map(|t| condition(g, t)).unwrap_or_else(|| "no threshold".to_owned());
    let desc = format!(
        "Right is better. Each row is a window: the dot is the estimate, the bar its one-sided 95% bounds, coloured by the verdict printed beside it. The dashed line is the threshold; the gate passes when {cond}."
    );
    let title =
        format!("Forest plot, {g}: {what} per window, estimate and 95% bounds against the threshold; right is better");
    let height_px = 120 + 30 * rows.len() as u32;
    let chart = Chart::new(&id, &title, &desc, height_px, [&xl, yl]);
    let labels: Vec<String> = rows.iter().rev().map(|(n, _, _)| n.clone()).collect();
    let n = rows.len();
    chart::figure(&chart, |root| {
        let (plot, side) = root.split_horizontally(chart::WIDTH_PX - 250);
        let mut c: CatPlot<'_, plotters::coord::types::RangedCoordf64> =
            frame(&plot, 110).margin_top(30).build_cartesian_2d(lo..hi, categories(n))?;
        let xf = |v: &f64| tick(sign * v, hi - lo);
        let yf = |v: &f64| category(&labels, *v);
        axes(root, c.configure_mesh().x_labels(6).x_label_formatter(&xf).y_label_formatter(&yf), (&xl, yl))?;
        // Row i (window i) from the top.
        let y_of = |i: usize| (n - 1 - i) as f64;
        if let (Some(t), Some(tp)) = (threshold, t_plot) {
            layer(root, "threshold", Some(("text", "threshold-label")))?;
            c.draw_series([DashedPathElement::new(vec![(tp, -0.5), (tp, n as f64 - 0.5)], 6, 4, INK.stroke_width(2))])?;
            c.draw_series([EmptyElement::at((tp, n as f64 - 0.5))
                + Text::new(format!("threshold {}", num(t)), (0, -6), anchored(13, INK, HPos::Center, VPos::Bottom))])?;
        }
        layer(root, "intervals", None)?;
        c.draw_series(rows.iter().enumerate().map(|(i, (_, x, (_, l, u)))| {
            let color = chart::verdict_color(x["verdict"].as_str().unwrap_or(""));
            PathElement::new(vec![(*l, y_of(i)), (*u, y_of(i))], color.stroke_width(3))
        }))?;
        layer(root, "estimates", Some(("circle", "estimate")))?;
        c.draw_series(rows.iter().enumerate().map(|(i, (_, x, (e, _, _)))| {
            let color = chart::verdict_color(x["verdict"].as_str().unwrap_or(""));
            Circle::new((*e, y_of(i)), 5, color.filled())
        }))?;
        layer(root, "measured", Some(("text", "measured")))?;
        let (sx, _) = side.get_base_pixel();
        let head =
            Text::new("measured [95% bounds], verdict", (sx + 6, 14), anchored(13, INK, HPos::Left, VPos::Center));
        root.draw(&head)?;
        for (i, (_, x, (e, _, _))) in rows.iter().enumerate() {
            let (_, py) = c.backend_coord(&(*e, y_of(i)));
            let verdict = clean(x["verdict"].as_str().unwrap_or(""));
            let line = format!("{} {verdict}", measured(x));
            root.draw(&Text::new(line, (sx + 6, py), anchored(13, INK, HPos::Left, VPos::Center)))?;
        }
        Ok(())
    })
}

/// The costs of the sampled pairs, `(baseline, candidate)`.
fn costs(pairs: &[Value]) -> Vec<(f64, f64)> {
    pairs.iter().filter_map(|p| Some((p["baseline_cost"].as_f64()?, p["candidate_cost"].as_f64()?))).collect()
}

fn scatter(pairs: &[Value]) -> String {
    let costs = costs(pairs);
    let hi = costs.iter().map(|(a, b)| a.max(*b)).fold(1.0, f64::max) * 1.05;
    let cheaper = costs.iter().filter(|(a, b)| b < a).count();
    let (xl, yl) = ("baseline cost per task (micro-units)", "candidate cost per task (micro-units)");
    let desc = format!(
        "One dot per simulated task: its baseline cost across, its candidate cost up. Below the dashed diagonal the candidate is cheaper: {cheaper} of {} sampled tasks.",
        costs.len()
    );
    let chart = Chart::new(
        "chart-scatter",
        "Paired cost: baseline against candidate per simulated task; below the diagonal is cheaper",
        &desc,
        440,
        [xl, yl],
    );
    chart::figure(&chart, |root| {
        let mut c: Plot<'_> = frame(root, 80).build_cartesian_2d(0.0..hi, 0.0..hi)?;
        let f = |v: &f64| tick(*v, hi);
        axes(root, c.configure_mesh().x_labels(8).y_labels(8).x_label_formatter(&f).y_label_formatter(&f), (xl, yl))?;
        layer(root, "diagonal", None)?;
        c.draw_series([DashedPathElement::new(vec![(0.0, 0.0), (hi, hi)], 6, 4, chart::BASELINE.stroke_width(2))])?
            .label("no change: candidate = baseline")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], chart::BASELINE.stroke_width(2)));
        layer(root, "pairs", Some(("circle", "pair")))?;
        c.draw_series(costs.iter().map(|p| Circle::new(*p, 3, chart::CANDIDATE.mix(0.45).filled())))?
            .label("a simulated task (baseline, candidate)")
            .legend(|(x, y)| Circle::new((x + 9, y), 4, chart::CANDIDATE.filled()));
        layer(root, "annotation", None)?;
        c.draw_series([Text::new(
            "↘ below the diagonal: the candidate is cheaper",
            (hi * 0.97, hi * 0.06),
            anchored(13, chart::BASELINE, HPos::Right, VPos::Center),
        )])?;
        legend(root, &mut c, SeriesLabelPosition::UpperLeft)
    })
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

/// The ECDF of sorted `v` as a step path.
fn steps(v: &[f64]) -> Vec<(f64, f64)> {
    let n = v.len().max(1) as f64;
    let mut path = Vec::with_capacity(2 * v.len() + 1);
    path.push((v.first().copied().unwrap_or(0.0), 0.0));
    for (i, x) in v.iter().enumerate() {
        path.push((*x, i as f64 / n));
        path.push((*x, (i + 1) as f64 / n));
    }
    path
}

fn ecdf(pairs: &[Value]) -> String {
    let arm = |k: &str| -> Vec<f64> {
        let mut v: Vec<f64> = pairs.iter().filter_map(|p| p[k].as_f64()).collect();
        v.sort_by(f64::total_cmp);
        v
    };
    let (base, cand) = (arm("baseline_cost"), arm("candidate_cost"));
    let hi = base.iter().chain(&cand).copied().fold(1.0, f64::max) * 1.05;
    let (xl, yl) = ("cost per task (micro-units)", "share of tasks at or below (fraction)");
    let qs = [(0.5, "p50"), (0.75, "p75"), (0.95, "p95")];
    let line = |v: &[f64]| qs.iter().map(|(q, l)| format!("{l} {}", grouped(quantile(v, *q)))).collect::<Vec<_>>();
    let desc = format!(
        "Left is cheaper. Each curve rises by one task's share at its cost; the dots mark p50, p75 and p95. Baseline {}; candidate {} (micro-units).",
        line(&base).join(", "),
        line(&cand).join(", ")
    );
    let chart = Chart::new(
        "chart-ecdf",
        "Cost ECDFs, baseline and candidate, with p50, p75 and p95 marked; left is cheaper",
        &desc,
        380,
        [xl, yl],
    );
    chart::figure(&chart, |root| {
        let mut c =
            frame(root, 80).build_cartesian_2d(0.0..hi, Ticks::at(0.0, 1.0, vec![0.0, 0.25, 0.5, 0.75, 0.95, 1.0]))?;
        let (xf, yf) = (|v: &f64| tick(*v, hi), |v: &f64| format!("{v:.2}"));
        axes(root, c.configure_mesh().x_labels(8).x_label_formatter(&xf).y_label_formatter(&yf), (xl, yl))?;
        for (v, color, group, name) in [
            (&base, chart::BASELINE, "ecdf-baseline", "baseline"),
            (&cand, chart::CANDIDATE, "ecdf-candidate", "candidate"),
        ] {
            layer(root, group, None)?;
            c.draw_series([PathElement::new(steps(v), color.stroke_width(2))])?
                .label(name)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
        }
        layer(root, "markers", Some(("circle", "marker")))?;
        for (v, color) in [(&base, chart::BASELINE), (&cand, chart::CANDIDATE)] {
            c.draw_series(qs.iter().map(|(q, _)| Circle::new((quantile(v, *q), *q), 4, color.filled())))?;
        }
        layer(root, "marker-labels", Some(("text", "marker-label")))?;
        // Baseline's labels above-left of their mark, candidate's below-right: they never meet.
        for (v, color, (dx, dy), (h, vp)) in [
            (&base, chart::BASELINE, (-8, -4), (HPos::Right, VPos::Bottom)),
            (&cand, chart::CANDIDATE, (8, 4), (HPos::Left, VPos::Top)),
        ] {
            c.draw_series(qs.iter().map(|(q, l)| {
                let x = quantile(v, *q);
                EmptyElement::at((x, *q))
                    + Text::new(format!("{l} {}", grouped(x)), (dx, dy), anchored(12, color, h, vp))
            }))?;
        }
        legend(root, &mut c, SeriesLabelPosition::LowerRight)
    })
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
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title}</title><style>body{{font:14px system-ui,sans-serif;margin:2em;max-width:60em}}figure{{margin:1.5em 0}}figcaption{{font-weight:600;margin-bottom:.3em}}table{{border-collapse:collapse;margin:1em 0}}th,td{{border:1px solid #ccc;padding:.2em .6em;text-align:left}}.synthetic{{background:#fff3e0;border:1px solid #f9a825;padding:.4em .8em}}footer{{margin-top:2em;font-size:12px;color:#444}}code{{font-size:12px}}.how-to-read{{font-size:12px;color:#444;margin:.3em 0 0;max-width:760px}}svg{{max-width:100%;height:auto}}td.value{{white-space:nowrap}}</style></head><body>\n<h1>{title}</h1>\n"
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
        out.push_str(&timeline(windows));
        out.push_str(&scorecard(windows));
        scorecard_text(&mut out, windows);
        out.push_str(&forest(windows));
        let pairs = rollout["pairs_sample"].as_array().map(Vec::as_slice).unwrap_or_default();
        out.push_str(&scatter(pairs));
        out.push_str(&ecdf(pairs));
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
        assert_eq!(measured(&serde_json::json!({"gate": "sample_size", "estimate": 612.0})), "612");
        assert_eq!(
            (grouped(1_234_567.4), grouped(-1000.0), grouped(999.0), grouped(-0.2)),
            ("1,234,567".into(), "-1,000".into(), "999".into(), "0".into())
        );
        assert_eq!((num(0.25), num(40.0), num(-0.00001)), ("0.25".into(), "40".into(), "0".into()));
        assert_eq!((tick(0.15, 0.1), tick(1200.0, 1400.0)), ("0.150".into(), "1,200".into()));
    }
}
