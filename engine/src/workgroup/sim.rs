//! The simulated provider's model: for a task, an attempt and a mode, a seeded draw of success,
//! latency, token usage and cost. Nothing here is measured; everything it produces is marked
//! synthetic. The same seed, workgroup, task, attempt and mode always give the same outcome
//! (ChaCha8 seeded from blake3 of those inputs), independent of the order tasks run in; the
//! prompt's size scales the usage but is not drawn on, so a change to how prompts are written
//! changes what a turn costs, never whether it succeeds.
//!
//! The shape of the model, per mode: `local` is cheap and quick (the coordinator's own context
//! is already warm); `resume` and the inherit modes read most of the prompt from cache; a fresh
//! capsule pays for its whole prompt; a team runs three workers. Failures are rare on a first
//! attempt and rarer after; now and then a successful writer also writes a file it does not own,
//! as real agents do, which the coordinator's post-turn diff check must catch. Prices are per million tokens (input 3, cache write 3.75, cache read
//! 0.30, output 15 USD), in micro-USD.

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};

use super::provider::Capabilities;
use crate::ce::router::Mode;
use crate::telemetry::events::Counters;

/// One simulated turn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Turn {
    /// Whether the worker succeeded.
    pub succeeded: bool,
    /// Simulated wall time, milliseconds.
    pub latency_ms: u64,
    /// Usage of the turn (cost in micro-USD).
    pub usage: Counters,
    /// What the worker says.
    pub summary: String,
    /// A writing worker also writes a file it does not own (the post-turn check must catch it).
    pub stray: bool,
}

/// Failure chance of a first attempt, per mille.
pub const FIRST_FAILURE_PER_MILLE: u32 = 30;
/// Failure chance of a later attempt, per mille.
pub const RETRY_FAILURE_PER_MILLE: u32 = 10;
/// Chance that a successful turn also writes outside what the worker owns, per mille.
pub const STRAY_PER_MILLE: u32 = 15;

fn uniform(rng: &mut ChaCha8Rng, lo: u64, hi: u64) -> u64 {
    lo + rng.next_u64() % (hi - lo + 1)
}

/// What the simulated provider can do: every mode, follow-ups and interrupts (it fakes
/// nothing: each is a draw from the model).
pub const CAPABILITIES: Capabilities =
    Capabilities { local: true, resume: true, fork: true, recent: true, team: true, followup: true, interrupt: true };

/// The seeded model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Model {
    /// The seed recorded in `workgroup.planned`.
    pub seed: u64,
}

impl Model {
    /// The turn of `task`'s `attempt` in `mode` with a prompt of `prompt_tokens`.
    pub fn turn(&self, workgroup: &str, task: &str, attempt: u32, mode: Mode, prompt_tokens: u64) -> Turn {
        let mut h = blake3::Hasher::new_derive_key("strata sim provider v2");
        h.update(&self.seed.to_le_bytes());
        for part in [workgroup, task, mode.as_str()] {
            h.update(&(part.len() as u64).to_le_bytes());
            h.update(part.as_bytes());
        }
        h.update(&attempt.to_le_bytes());
        let mut rng = ChaCha8Rng::from_seed(*h.finalize().as_bytes());
        let fail_per_mille = if attempt <= 1 { FIRST_FAILURE_PER_MILLE } else { RETRY_FAILURE_PER_MILLE };
        let succeeded = rng.next_u32() % 1000 >= fail_per_mille;
        let stray = succeeded && rng.next_u32() % 1000 < STRAY_PER_MILLE;
        let output = uniform(&mut rng, 300, 3_000);
        let (input, cache_write, cache_read, latency_ms) = match mode {
            Mode::Local => (prompt_tokens / 10, 0, 0, uniform(&mut rng, 200, 1_500)),
            Mode::Resume | Mode::InheritFull | Mode::InheritRecent => {
                (prompt_tokens / 10 + 500, prompt_tokens / 10, prompt_tokens * 8 / 10, uniform(&mut rng, 3_000, 25_000))
            }
            Mode::FreshCapsule => (prompt_tokens + 1_500, prompt_tokens, 0, uniform(&mut rng, 5_000, 40_000)),
            Mode::CoordinatedTeam => {
                (3 * prompt_tokens + 4_000, prompt_tokens, prompt_tokens, uniform(&mut rng, 8_000, 60_000))
            }
        };
        let output = if mode == Mode::CoordinatedTeam { 3 * output } else { output };
        // Micro-USD: tokens × price per million tokens.
        let cost =
            (input * 3_000_000 + cache_write * 3_750_000 + cache_read * 300_000 + output * 15_000_000) / 1_000_000;
        let usage = Counters {
            input_tokens: Some(input),
            cache_creation_tokens: Some(cache_write),
            cache_read_tokens: Some(cache_read),
            output_tokens: Some(output),
            cost_micros: Some(cost),
            wall_ms: Some(latency_ms),
        };
        let summary = if succeeded {
            format!("[simulated] {task}: done in {} mode", mode.as_str())
        } else {
            format!("[simulated] {task}: the model run failed (simulated error, attempt {attempt})")
        };
        Turn { succeeded, latency_ms, usage, summary, stray }
    }
}

/// Output tokens per simulated model turn: a turn of `o` output tokens took `1 + o / 600` turns.
pub const OUTPUT_TOKENS_PER_TURN: u64 = 600;

/// A simulated turn under caps: the turn as the worker ran it (cut short when a cap stopped it)
/// and, when one did, the cap reached and what had been spent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Capped {
    /// The turn: at a cap, failed, with its usage and latency cut to where it stopped.
    pub turn: Turn,
    /// Model turns it took.
    pub turns: u32,
    /// The cap reached, and the spend when it was.
    pub reached: Option<(super::caps::Reached, super::caps::Spend)>,
}

/// `turn` under `caps`: a turn whose spend would pass a cap stops where it reaches it (its
/// usage scaled down to that point, rounded up), fails, and writes nothing. The same for
/// `strata run`'s simulated provider and for the simulations.
pub fn under_caps(turn: Turn, caps: &super::caps::Caps) -> Capped {
    use super::caps::{Spend, reached};
    let turns = 1 + u32::try_from(turn.usage.output_tokens.unwrap_or(0) / OUTPUT_TOKENS_PER_TURN).unwrap_or(u32::MAX);
    let full = Spend::of(&turn.usage, turns);
    if caps.is_empty() || reached(caps, &full).is_none() {
        return Capped { turn, turns, reached: None };
    }
    let share = |limit: Option<u64>, seen: Option<u64>| match (limit, seen) {
        (Some(l), Some(v)) if v >= l && v > 0 => Some(l as f64 / v as f64),
        _ => None,
    };
    let turn_share =
        caps.turns.filter(|c| full.turns > *c).map(|c| (f64::from(c) + 1.0) / f64::from(full.turns.max(1)));
    let f = [
        share(caps.cost_micros, full.cost_micros),
        share(caps.input_tokens, full.input_tokens),
        share(caps.output_tokens, full.output_tokens),
        share(caps.wall_ms, Some(full.wall_ms)),
        turn_share,
    ]
    .into_iter()
    .flatten()
    .fold(1.0_f64, f64::min);
    let cut = |v: Option<u64>| v.map(|v| (v as f64 * f).ceil() as u64);
    let u = &turn.usage;
    let usage = Counters {
        input_tokens: cut(u.input_tokens),
        cache_creation_tokens: cut(u.cache_creation_tokens),
        cache_read_tokens: cut(u.cache_read_tokens),
        output_tokens: cut(u.output_tokens),
        cost_micros: cut(u.cost_micros),
        wall_ms: cut(u.wall_ms),
    };
    let cut_turns = (f64::from(turns) * f).ceil() as u32;
    let spend = Spend::of(&usage, cut_turns);
    let Some(r) = reached(caps, &spend) else {
        return Capped { turn, turns, reached: None };
    };
    let summary = format!("[simulated] interrupted at its cap ({})", r.describe());
    let latency_ms = usage.wall_ms.unwrap_or(turn.latency_ms);
    let turn = Turn { succeeded: false, latency_ms, usage, summary, stray: false };
    Capped { turn, turns: cut_turns, reached: Some((r, spend)) }
}

impl Model {
    /// The session id of lineage `lineage`'s attempt `attempt`: it depends only on the seed and
    /// those, so reruns and the simulation match.
    pub fn session(&self, lineage: &str, attempt: u32) -> String {
        let mut h = blake3::Hasher::new_derive_key("strata sim session v1");
        h.update(&self.seed.to_le_bytes());
        h.update(lineage.as_bytes());
        h.update(&attempt.to_le_bytes());
        let hex = h.finalize().to_hex();
        format!("sim-{}", &hex[..24])
    }
}

/// The files a successful simulated turn of `task` changes, relative to the worker's directory:
/// every file it owns, `<task>.md` in every directory it owns (`is_dir` says which owned paths
/// are directories), and for a stray turn [`stray_file`], which nobody owns.
pub fn changed_files(task: &str, owns: &[String], is_dir: impl Fn(&str) -> bool, stray: bool) -> Vec<String> {
    let mut out: Vec<String> = owns
        .iter()
        .map(|owned| {
            let rel = owned.trim_end_matches('/');
            if owned.ends_with('/') || is_dir(rel) { format!("{rel}/{task}.md") } else { rel.to_owned() }
        })
        .collect();
    if stray {
        out.push(stray_file(task));
    }
    out
}

/// The file a stray simulated turn of `task` writes at the top of the worker's directory.
pub fn stray_file(task: &str) -> String {
    format!("{task}.stray.md")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_inputs_give_the_same_turn_and_the_seed_matters() {
        let m = Model { seed: 7 };
        let a = m.turn("wg", "t1", 1, Mode::FreshCapsule, 10_000);
        assert_eq!(a, m.turn("wg", "t1", 1, Mode::FreshCapsule, 10_000));
        let others: Vec<Turn> =
            (8..40).map(|s| Model { seed: s }.turn("wg", "t1", 1, Mode::FreshCapsule, 10_000)).collect();
        assert!(others.iter().any(|t| t.usage != a.usage));
    }

    #[test]
    fn reuse_is_cheaper_than_a_fresh_capsule_on_average() {
        let m = Model { seed: 1 };
        let cost = |mode| -> u64 {
            (0..200).map(|i| m.turn("wg", &format!("t{i}"), 1, mode, 20_000).usage.cost_micros.unwrap_or(0)).sum()
        };
        assert!(cost(Mode::Resume) < cost(Mode::FreshCapsule));
        assert!(cost(Mode::Local) < cost(Mode::Resume));
        assert!(cost(Mode::FreshCapsule) < cost(Mode::CoordinatedTeam));
    }

    #[test]
    fn a_turn_over_a_cap_stops_at_it_and_one_under_runs_whole() {
        use crate::workgroup::caps::{Caps, Measure};
        let m = Model { seed: 5 };
        let t = m.turn("wg", "t1", 2, Mode::FreshCapsule, 10_000);
        let whole = under_caps(t.clone(), &Caps { output_tokens: Some(1_000_000), ..Caps::default() });
        assert_eq!((whole.turn.clone(), whole.reached), (t.clone(), None));
        let out = t.usage.output_tokens.expect("known");
        let c = under_caps(t.clone(), &Caps { output_tokens: Some(out / 2), ..Caps::default() });
        let (r, spend) = c.reached.expect("capped");
        assert_eq!((r.measure, r.limit), (Measure::OutputTokens, out / 2));
        assert!(!c.turn.succeeded && spend.output_tokens >= Some(out / 2) && spend.output_tokens < Some(out));
        let one = under_caps(t, &Caps { turns: Some(1), ..Caps::default() });
        if let Some((r, _)) = one.reached {
            assert_eq!((r.measure, r.observed), (Measure::Turns, 2));
        } else {
            assert_eq!(one.turns, 1, "a one-turn draw is under a cap of one turn");
        }
    }

    #[test]
    fn failures_happen_at_about_the_stated_rate() {
        let m = Model { seed: 3 };
        let failed =
            (0..10_000).filter(|i| !m.turn("wg", &format!("t{i}"), 1, Mode::FreshCapsule, 1_000).succeeded).count();
        // 3% of 10,000 is 300; the binomial standard deviation is about 17.
        assert!((200..400).contains(&failed), "{failed}");
    }
}
