//! Invariants every scenario checks of the journal it drives.

use strata_journal::Journal;

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
