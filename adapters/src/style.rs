//! Colour in human output: a failed row in red, a held one in yellow, and nothing else coloured.
//!
//! Colour is a second channel only: the word (`failed`, `held`) is always printed, so output
//! without colour says the same. It is on when stdout is a terminal (`--color auto`, the
//! default) unless `NO_COLOR` is set, always with `--color always`, and never with `--color
//! never` or when the daemon runs the command for a client (its output goes to a socket).

use std::io::IsTerminal as _;

/// The `--color` choice.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorChoice {
    /// Colour when stdout is a terminal and `NO_COLOR` is not set.
    #[default]
    Auto,
    /// Always colour (even into a pipe, and over `NO_COLOR`).
    Always,
    /// Never colour.
    Never,
}

/// Whether to colour, decided once per command and passed down.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Paint {
    on: bool,
}

/// The tone of a cell: what it says about the row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tone {
    /// Failed, conflicted, rolled back: red.
    Bad,
    /// Held, paused: yellow.
    Held,
}

impl Paint {
    /// No colour.
    pub const OFF: Paint = Paint { on: false };

    /// Decides from the choice, the environment's `NO_COLOR` and whether stdout is a terminal.
    pub fn decide(choice: ColorChoice, no_color: bool, stdout_terminal: bool) -> Paint {
        let on = match choice {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => stdout_terminal && !no_color,
        };
        Paint { on }
    }

    /// [`Self::decide`] for this process (`NO_COLOR` set to anything non-empty counts).
    pub fn for_process(choice: ColorChoice) -> Paint {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        Paint::decide(choice, no_color, std::io::stdout().is_terminal())
    }

    /// Whether colour is on.
    pub fn on(self) -> bool {
        self.on
    }

    /// `text` in the tone's colour, or as it is when colour is off.
    pub fn paint(self, tone: Option<Tone>, text: &str) -> String {
        match (self.on, tone) {
            (true, Some(Tone::Bad)) => format!("\x1b[31m{text}\x1b[0m"),
            (true, Some(Tone::Held)) => format!("\x1b[33m{text}\x1b[0m"),
            _ => text.to_owned(),
        }
    }
}

/// The tone of a status word: `failed`, `conflicted`, `rolled-back` and `aborted` are bad;
/// `held` and `paused` are held; anything else has none.
pub fn tone_of(status: &str) -> Option<Tone> {
    match status {
        "failed" | "conflicted" | "rolled-back" | "rolledback" | "aborted" => Some(Tone::Bad),
        "held" | "paused" => Some(Tone::Held),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_follows_the_choice_the_terminal_and_no_color() {
        let auto = |no_color, tty| Paint::decide(ColorChoice::Auto, no_color, tty).on();
        assert!(auto(false, true));
        assert!(!auto(true, true), "NO_COLOR turns auto off");
        assert!(!auto(false, false), "no terminal, no colour");
        assert!(Paint::decide(ColorChoice::Always, true, false).on());
        assert!(!Paint::decide(ColorChoice::Never, false, true).on());
    }

    #[test]
    fn failed_is_red_held_is_yellow_and_the_word_stays() {
        let on = Paint::decide(ColorChoice::Always, false, false);
        assert_eq!(on.paint(tone_of("failed"), "failed"), "\x1b[31mfailed\x1b[0m");
        assert_eq!(on.paint(tone_of("held"), "held"), "\x1b[33mheld\x1b[0m");
        assert_eq!(on.paint(tone_of("completed"), "completed"), "completed");
        assert_eq!(Paint::OFF.paint(tone_of("failed"), "failed"), "failed");
    }
}
