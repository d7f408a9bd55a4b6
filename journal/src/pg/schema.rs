//! The journal's tables and their versioned migrations.
//!
//! Each migration runs once, in order, inside one transaction that first takes an advisory lock
//! named after the schema, so two `strata init` runs at once apply it once and a failed one
//! applies nothing. The applied versions are rows of `strata_schema_version`; a binary refuses a
//! database whose newest row is past the migrations it knows.
//!
//! Layout (version 1):
//! * `strata_head`: one row, the last sequence and its hash. Every append locks it
//!   (`FOR UPDATE`) before it reads anything, so appends from every process take their
//!   sequences in commit order and a reader never sees sequence n+1 before n.
//! * `strata_events`: one row per event: the exact record bytes and their blake3 hash as the
//!   journal wrote them, plus the columns the constraints need (`event_id` UNIQUE for permanent
//!   idempotency, `(stream, version)` UNIQUE) and that SQL tools can read.
//! * `strata_meta`: format marker and origin; `strata_snapshots` and `strata_index_snapshot`:
//!   derived state, outside the tamper-evident content.
//!
//! Version 2 adds `strata_checkpoints`: the signed checkpoint notes, kept where every process
//! sharing the journal finds them (a sled journal keeps them as files in `checkpoints/`), one
//! row per distinct note.

use super::conn::cause;
use super::error::PgError;

/// Newest schema version this binary knows (and needs).
pub const SCHEMA_VERSION: i32 = 2;

/// `(version, SQL)`; `{s}` stands for the schema name (checked to be a plain identifier).
const MIGRATIONS: &[(i32, &str)] = &[
    (
        1,
        "CREATE TABLE {s}.strata_meta (name text PRIMARY KEY, value bytea NOT NULL);
     CREATE TABLE {s}.strata_head (
         id smallint PRIMARY KEY CHECK (id = 1),
         last_seq bigint NOT NULL CHECK (last_seq >= 0),
         last_hash bytea NOT NULL CHECK (length(last_hash) = 32));
     INSERT INTO {s}.strata_head VALUES (1, 0, decode(repeat('00', 32), 'hex'));
     CREATE TABLE {s}.strata_events (
         seq bigint PRIMARY KEY CHECK (seq >= 1),
         event_id uuid NOT NULL UNIQUE,
         stream text NOT NULL,
         version bigint NOT NULL CHECK (version >= 1),
         event_type text NOT NULL,
         hash bytea NOT NULL,
         record bytea NOT NULL,
         UNIQUE (stream, version));
     CREATE TABLE {s}.strata_snapshots (key bytea PRIMARY KEY, value bytea NOT NULL);
     CREATE TABLE {s}.strata_index_snapshot (id smallint PRIMARY KEY CHECK (id = 1), sealed bytea NOT NULL);",
    ),
    (
        2,
        "CREATE TABLE {s}.strata_checkpoints (
         note_hash bytea PRIMARY KEY CHECK (length(note_hash) = 32),
         size bigint NOT NULL CHECK (size >= 0),
         note text NOT NULL);",
    ),
];

/// What a migration run did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Migrated {
    /// Version before (0: there was no schema).
    pub from: i32,
    /// Version after.
    pub to: i32,
}

/// Creates or upgrades the schema `schema` to [`SCHEMA_VERSION`].
pub(crate) fn migrate(client: &mut postgres::Client, schema: &str, label: &str) -> Result<Migrated, PgError> {
    let err = |during: &'static str| {
        move |e: postgres::Error| PgError::Statement { target: label.to_owned(), during, cause: cause(&e) }
    };
    let mut tx = client.transaction().map_err(err("migration"))?;
    tx.execute("SELECT pg_advisory_xact_lock(hashtext('strata.migrate.' || $1))", &[&schema])
        .map_err(err("migration lock"))?;
    tx.batch_execute(&format!(
        "CREATE SCHEMA IF NOT EXISTS {schema};
         CREATE TABLE IF NOT EXISTS {schema}.strata_schema_version (
             version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
    ))
    .map_err(err("migration bookkeeping"))?;
    let from: i32 = tx
        .query_one(&format!("SELECT coalesce(max(version), 0) FROM {schema}.strata_schema_version"), &[])
        .map_err(err("schema version"))?
        .get(0);
    if from > SCHEMA_VERSION {
        return Err(PgError::SchemaNewer { target: label.to_owned(), found: from, known: SCHEMA_VERSION });
    }
    for (version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > from) {
        tx.batch_execute(&sql.replace("{s}", schema)).map_err(err("migration"))?;
        tx.execute(&format!("INSERT INTO {schema}.strata_schema_version (version) VALUES ($1)"), &[version])
            .map_err(err("migration"))?;
    }
    tx.commit().map_err(err("migration commit"))?;
    Ok(Migrated { from, to: SCHEMA_VERSION })
}

/// The stored schema version (`None`: no strata schema there), refusing one this binary cannot
/// use.
pub(crate) fn check(client: &mut postgres::Client, schema: &str, label: &str) -> Result<Option<i32>, PgError> {
    let exists: bool = client
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&format!("{schema}.strata_schema_version")])
        .map_err(|e| PgError::Statement { target: label.to_owned(), during: "schema check", cause: cause(&e) })?
        .get(0);
    if !exists {
        return Ok(None);
    }
    let found: i32 = client
        .query_one(&format!("SELECT coalesce(max(version), 0) FROM {schema}.strata_schema_version"), &[])
        .map_err(|e| PgError::Statement { target: label.to_owned(), during: "schema check", cause: cause(&e) })?
        .get(0);
    if found > SCHEMA_VERSION {
        return Err(PgError::SchemaNewer { target: label.to_owned(), found, known: SCHEMA_VERSION });
    }
    if found < SCHEMA_VERSION {
        if found == 0 {
            return Ok(None);
        }
        return Err(PgError::SchemaOlder { target: label.to_owned(), found, known: SCHEMA_VERSION });
    }
    Ok(Some(found))
}
