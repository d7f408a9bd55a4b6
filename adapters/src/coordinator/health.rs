//! Probing the knowledge server a real worker would start (`strata mcp --dir WORKSPACE`, the
//! same program and arguments its MCP configuration names), for the engine's
//! [`strata_engine::workgroup::health`] rule: the probe speaks MCP over the server's stdio
//! (`initialize`, `notifications/initialized`, `tools/list`) and is healthy when the tools include
//! `get_knowledge` within the deadline. A server that does not start, answers something else, or
//! hangs (a stopped daemon behind it) is unhealthy; the probe kills it either way.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long a probe waits for the server's answer.
pub const DEADLINE: Duration = Duration::from_secs(10);
/// Most bytes of one line of the server's answer the probe reads.
const LINE_BYTES_MAX: u64 = 1024 * 1024;

/// Probes `program mcp --dir workspace`: `Ok` with what it answered, `Err` with why it is not
/// healthy.
pub fn probe(program: &Path, workspace: &Path, within: Duration) -> Result<String, String> {
    let mut child = Command::new(program)
        .arg("mcp")
        .arg("--dir")
        .arg(workspace)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("`{} mcp` did not start: {e}", program.display()))?;
    let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        let _ = child.kill();
        let _ = child.wait();
        return Err("the server's stdio could not be opened".to_owned());
    };
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        let mut r = BufReader::new(stdout);
        loop {
            let mut line = Vec::new();
            match (&mut r).take(LINE_BYTES_MAX).read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    if tx.send(String::from_utf8_lossy(&line).into_owned()).is_err() {
                        return;
                    }
                }
            }
        }
    });
    let requests = [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"strata-run-probe","version":"1"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
    ];
    let sent = requests.iter().try_for_each(|r| writeln!(stdin, "{r}")).and_then(|()| stdin.flush());
    let started = Instant::now();
    let answer = match sent {
        // A server that exits at once closes its input before or while the requests are
        // written; which of the two a write sees is a race, so both read the same.
        Err(e) => Err(format!("the server exited before it answered tools/list (its input closed: {e})")),
        Ok(()) => loop {
            let left = within.saturating_sub(started.elapsed());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else { continue };
                    if v["id"] != 2 {
                        continue;
                    }
                    let tools: Vec<&str> = v["result"]["tools"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|t| t["name"].as_str())
                        .collect();
                    break if tools.contains(&"get_knowledge") {
                        Ok(format!("answered with {} tools", tools.len()))
                    } else {
                        Err(format!("its tools/list answer has no get_knowledge: {}", line.trim()))
                    };
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    break Err(format!("no answer to tools/list within {} s", within.as_secs()));
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    break Err("the server exited before it answered tools/list".to_owned());
                }
            }
        },
    };
    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
    let _ = reader.join();
    answer
}
