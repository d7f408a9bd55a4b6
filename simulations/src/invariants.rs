//! Invariants every scenario checks of the journal it drives.

use strata_journal::Journal;
use strata_journal::projection::Projection;

/// Folds what `journal` holds after `cursor` into `p`, moving `cursor`; a refused event is an
/// error (the projection refuses a history its deciders could not have produced).
pub fn follow(journal: &Journal, p: &mut dyn Projection, cursor: &mut u64) -> Result<(), String> {
    let head = journal.head().seq;
    let mut at = *cursor;
    let folded = journal.scan(at + 1, head, |r, _| {
        p.apply(r)?;
        at = r.seq;
        Ok::<bool, String>(true)
    });
    *cursor = at;
    match folded {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("{} refuses its own history: {e}", p.name())),
        Err(e) => Err(e.to_string()),
    }
}

/// Sequences `from..=head` run without a gap; the head checked to.
pub fn gapless(journal: &Journal, from: u64) -> Result<u64, String> {
    let head = journal.head().seq;
    let mut expect = from.max(1);
    let scanned = journal.scan(expect, head, |r, _| {
        if r.seq != expect {
            return Ok(false);
        }
        expect += 1;
        Ok::<bool, String>(true)
    });
    match scanned {
        Ok(Ok(())) if expect == head + 1 || head < from => Ok(head),
        Ok(Ok(())) => Err(format!("sequence {expect} is missing below head {head}")),
        Ok(Err(e)) => Err(e),
        Err(e) => Err(e.to_string()),
    }
}

/// The hash chain and the Merkle tree over everything stored verify.
pub fn chain(journal: &Journal) -> Result<(), String> {
    let report = strata_journal::verify::verify_store(journal.store().as_ref(), None, Vec::new(), &[])
        .map_err(|e| e.to_string())?;
    match report.problems.first() {
        None => Ok(()),
        Some(p) => Err(format!("{p:?}")),
    }
}

/// The journal's head (sequence, hash hex) at the end of a run; the journal is closed.
pub fn finish(journal: &Journal) -> (u64, String) {
    let head = journal.head();
    let _ = journal.close_blocking();
    (head.seq, head.hash.to_hex())
}
