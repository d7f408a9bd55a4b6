//! Connecting to PostgreSQL: the URL (never with a password), where the password comes from
//! (`PGPASSWORD`, else the `.pgpass` file libpq would read), the `PG*` defaults for what the URL
//! leaves out, and the session settings that bound how long one stuck client can hold the
//! journal's ordering lock.
//!
//! The journal reads no environment: the caller (the binary) hands over what libpq would take
//! from it as a [`PgEnv`].

use std::str::FromStr as _;
use std::time::Duration;

use super::error::PgError;

/// Longest accepted URL.
pub const URL_BYTES_MAX: usize = 2048;
/// Largest `.pgpass` read.
pub const PASSFILE_BYTES_MAX: u64 = 64 * 1024;

/// How to reach the journal's database, and the timeouts of every session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PgOptions {
    /// `postgresql://user@host:port/database` without a password.
    pub url: String,
    /// PostgreSQL schema holding the journal's tables (several journals can share a database).
    pub schema: String,
    /// `lock_timeout`: longest wait for the ordering lock (or any row lock) before an append
    /// fails with STRATA-E2307.
    pub lock_timeout: Duration,
    /// `statement_timeout`: longest single statement.
    pub statement_timeout: Duration,
    /// `idle_in_transaction_session_timeout`: the server ends a session that holds a transaction
    /// open without sending anything for this long (a client that stopped mid-commit).
    pub idle_in_transaction_timeout: Duration,
    /// TCP keepalive idle time before probes start.
    pub keepalive_idle: Duration,
    /// Between keepalive probes.
    pub keepalive_interval: Duration,
    /// Probes before the connection is declared dead.
    pub keepalive_retries: u32,
    /// `TCP_USER_TIMEOUT`: longest time sent data may stay unacknowledged.
    pub tcp_user_timeout: Duration,
    /// Longest connection attempt.
    pub connect_timeout: Duration,
    /// `application_name` of the sessions (shows in `pg_stat_activity`).
    pub application_name: String,
    /// The `PG*` variables and password file, as the caller read them.
    pub env: PgEnv,
}

/// What libpq would take from the environment, read by the caller.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct PgEnv {
    /// `PGHOST`.
    pub host: Option<String>,
    /// `PGPORT`.
    pub port: Option<String>,
    /// `PGUSER`, else the login name (`USER`).
    pub user: Option<String>,
    /// `PGDATABASE`.
    pub database: Option<String>,
    /// `PGPASSWORD`.
    pub password: Option<String>,
    /// `PGPASSFILE`, else `$HOME/.pgpass`.
    pub passfile: Option<std::path::PathBuf>,
    /// `PGSSLMODE`: only checked, since strata connects without TLS ([`refuse_tls`]).
    pub sslmode: Option<String>,
}

impl std::fmt::Debug for PgEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgEnv")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("database", &self.database)
            .field("password", &self.password.as_ref().map(|_| "<set>"))
            .field("passfile", &self.passfile)
            .field("sslmode", &self.sslmode)
            .finish()
    }
}

impl PgEnv {
    /// Reads the variables through `var` (the caller's view of its environment; empty values
    /// count as unset).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> PgEnv {
        let get = |k: &str| var(k).filter(|v| !v.is_empty());
        PgEnv {
            host: get("PGHOST"),
            port: get("PGPORT"),
            user: get("PGUSER").or_else(|| get("USER")),
            database: get("PGDATABASE"),
            password: get("PGPASSWORD"),
            passfile: get("PGPASSFILE")
                .map(std::path::PathBuf::from)
                .or_else(|| get("HOME").map(|h| std::path::Path::new(&h).join(".pgpass"))),
            sslmode: get("PGSSLMODE"),
        }
    }
}

/// Default PostgreSQL schema of a journal.
pub const SCHEMA_DEFAULT: &str = "strata";

impl PgOptions {
    /// Options for `url` with the default schema and timeouts. The URL must not carry a
    /// password (`what` names where it came from, for the message).
    pub fn new(url: &str, what: &str) -> Result<PgOptions, PgError> {
        if url.len() > URL_BYTES_MAX {
            return Err(PgError::BadUrl {
                url: url.chars().take(80).collect(),
                detail: format!("it is longer than {URL_BYTES_MAX} bytes"),
            });
        }
        refuse_tls(url, sslmode_of(url), "the URL")?;
        let parsed = postgres::Config::from_str(url)
            .map_err(|e| PgError::BadUrl { url: url.to_owned(), detail: e.to_string() })?;
        if parsed.get_password().is_some() {
            return Err(PgError::PasswordInUrl { what: what.to_owned() });
        }
        Ok(PgOptions {
            url: url.to_owned(),
            schema: SCHEMA_DEFAULT.to_owned(),
            lock_timeout: Duration::from_secs(10),
            statement_timeout: Duration::from_secs(60),
            idle_in_transaction_timeout: Duration::from_secs(30),
            keepalive_idle: Duration::from_secs(10),
            keepalive_interval: Duration::from_secs(3),
            keepalive_retries: 3,
            tcp_user_timeout: Duration::from_secs(20),
            connect_timeout: Duration::from_secs(10),
            application_name: "strata".to_owned(),
            env: PgEnv::default(),
        })
    }

    /// The same options with another schema (checked).
    pub fn with_schema(mut self, schema: &str) -> Result<PgOptions, PgError> {
        check_schema(schema)?;
        self.schema = schema.to_owned();
        Ok(self)
    }
}

/// A schema name is an SQL identifier used unquoted: `[a-z][a-z0-9_]{0,62}`.
pub fn check_schema(schema: &str) -> Result<(), PgError> {
    let ok = !schema.is_empty()
        && schema.len() <= 63
        && schema.as_bytes()[0].is_ascii_lowercase()
        && schema.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if ok { Ok(()) } else { Err(PgError::BadSchemaName(schema.chars().take(80).collect())) }
}

/// A resolved connection: the client configuration (with the password, if one was found) and
/// a label for messages (without it).
#[derive(Clone)]
pub(crate) struct Target {
    pub config: postgres::Config,
    pub label: String,
}

/// Fills what the URL leaves out from `PGHOST`, `PGPORT`, `PGUSER`, `PGDATABASE` (then libpq's
/// own defaults), and the password from `PGPASSWORD` or the password file.
pub(crate) fn resolve(options: &PgOptions) -> Result<Target, PgError> {
    let env = &options.env;
    refuse_tls(&options.url, sslmode_of(&options.url), "the URL")?;
    if sslmode_of(&options.url).is_none() {
        refuse_tls(&options.url, env.sslmode.as_deref(), "PGSSLMODE")?;
    }
    let mut c = postgres::Config::from_str(&options.url)
        .map_err(|e| PgError::BadUrl { url: options.url.clone(), detail: e.to_string() })?;
    if c.get_hosts().is_empty() {
        let host = env.host.clone().unwrap_or_else(|| "localhost".to_owned());
        if host.starts_with('/') {
            c.host_path(&host);
        } else {
            c.host(&host);
        }
    }
    if c.get_ports().is_empty()
        && let Some(p) = &env.port
    {
        let port = p.parse::<u16>().map_err(|_| PgError::BadUrl {
            url: options.url.clone(),
            detail: format!("PGPORT is {p:?}, not a port"),
        })?;
        c.port(port);
    }
    if c.get_user().is_none() {
        let user = env.user.clone().unwrap_or_else(|| "postgres".to_owned());
        c.user(&user);
    }
    if c.get_dbname().is_none() {
        let db = env.database.clone().or_else(|| c.get_user().map(str::to_owned)).unwrap_or_default();
        c.dbname(&db);
    }
    let host = match c.get_hosts().first() {
        Some(postgres::config::Host::Tcp(h)) => h.clone(),
        Some(postgres::config::Host::Unix(p)) => p.display().to_string(),
        None => "localhost".to_owned(),
    };
    let port = c.get_ports().first().copied().unwrap_or(5432);
    let user = c.get_user().unwrap_or_default().to_owned();
    let db = c.get_dbname().unwrap_or_default().to_owned();
    if c.get_password().is_none() {
        if let Some(pw) = &env.password {
            c.password(pw);
        } else if let Some(path) = &env.passfile
            && let Some(pw) = passfile_password(path, &host, port, &db, &user)?
        {
            c.password(pw);
        }
    }
    c.connect_timeout(options.connect_timeout)
        .keepalives(true)
        .keepalives_idle(options.keepalive_idle)
        .keepalives_interval(options.keepalive_interval)
        .keepalives_retries(options.keepalive_retries)
        .tcp_user_timeout(options.tcp_user_timeout)
        .application_name(&options.application_name);
    Ok(Target { config: c, label: format!("postgresql://{user}@{host}:{port}/{db}#{}", options.schema) })
}

/// The `sslmode` a URL asks for (`postgresql://…?sslmode=…`, or `sslmode=…` in a key=value
/// connection string), as written.
fn sslmode_of(url: &str) -> Option<&str> {
    let at = url.find("sslmode=")?;
    let rest = &url[at + "sslmode=".len()..];
    Some(rest.split(['&', ' ', '#']).next().unwrap_or(rest))
}

/// strata's PostgreSQL client has no TLS: a connection that asks for it (`sslmode` `require`,
/// `verify-ca` or `verify-full`, from the URL or `PGSSLMODE`, named by `source`) is refused before
/// anything is sent, never made in plain text. `disable` and `prefer` (libpq's default)
/// connect without TLS.
fn refuse_tls(url: &str, mode: Option<&str>, source: &str) -> Result<(), PgError> {
    match mode {
        Some(m @ ("require" | "verify-ca" | "verify-full")) => {
            Err(PgError::TlsUnavailable { url: url.to_owned(), mode: m.to_owned(), given_by: source.to_owned() })
        }
        _ => Ok(()),
    }
}

/// The password `.pgpass` (or `PGPASSFILE`) gives for this connection, the way libpq matches it:
/// `host:port:database:user:password`, `*` matching anything, `\` escaping `:` and `\`.
fn passfile_password(
    path: &std::path::Path,
    host: &str,
    port: u16,
    db: &str,
    user: &str,
) -> Result<Option<String>, PgError> {
    let Ok(meta) = std::fs::metadata(path) else { return Ok(None) };
    if !meta.is_file() || meta.len() > PASSFILE_BYTES_MAX {
        return Ok(None);
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(PgError::PassfileMode { path: path.display().to_string(), mode });
        }
    }
    let Ok(text) = std::fs::read_to_string(path) else { return Ok(None) };
    let port = port.to_string();
    let want = [host, port.as_str(), db, user];
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let fields = split_passfile_line(line);
        if fields.len() != 5 {
            continue;
        }
        if fields[..4].iter().zip(want).all(|(f, w)| f == "*" || f == w) {
            return Ok(Some(fields[4].clone()));
        }
    }
    Ok(None)
}

fn split_passfile_line(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(ch) = chars.next() {
        match ch {
            '\\' => {
                if let Some(n) = chars.next()
                    && let Some(last) = fields.last_mut()
                {
                    last.push(n);
                }
            }
            ':' if fields.len() < 5 => fields.push(String::new()),
            c => {
                if let Some(last) = fields.last_mut() {
                    last.push(c);
                }
            }
        }
    }
    fields
}

/// Opens one session with the journal's timeouts set.
pub(crate) fn connect(target: &Target, options: &PgOptions) -> Result<postgres::Client, PgError> {
    let mut client = target
        .config
        .connect(postgres::NoTls)
        .map_err(|e| PgError::Connect { target: target.label.clone(), cause: cause(&e) })?;
    let settings = format!(
        "SET lock_timeout = {}; SET statement_timeout = {}; SET idle_in_transaction_session_timeout = {}",
        options.lock_timeout.as_millis(),
        options.statement_timeout.as_millis(),
        options.idle_in_transaction_timeout.as_millis()
    );
    client.batch_execute(&settings).map_err(|e| PgError::Statement {
        target: target.label.clone(),
        during: "session setup",
        cause: cause(&e),
    })?;
    Ok(client)
}

/// The most useful message of a client error: the server's own text when there is one.
pub(crate) fn cause(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} (SQLSTATE {})", db.message(), db.code().code()),
        None => {
            let mut s = e.to_string();
            let mut src = std::error::Error::source(e);
            while let Some(inner) = src {
                s.push_str(": ");
                s.push_str(&inner.to_string());
                src = inner.source();
            }
            s
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_with_a_password_is_refused() {
        let e = PgOptions::new("postgresql://u:secret@h/db", "journal.url").unwrap_err();
        assert!(matches!(e, PgError::PasswordInUrl { .. }));
        assert!(!e.to_string().contains("secret"));
        assert!(PgOptions::new("postgresql://u@h:5432/db", "x").is_ok());
        assert!(matches!(PgOptions::new("nonsense://", "x"), Err(PgError::BadUrl { .. })));
    }

    #[test]
    fn a_connection_asking_for_tls_is_refused_before_anything_is_sent() {
        for mode in ["require", "verify-ca", "verify-full"] {
            let url = format!("postgresql://u@h:5432/db?application_name=x&sslmode={mode}");
            let e = PgOptions::new(&url, "x").unwrap_err();
            assert!(
                e.to_string().starts_with(&format!("[STRATA-E2410] PostgreSQL URL {url:?} asks for sslmode={mode}")),
                "{e}"
            );
            let kv = format!("host=h user=u sslmode={mode} dbname=db");
            assert!(matches!(PgOptions::new(&kv, "x"), Err(PgError::TlsUnavailable { .. })), "{kv}");
        }
        for mode in ["disable", "prefer"] {
            assert!(PgOptions::new(&format!("postgresql://u@h/db?sslmode={mode}"), "x").is_ok(), "{mode}");
        }
        // PGSSLMODE counts when the URL names none.
        let mut o = PgOptions::new("postgresql://u@h/db", "x").unwrap();
        o.env = PgEnv::from_vars(|k| (k == "PGSSLMODE").then(|| "require".to_owned()));
        let e = resolve(&o).err().expect("refused");
        assert!(matches!(&e, PgError::TlsUnavailable { given_by, .. } if given_by == "PGSSLMODE"), "{e}");
        let mut o = PgOptions::new("postgresql://u@h/db?sslmode=disable", "x").unwrap();
        o.env = PgEnv::from_vars(|k| (k == "PGSSLMODE").then(|| "require".to_owned()));
        assert!(resolve(&o).is_ok(), "the URL's own sslmode wins, as with libpq");
    }

    #[test]
    fn schema_names_are_plain_identifiers() {
        assert!(check_schema("strata").is_ok());
        assert!(check_schema("t_01").is_ok());
        for bad in ["", "1a", "A", "a-b", "a;drop", &"a".repeat(64)] {
            assert!(check_schema(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_password_comes_from_a_private_passfile_never_a_readable_one() {
        use std::os::unix::fs::PermissionsExt as _;
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("pgpass");
        std::fs::write(&path, "# comment\nother:*:*:*:no\n127.0.0.1:5433:db:u:s3cret\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let pw = passfile_password(&path, "127.0.0.1", 5433, "db", "u").unwrap();
        assert_eq!(pw.as_deref(), Some("s3cret"));
        assert_eq!(passfile_password(&path, "127.0.0.1", 5432, "db", "u").unwrap(), None);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = passfile_password(&path, "127.0.0.1", 5433, "db", "u").unwrap_err();
        assert!(e.to_string().starts_with("[STRATA-E2308]"), "{e}");
        let env = PgEnv { password: Some("x".into()), ..PgEnv::default() };
        let shown = format!("{env:?}");
        assert!(shown.contains("<set>") && !shown.contains("\"x\""), "{shown}");
    }

    #[test]
    fn passfile_lines_split_like_libpq() {
        assert_eq!(split_passfile_line(r"h:5432:db:u:p\:w:x"), ["h", "5432", "db", "u", "p:w:x"]);
        assert_eq!(split_passfile_line(r"*:*:*:u\\x:pw"), ["*", "*", "*", r"u\x", "pw"]);
    }
}
