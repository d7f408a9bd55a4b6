//! `strata ce <operation>`: the context-efficiency wire protocol over stdin/stdout. One JSON
//! object in (at most 1 MiB, enforced while reading), exactly one JSON line out, exit 0 on
//! success and 1 on a rejection. A rejection carries a code and its fixed message, never input
//! content; `--explain` adds the field and rule on stderr (which may quote input).

use std::io::Read as _;
use std::process::ExitCode;

use serde_json::Value;
use strata_engine::ce::{self, CeError, Code, Context, REQUEST_BYTES_MAX};

/// Runs one operation on standard input.
pub fn run(operation: Option<&str>, explain: bool) -> ExitCode {
    let stdin = std::io::stdin();
    let result = respond(operation, &mut stdin.lock(), now_ns());
    let (line, ok) = match result {
        Ok(result) => (success_line(operation.unwrap_or_default(), &result), true),
        Err(e) => {
            if explain {
                errln!("{}", e.detail);
            }
            (failure_line(e.code), false)
        }
    };
    outln!("{line}");
    if ok { ExitCode::SUCCESS } else { ExitCode::from(1) }
}

/// `{"ok":true,"operation":…,"result":…}`, keys in the reference's order.
pub fn success_line(op: &str, result: &Value) -> String {
    format!(r#"{{"ok":true,"operation":{},"result":{result}}}"#, Value::from(op))
}

/// `{"ok":false,"code":…,"message":…}`, keys in the reference's order.
pub fn failure_line(code: Code) -> String {
    format!(r#"{{"ok":false,"code":"{}","message":{}}}"#, code.as_str(), Value::from(code.message()))
}

/// The whole exchange, minus the output: the operation's result or the rejection.
pub fn respond(operation: Option<&str>, input: &mut dyn std::io::Read, now_ns: i128) -> Result<Value, CeError> {
    let Some(op) = operation else {
        return Err(CeError::new(Code::UnsupportedOperation, "no operation given"));
    };
    let mut bytes = Vec::new();
    input
        .take(REQUEST_BYTES_MAX as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| CeError::new(Code::StdinUnreadable, format!("stdin: {e}")))?;
    if bytes.len() > REQUEST_BYTES_MAX {
        return Err(CeError::new(Code::RequestTooLarge, "stdin: more than 1,048,576 bytes"));
    }
    let payload: Value = serde_json::from_slice(&bytes)
        .map_err(|e| CeError::new(Code::InvalidRequest, format!("stdin: not one JSON document ({e})")))?;
    if !payload.is_object() {
        return Err(CeError::new(Code::InvalidRequest, "stdin: the request must be a JSON object"));
    }
    if !ce::OPERATIONS.contains(&op) {
        return Err(CeError::new(Code::UnsupportedOperation, "not one of the eight operations"));
    }
    let ctx = Context {
        now_ns,
        workspace: ce::paths::Workspace::default(),
        warm_lease_minutes: ce::lineage::WARM_LEASE_MINUTES_DEFAULT,
    };
    ce::run(op, &payload, &ctx)
}

fn now_ns() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i128::try_from(d.as_nanos()).unwrap_or(i128::MAX))
}
