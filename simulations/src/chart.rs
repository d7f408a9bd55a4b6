//! The report's charts drawn with plotters' SVG backend, and the little it needs around them:
//! each chart becomes an inline `<svg>` with an id, a `<title>` and a `<desc>` (what a screen
//! reader or a test reads), its parts in named groups (`<g class="axes">`, `<g class="pairs">`),
//! and its items classed (`class="tick"`, `class="axis-label"`, `class="pair"`), so the browser's
//! DOM says what each mark is.
//!
//! Plotters lays out the axes, ticks, grids and legends; its SVG backend writes text as `<text>`
//! (no font file is read: text sizes are estimated) and pixel coordinates as integers, so the same
//! data gives the same bytes. Plotters has no notion of a group or a class: a chart marks where a
//! group starts by drawing a marker text ([`layer`]), which [`finish`] turns into `<g>` tags.

use std::fmt::Write as _;

use plotters::coord::Shift;
use plotters::prelude::*;

/// Width of every chart, pixels.
pub const WIDTH_PX: u32 = 760;
/// Most characters of one label drawn on a chart.
const LABEL_CHARS_MAX: usize = 160;
/// Opens a marker text: what follows names a group and the class of its items.
const MARK: char = '\u{1}';

/// The root of a chart being drawn.
pub type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
/// What drawing on an [`Area`] returns.
pub type Drawn = Result<(), DrawingAreaErrorKind<std::io::Error>>;

/// One chart of the report.
pub struct Chart<'a> {
    /// Its element id (`chart-…`).
    pub id: &'a str,
    /// Its title, the figure's caption.
    pub title: &'a str,
    /// How to read it, in words (the SVG's `<desc>`; also printed under it).
    pub desc: &'a str,
    /// Its height, pixels.
    pub height_px: u32,
    /// The descriptions of its x and y axes, classed `axis-label`.
    pub axis_labels: [&'a str; 2],
}

impl<'a> Chart<'a> {
    /// Chart `id` with its `title`, `desc`, height and axis descriptions.
    pub fn new(id: &'a str, title: &'a str, desc: &'a str, height_px: u32, axis_labels: [&'a str; 2]) -> Self {
        Chart { id, title, desc, height_px, axis_labels }
    }
}

/// Pass and Advance: green.
pub const PASS: RGBColor = RGBColor(0x2e, 0x7d, 0x32);
/// Inconclusive and Hold: amber.
pub const HOLD: RGBColor = RGBColor(0xf9, 0xa8, 0x25);
/// Error: brown.
pub const ERROR: RGBColor = RGBColor(0x6d, 0x4c, 0x41);
/// Fail and Rollback: red.
pub const FAIL: RGBColor = RGBColor(0xc6, 0x28, 0x28);
/// The baseline arm, and reference lines: grey.
pub const BASELINE: RGBColor = RGBColor(0x61, 0x61, 0x61);
/// The candidate arm: blue.
pub const CANDIDATE: RGBColor = RGBColor(0x15, 0x65, 0xc0);
/// Text and axes.
pub const INK: RGBColor = RGBColor(0x21, 0x21, 0x21);
/// Grid lines and frames.
pub const GRID: RGBColor = RGBColor(0xe0, 0xe0, 0xe0);

/// The colour of a verdict or an action (a second channel: the word is always printed too).
pub fn verdict_color(v: &str) -> RGBColor {
    match v {
        "Pass" | "Advance" => PASS,
        "Inconclusive" | "Hold" => HOLD,
        "Error" => ERROR,
        _ => FAIL,
    }
}

/// An axis over `lo..hi` whose ticks are exactly `ticks` (categories at 0, 1, …, or chosen
/// levels); its tick labels come from the chart's formatter.
pub struct Ticks {
    lo: f64,
    hi: f64,
    ticks: Vec<f64>,
}

impl Ticks {
    /// `n` categories at 0, 1, …, n − 1, each half a unit either side.
    pub fn categories(n: usize) -> Self {
        let n = n.max(1);
        Ticks { lo: -0.5, hi: n as f64 - 0.5, ticks: (0..n).map(|i| i as f64).collect() }
    }

    /// `lo..hi` with ticks at `ticks`.
    pub fn at(lo: f64, hi: f64, ticks: Vec<f64>) -> Self {
        Ticks { lo, hi, ticks }
    }
}

impl Ranged for Ticks {
    type FormatOption = plotters::coord::ranged1d::DefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let share = if self.hi > self.lo { (v - self.lo) / (self.hi - self.lo) } else { 0.5 };
        limit.0 + (share * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<H: plotters::coord::ranged1d::KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.weight().allow_light_points() { Vec::new() } else { self.ticks.clone() }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.lo..self.hi
    }
}

/// `s` fit for a chart: no control character, at most [`LABEL_CHARS_MAX`] characters.
pub fn clean(s: &str) -> String {
    s.chars().map(|c| if c.is_control() { ' ' } else { c }).take(LABEL_CHARS_MAX).collect()
}

/// Text of `size` (plotters' units: the SVG font size is `size / 1.24` px) in `color`.
pub fn font(size: u32, color: RGBColor) -> TextStyle<'static> {
    ("sans-serif", f64::from(size)).into_font().color(&color)
}

/// Starts the group `group` (ending the one before); every later element of kind `tag`
/// (`text`, `circle`, `line`, …) in it gets `class="item"`.
pub fn layer(root: &Area<'_>, group: &str, item: Option<(&str, &str)>) -> Drawn {
    let (tag, class) = item.unwrap_or(("-", "-"));
    root.draw(&Text::new(format!("{MARK}{group} {tag} {class}"), (0, 0), font(1, INK)))
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// Text as plotters' SVG backend escapes it.
fn svg_text(s: &str) -> String {
    esc(s).replace('\'', "&apos;")
}

/// The chart's `<figure>`: drawn by `draw`, or, should plotters fail, a line saying so.
pub fn figure(chart: &Chart<'_>, draw: impl FnOnce(&Area<'_>) -> Drawn) -> String {
    let mut raw = String::new();
    let drawn = {
        let root = SVGBackend::with_string(&mut raw, (WIDTH_PX, chart.height_px)).into_drawing_area();
        root.fill(&WHITE).and_then(|()| draw(&root)).and_then(|()| root.present())
    };
    let mut out = format!("<figure><figcaption>{}</figcaption>\n", esc(chart.title));
    match drawn {
        Ok(()) => out.push_str(&finish(&raw, chart)),
        Err(e) => {
            let _ = write!(
                out,
                "<p class=\"chart-error\">[STRATA-E2454] the chart {} could not be drawn: {}; the result document (--json) has its figures; report it with the reproduction command below</p>",
                esc(chart.id),
                esc(&e.to_string())
            );
        }
    }
    let _ = writeln!(out, "<p class=\"how-to-read\">{}</p></figure>", esc(chart.desc));
    out
}

/// Plotters' SVG with the chart's id, title and description, its marker texts turned into
/// groups and its items classed.
fn finish(raw: &str, chart: &Chart<'_>) -> String {
    let axis_labels: Vec<String> = chart.axis_labels.iter().map(|l| svg_text(&clean(l))).collect();
    let id = esc(chart.id);
    let mut out = String::with_capacity(raw.len() + 512);
    let mut item: Option<(String, String)> = None;
    let mut open = false;
    let mut lines = raw.lines();
    while let Some(line) = lines.next() {
        if line.starts_with("<svg ") {
            let _ = write!(
                out,
                r#"<svg id="{id}" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" aria-labelledby="{id}-title {id}-desc"><title id="{id}-title">{}</title><desc id="{id}-desc">{}</desc>"#,
                esc(chart.title),
                esc(chart.desc),
                w = WIDTH_PX,
                h = chart.height_px,
            );
            out.push('\n');
            continue;
        }
        if line == "</svg>" {
            if open {
                out.push_str("</g>\n");
            }
            out.push_str("</svg>\n");
            open = false;
            continue;
        }
        if line.starts_with("<text ") {
            let (content, close) = (lines.next().unwrap_or_default(), lines.next().unwrap_or_default());
            if let Some(mark) = content.strip_prefix(MARK) {
                let mut parts = mark.split(' ');
                let (group, tag, class) = (parts.next(), parts.next(), parts.next());
                if open {
                    out.push_str("</g>\n");
                }
                let _ = writeln!(out, r#"<g class="{}">"#, group.unwrap_or_default());
                open = true;
                item = match (tag, class) {
                    (Some(t), Some(c)) if t != "-" => Some((t.to_owned(), c.to_owned())),
                    _ => None,
                };
                continue;
            }
            let class = if axis_labels.iter().any(|l| l == content) {
                Some("axis-label")
            } else {
                item.as_ref().filter(|(t, _)| t == "text").map(|(_, c)| c.as_str())
            };
            push_classed(&mut out, line, "text", class);
            out.push_str(content);
            out.push('\n');
            out.push_str(close);
            out.push('\n');
            continue;
        }
        let class = item.as_ref().filter(|(t, _)| line.starts_with(&format!("<{t} "))).map(|(t, c)| (t.as_str(), c));
        match class {
            Some((tag, c)) => push_classed(&mut out, line, tag, Some(c)),
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

/// `line`, an element `<tag …`, with `class` as its first attribute.
fn push_classed(out: &mut String, line: &str, tag: &str, class: Option<&str>) {
    match (class, line.get(tag.len() + 1..)) {
        (Some(c), Some(rest)) => {
            let _ = writeln!(out, r#"<{tag} class="{c}"{rest}"#);
        }
        _ => {
            out.push_str(line);
            out.push('\n');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marker_texts_become_groups_and_items_are_classed() {
        let page = figure(
            &Chart { id: "chart-t", title: "T", desc: "how", height_px: 100, axis_labels: ["x (units)", "-"] },
            |root| {
                layer(root, "axes", Some(("text", "tick")))?;
                root.draw(&Text::new("x (units)", (10, 10), font(12, INK)))?;
                root.draw(&Text::new("0.5", (10, 30), font(12, INK)))?;
                layer(root, "pairs", Some(("circle", "pair")))?;
                root.draw(&Circle::new((5, 5), 2, CANDIDATE.filled()))?;
                root.draw(&Text::new(clean("a\nb's"), (10, 50), font(12, INK)))
            },
        );
        assert!(page.contains(r#"<svg id="chart-t""#) && page.contains(r#"<title id="chart-t-title">T</title>"#));
        assert!(page.contains("<g class=\"axes\">\n<text class=\"axis-label\" x="), "{page}");
        assert!(page.contains("<text class=\"tick\" x="), "{page}");
        assert!(page.contains("</g>\n<g class=\"pairs\">\n<circle class=\"pair\" cx=\"5\""), "{page}");
        assert!(!page.contains(MARK) && page.matches("<g ").count() == page.matches("</g>").count(), "{page}");
        // Plotters' text, unclassed in a group whose items are circles.
        assert!(page.contains("<text x=\"10\" y=\"50\""), "{page}");
    }
}
