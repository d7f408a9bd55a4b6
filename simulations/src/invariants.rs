//! Invariants every scenario checks of the journal it drives.

use strata_engine::ce::ledger::Ledger;
use strata_engine::ce::paths::overlaps;
use strata_journal::Journal;
use strata_journal::projection::{Projection, catch_up_one};

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

/// `P` folded from scratch over everything `journal` holds.
pub fn rebuilt<P: Projection + Default>(journal: &Journal) -> Result<P, String> {
    let mut p = P::default();
    catch_up_one(&mut p, journal).map_err(|e| e.to_string())?;
    Ok(p)
}

/// `incremental` equals `P` folded from scratch; `what` names it in the error.
pub fn rebuild_matches<P: Projection + Default + PartialEq>(
    journal: &Journal,
    incremental: &P,
    what: &str,
) -> Result<(), String> {
    if rebuilt::<P>(journal)? == *incremental {
        Ok(())
    } else {
        Err(format!("{what} folded from scratch differs from the incremental fold"))
    }
}

/// No two lineages on `ledger` own overlapping paths.
pub fn exclusive(ledger: &Ledger) -> Result<(), String> {
    let owners: Vec<_> = ledger.owners().iter().collect();
    for (i, (a, pa)) in owners.iter().enumerate() {
        for (b, pb) in &owners[i + 1..] {
            for x in &pa.paths {
                if let Some(y) = pb.paths.iter().find(|y| overlaps(x, y)) {
                    return Err(format!("{a} owns {x} while {b} owns {y}"));
                }
            }
        }
    }
    Ok(())
}

/// The journal's head (sequence, hash hex) at the end of a run; the journal is closed.
pub fn finish(journal: &Journal) -> (u64, String) {
    let head = journal.head();
    let _ = journal.close_blocking();
    (head.seq, head.hash.to_hex())
}
