//! Errors of the PostgreSQL backend. Each names the server (never its password), the rule broken
//! and the fix; codes are `STRATA-E2301..E2399` and `STRATA-E2410..E2449`, listed in `docs/errors.md`.

/// A PostgreSQL backend failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PgError {
    /// The server could not be reached or refused the login.
    #[error(
        "[STRATA-E2301] cannot connect to PostgreSQL at {target}: {cause}; check that the server runs and that the URL, user and password (PGPASSWORD or ~/.pgpass) are right"
    )]
    Connect {
        /// `host:port/database` (no password).
        target: String,
        /// The client library's message.
        cause: String,
    },
    /// A statement failed or the connection was lost while it ran.
    #[error(
        "[STRATA-E2302] PostgreSQL at {target} failed during {during}: {cause}; an append in flight may or may not have committed: retry it with the same event ids (idempotency returns the original positions)"
    )]
    Statement {
        /// `host:port/database#schema`.
        target: String,
        /// What strata was doing.
        during: &'static str,
        /// The server's or the client's message.
        cause: String,
    },
    /// The stored schema is newer than this binary.
    #[error(
        "[STRATA-E2303] the strata schema in {target} is at version {found}, newer than this strata knows ({known}); upgrade strata on this machine before using that journal"
    )]
    SchemaNewer {
        /// `host:port/database#schema`.
        target: String,
        /// Stored version.
        found: i32,
        /// Newest version this binary knows.
        known: i32,
    },
    /// The stored schema is older than this binary needs.
    #[error(
        "[STRATA-E2304] the strata schema in {target} is at version {found}, older than this strata needs ({known}); run `strata init --backend postgres --url …` once to upgrade it"
    )]
    SchemaOlder {
        /// `host:port/database#schema`.
        target: String,
        /// Stored version.
        found: i32,
        /// Version this binary needs.
        known: i32,
    },
    /// A URL written to a config file carries a password.
    #[error(
        "[STRATA-E2305] {what} carries a password; keep passwords out of config files: set PGPASSWORD, or put it in ~/.pgpass (or the file PGPASSFILE names, mode 0600)"
    )]
    PasswordInUrl {
        /// Where the URL came from.
        what: String,
    },
    /// The URL does not parse.
    #[error(
        "[STRATA-E2306] PostgreSQL URL {url:?} is not valid: {detail}; write it as postgresql://user@host:port/database"
    )]
    BadUrl {
        /// The URL as given.
        url: String,
        /// Why.
        detail: String,
    },
    /// The ordering lock was not granted within `lock_timeout`.
    #[error(
        "[STRATA-E2307] the journal's ordering lock in {target} was not granted within {ms} ms (lock_timeout): another client holds it; nothing was appended, retry the append"
    )]
    LockTimeout {
        /// `host:port/database#schema`.
        target: String,
        /// The lock_timeout in force.
        ms: u64,
    },
    /// A password file others can read.
    #[error("[STRATA-E2308] password file {path} can be read by others (mode {mode:o}); `chmod 600` it")]
    PassfileMode {
        /// The file.
        path: String,
        /// Its permission bits.
        mode: u32,
    },
    /// A schema name outside the allowed alphabet.
    #[error(
        "[STRATA-E2309] PostgreSQL schema name {0:?} must be 1 to 63 lowercase ASCII letters, digits or '_', starting with a letter"
    )]
    BadSchemaName(String),
    /// The connection asks for TLS, which this client does not have.
    #[error(
        "[STRATA-E2410] PostgreSQL URL {url:?} asks for sslmode={mode} ({given_by}), but strata connects without TLS (its PostgreSQL client has none); nothing was sent: reach the server over a trusted network or a tunnel (ssh -L, stunnel, a VPN) and set sslmode=disable, or leave sslmode out"
    )]
    TlsUnavailable {
        /// The URL as given.
        url: String,
        /// The sslmode asked for.
        mode: String,
        /// Where it was asked for (the URL or PGSSLMODE).
        given_by: String,
    },
    /// An import's target schema already exists.
    #[error(
        "[STRATA-E2310] schema {schema} already exists in {target}; an import creates the schema of its journal: name a schema that does not exist yet (--schema), or drop that one first"
    )]
    ImportTargetExists {
        /// `host:port/database#schema`.
        target: String,
        /// The schema.
        schema: String,
    },
}
