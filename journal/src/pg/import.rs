//! Importing a checked export as a new PostgreSQL journal, all at once or not at all.
//!
//! The journal is built through the normal write path (so sequences, chain and hashes come out
//! exactly as exported) in a temporary schema nobody opens, and is then put in place by one
//! `ALTER SCHEMA … RENAME` in one transaction: readers see no journal, or the whole one. An
//! import holds a session advisory lock named after the target schema for its whole run, so one
//! import at a time goes to a target, and every temporary schema of that target found while
//! holding it belongs to an import that died; the next import drops those. A failed import drops
//! its own temporary schema.

use super::conn::{self, cause};
use super::error::PgError;
use super::{PgOptions, PgStore};
use crate::error::JournalError;
use crate::export::{CheckedExport, ImportError, load};
use crate::journal::{Journal, decode_head};
use crate::store::{META_HEAD, Store as _};

/// Prefix of the temporary schemas of imports into `schema`: distinct per target (a hash of its
/// name, so it fits PostgreSQL's 63-byte names), followed by the importing process's id.
fn temp_prefix(schema: &str) -> String {
    let h = blake3::hash(schema.as_bytes()).to_hex();
    format!("strata_importing_{}_", &h[..12])
}

/// Imports `checked` as a new journal in the schema `options` names, which must not exist yet.
pub fn import_new_postgres(checked: &CheckedExport<'_>, options: &PgOptions) -> Result<(), ImportError> {
    conn::check_schema(&options.schema).map_err(JournalError::from)?;
    let target = conn::resolve(options).map_err(JournalError::from)?;
    let label = target.label.clone();
    let err = |during: &'static str| {
        let label = label.clone();
        move |e: postgres::Error| -> ImportError {
            JournalError::from(PgError::Statement { target: label, during, cause: cause(&e) }).into()
        }
    };
    let mut admin = conn::connect(&target, options).map_err(JournalError::from)?;
    let locked: bool = admin
        .query_one("SELECT pg_try_advisory_lock(hashtext('strata.import.' || $1))", &[&options.schema])
        .map_err(err("the import lock"))?
        .get(0);
    if !locked {
        return Err(JournalError::Locked { path: label.clone().into(), holder: "another import".to_owned() }.into());
    }
    let prefix = temp_prefix(&options.schema);
    let leftovers: Vec<String> = admin
        .query("SELECT nspname::text FROM pg_namespace WHERE starts_with(nspname, $1) ORDER BY 1", &[&prefix])
        .map_err(err("listing leftovers of earlier imports"))?
        .iter()
        .map(|r| r.get(0))
        .filter(|n: &String| n.strip_prefix(&prefix).is_some_and(|pid| pid.bytes().all(|b| b.is_ascii_digit())))
        .collect();
    for name in leftovers {
        // A plain identifier: the prefix is checked-safe and the rest is digits.
        admin.batch_execute(&format!("DROP SCHEMA {name} CASCADE")).map_err(err("dropping an earlier import"))?;
    }
    refuse_existing(&mut admin, options, &label)?;
    let temp = format!("{prefix}{}", std::process::id());
    let temp_options = options.clone().with_schema(&temp).map_err(JournalError::from)?;
    let built = build(checked, &temp_options).and_then(|()| {
        let mut tx = admin.transaction().map_err(err("placing the imported journal"))?;
        tx.batch_execute(&format!("ALTER SCHEMA {temp} RENAME TO {}", options.schema)).map_err(|e| {
            if e.code() == Some(&postgres::error::SqlState::DUPLICATE_SCHEMA) {
                ImportError::from(JournalError::from(PgError::ImportTargetExists {
                    target: label.clone(),
                    schema: options.schema.clone(),
                }))
            } else {
                err("placing the imported journal")(e)
            }
        })?;
        tx.commit().map_err(err("placing the imported journal"))
    });
    if built.is_err() {
        let _ = admin.batch_execute(&format!("DROP SCHEMA IF EXISTS {temp} CASCADE"));
    }
    built
}

/// Refuses a target schema that already exists: a journal there is [`ImportError::TargetNotEmpty`],
/// anything else is not strata's to replace.
fn refuse_existing(admin: &mut postgres::Client, options: &PgOptions, label: &str) -> Result<(), ImportError> {
    let exists: bool = admin
        .query_one("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", &[&options.schema])
        .map_err(|e| {
            JournalError::from(PgError::Statement { target: label.to_owned(), during: "an import", cause: cause(&e) })
        })?
        .get(0);
    if !exists {
        return Ok(());
    }
    if let Ok(store) = PgStore::connect(options) {
        let events = store.meta(META_HEAD)?.and_then(|h| decode_head(&h)).map_or(0, |(seq, _)| seq);
        if events > 0 {
            return Err(ImportError::TargetNotEmpty { events });
        }
    }
    Err(JournalError::from(PgError::ImportTargetExists { target: label.to_owned(), schema: options.schema.clone() })
        .into())
}

fn build(checked: &CheckedExport<'_>, options: &PgOptions) -> Result<(), ImportError> {
    let journal = Journal::create_postgres(options, &checked.summary().origin)?;
    let loaded = load(&journal, checked);
    let closed = journal.close_blocking();
    drop(journal);
    loaded?;
    Ok(closed?)
}
