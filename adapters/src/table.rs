//! Plain-text tables for human output (`--json` gives machine output). A row may carry a tone
//! (failed, held), which colours the whole line when colour is on ([`crate::style`]).

/// A table with a header row; columns are left-aligned and padded to their widest cell.
#[derive(Debug, Default)]
pub struct Table {
    rows: Vec<Vec<String>>,
    tones: Vec<Option<crate::style::Tone>>,
}

impl Table {
    /// A table with these column titles.
    pub fn new(header: &[&str]) -> Table {
        Table { rows: vec![header.iter().map(|s| (*s).to_owned()).collect()], tones: vec![None] }
    }

    /// Adds a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.toned_row(cells, None);
    }

    /// Adds a row with a tone (coloured by [`Self::render_painted`] when colour is on).
    pub fn toned_row(&mut self, cells: Vec<String>, tone: Option<crate::style::Tone>) {
        self.rows.push(cells);
        self.tones.push(tone);
    }

    /// Renders with two spaces between columns and no trailing spaces.
    pub fn render(&self) -> String {
        self.render_painted(crate::style::Paint::OFF)
    }

    /// [`Self::render`], each toned row in its colour when `paint` is on (padding is measured
    /// on the text, so columns stay aligned).
    pub fn render_painted(&self, paint: crate::style::Paint) -> String {
        let cols = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let mut widths = vec![0usize; cols];
        for r in &self.rows {
            for (i, c) in r.iter().enumerate() {
                widths[i] = widths[i].max(c.chars().count());
            }
        }
        let mut out = String::new();
        for (r, tone) in self.rows.iter().zip(&self.tones) {
            let mut line = String::new();
            for (i, c) in r.iter().enumerate() {
                line.push_str(c);
                if i + 1 < r.len() {
                    line.push_str(&" ".repeat(widths[i] - c.chars().count() + 2));
                }
            }
            out.push_str(&paint.paint(*tone, line.trim_end()));
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align() {
        let mut t = Table::new(&["a", "bbb"]);
        t.row(vec!["long".into(), "x".into()]);
        assert_eq!(t.render(), "a     bbb\nlong  x\n");
    }

    #[test]
    fn a_toned_row_is_coloured_only_when_paint_is_on() {
        use crate::style::{ColorChoice, Paint, Tone};
        let mut t = Table::new(&["task", "status"]);
        t.toned_row(vec!["a".into(), "failed".into()], Some(Tone::Bad));
        t.row(vec!["b".into(), "completed".into()]);
        assert_eq!(t.render(), "task  status\na     failed\nb     completed\n");
        let on = Paint::decide(ColorChoice::Always, false, false);
        assert_eq!(t.render_painted(on), "task  status\n\x1b[31ma     failed\x1b[0m\nb     completed\n");
    }
}
