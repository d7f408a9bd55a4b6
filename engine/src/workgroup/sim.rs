//! The simulated provider's model: for a task, an attempt and a mode, a seeded draw of success,
//! latency, token usage and cost. Nothing here is measured; everything it produces is marked
//! synthetic. The same seed, task, attempt, mode and prompt size always give the same outcome
//! (ChaCha8 seeded from blake3 of those inputs), independent of the order tasks run in.
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
        let mut h = blake3::Hasher::new_derive_key("strata sim provider v1");
        h.update(&self.seed.to_le_bytes());
        for part in [workgroup, task, mode.as_str()] {
            h.update(&(part.len() as u64).to_le_bytes());
            h.update(part.as_bytes());
        }
        h.update(&attempt.to_le_bytes());
        h.update(&prompt_tokens.to_le_bytes());
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
    fn failures_happen_at_about_the_stated_rate() {
        let m = Model { seed: 3 };
        let failed =
            (0..10_000).filter(|i| !m.turn("wg", &format!("t{i}"), 1, Mode::FreshCapsule, 1_000).succeeded).count();
        // 3% of 10,000 is 300; the binomial standard deviation is about 17.
        assert!((200..400).contains(&failed), "{failed}");
    }
}
