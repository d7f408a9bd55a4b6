//! `strata ce <operation>` as a process: exactly one JSON line out, the documented code and
//! fixed message on bad input, exit 1, no input echoed, nothing written.

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

fn ce(dir: &Path, op: Option<&str>, stdin: &[u8]) -> (i32, Vec<String>, String) {
    let mut cmd = Command::new(strata_tests::strata_bin!());
    cmd.current_dir(dir).arg("ce");
    if let Some(op) = op {
        cmd.arg(op);
    }
    let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut input = child.stdin.take().unwrap();
    // A writer thread: the child may stop reading at the cap and exit before all is written.
    let bytes = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&bytes);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines = stdout.lines().map(str::to_owned).collect();
    (out.status.code().unwrap_or(-1), lines, String::from_utf8(out.stderr).unwrap())
}

fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

/// Every input string leaf of `v` (values, not the protocol's own keys).
fn leaves(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) if s.len() >= 6 => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|x| leaves(x, out)),
        Value::Object(o) => o.values().for_each(|x| leaves(x, out)),
        _ => {}
    }
}

fn draft() -> Value {
    serde_json::from_str(include_str!("../fixtures/ce/capsule-draft.json")).unwrap()
}

fn with(mut v: Value, k: &str, x: Value) -> Value {
    v[k] = x;
    v
}

#[test]
fn bad_input_to_every_operation_gives_its_code_on_one_line_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("marker"), "x").unwrap();
    let before = listing(tmp.path());
    let oversize = {
        let mut v = b"{\"input\":\"".to_vec();
        v.extend(std::iter::repeat_n(b'a', 1 << 20));
        v.extend(b"\"}");
        v
    };
    let lineage = json!({"schema": "knowzcode.agent-lineage/v1"});
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("route", b"[1,2]".to_vec(), "INVALID_REQUEST"),
        ("route", b"{not json".to_vec(), "INVALID_REQUEST"),
        ("route", b"\xff\xfe".to_vec(), "INVALID_REQUEST"),
        ("route", oversize.clone(), "REQUEST_TOO_LARGE"),
        ("route", json!({"input": {"nesting_depth": "deep-secret-value"}}).to_string().into_bytes(), "INVALID_NESTING"),
        ("route", json!({"input": {"owned_files": ["/home/someone/secret-path"]}}).to_string().into_bytes(), "INVALID_OWNERSHIP_PATH"),
        ("route", json!({"input": {"owned_files": ["src/../../escape-attempt"]}}).to_string().into_bytes(), "INVALID_OWNERSHIP_PATH"),
        ("route", json!({"input": {"blocking": "maybe-later"}}).to_string().into_bytes(), "INVALID_FACT"),
        ("lineage", b"null".to_vec(), "INVALID_REQUEST"),
        ("lineage", oversize.clone(), "REQUEST_TOO_LARGE"),
        ("lineage", json!({"lineage": lineage, "current": {}, "now": "2026-02-31T00:00:00Z"}).to_string().into_bytes(), "INVALID_DATE_TIME"),
        ("lineage", json!({"lineage": lineage, "current": "current-as-string"}).to_string().into_bytes(), "INVALID_REQUEST"),
        ("lineage", json!({"lineage": lineage, "current": {"model": ["listed-model"]}}).to_string().into_bytes(), "INVALID_FACT"),
        ("rollout", b"\"string\"".to_vec(), "INVALID_REQUEST"),
        ("rollout", oversize.clone(), "REQUEST_TOO_LARGE"),
        ("rollout", json!({"input": {"rollout": "sometimes-maybe"}}).to_string().into_bytes(), "INVALID_ROLLOUT"),
        ("rollout", json!({"input": {"rollout": "canary"}}).to_string().into_bytes(), "ROLLOUT_RECOMMENDATION_REQUIRED"),
        ("result-policy", b"42".to_vec(), "INVALID_REQUEST"),
        ("result-policy", oversize.clone(), "REQUEST_TOO_LARGE"),
        ("result-policy", json!({"input": {"requested_mode": "keep-it-forever"}}).to_string().into_bytes(), "INVALID_RESULT_MODE"),
        ("result-policy", json!({"input": {"material": "very-material"}}).to_string().into_bytes(), "INVALID_FACT"),
        ("dispatch", b"true".to_vec(), "INVALID_REQUEST"),
        ("dispatch", oversize.clone(), "REQUEST_TOO_LARGE"),
        ("telemetry", oversize.clone(), "REQUEST_TOO_LARGE"),
        ("capsule", oversize.clone(), "REQUEST_TOO_LARGE"),
        ("vault-delta", oversize, "REQUEST_TOO_LARGE"),
        ("dispatch", json!({"routing": {"input": {"owned_files": ["C:/windows-drive"]}}, "rollout": {}}).to_string().into_bytes(), "INVALID_OWNERSHIP_PATH"),
        ("dispatch", json!({"routing": {"input": {}}, "lineage": {"lineage": lineage, "current": {}, "now": "yesterday-noon"}, "rollout": {}}).to_string().into_bytes(), "INVALID_DATE_TIME"),
        ("capsule", b"[]".to_vec(), "INVALID_REQUEST"),
        ("capsule", json!({"capsule": draft(), "max_bytes": null}).to_string().into_bytes(), "INVALID_REQUEST"),
        ("capsule", json!({"capsule": draft(), "max_bytes": "big"}).to_string().into_bytes(), "INVALID_REQUEST"),
        ("capsule", json!({"capsule": "capsule-as-text"}).to_string().into_bytes(), "CAPSULE_SCHEMA_INVALID"),
        ("capsule", json!({"capsule": with(draft(), "next_action", json!("use ghp_abcdefghijklmnopqrstuvwxyz0123456789"))}).to_string().into_bytes(), "CAPSULE_PRIVATE_CONTENT"),
        ("capsule", json!({"capsule": with(draft(), "owned_files", json!(["../outside-the-repo"]))}).to_string().into_bytes(), "CAPSULE_ARTIFACT_REF_INVALID"),
        ("capsule", json!({"capsule": draft(), "artifact_path": "knowzcode/artifacts/x.json", "artifact_roots": [".git"]}).to_string().into_bytes(), "CAPSULE_ARTIFACT_REF_UNAUTHORIZED"),
        ("telemetry", b"[]".to_vec(), "INVALID_REQUEST"),
        ("telemetry", json!({"event": "event-as-text"}).to_string().into_bytes(), "EFFICIENCY_EVENT_INVALID"),
        ("telemetry", json!({"event": {"event": "worker_usage", "observed_at": "2026-13-01T00:00:00Z", "provider": "claude"}}).to_string().into_bytes(), "EFFICIENCY_EVENT_INVALID"),
        ("telemetry", json!({"event": {"event": "worker_usage", "provider": "claude", "task_corpus_id": "/home/someone/private"}}).to_string().into_bytes(), "PRIVATE_TELEMETRY"),
        ("vault-delta", b"7".to_vec(), "INVALID_REQUEST"),
        ("vault-delta", json!({"input": {"delta": {"title": "some title"}, "severity": "extremely-urgent"}}).to_string().into_bytes(), "INVALID_SEVERITY"),
        ("vault-delta", json!({"input": {"delta": "delta-as-text"}}).to_string().into_bytes(), "INVALID_REQUEST"),
        ("no-such-op", b"{}".to_vec(), "UNSUPPORTED_OPERATION"),
        ("no-such-op", b"[]".to_vec(), "INVALID_REQUEST"),
    ];
    for (op, input, code) in cases {
        let (status, lines, stderr) = ce(tmp.path(), Some(op), &input);
        assert_eq!(lines.len(), 1, "{op}/{code}: exactly one line, got {lines:?}");
        let v: Value = serde_json::from_str(&lines[0]).unwrap();
        assert_eq!(v["ok"], false, "{op}: {v}");
        assert_eq!(v["code"], code, "{op}: {v}");
        assert_eq!(v.as_object().unwrap().len(), 3, "{op}: only ok, code, message");
        assert_eq!(status, 1, "{op}/{code}");
        assert!(stderr.is_empty(), "{op}: nothing on stderr without --explain: {stderr}");
        if let Ok(parsed) = serde_json::from_slice::<Value>(&input) {
            let mut ls = Vec::new();
            leaves(&parsed, &mut ls);
            for leaf in ls.iter().filter(|l| l.len() < 1000) {
                assert!(!lines[0].contains(leaf.as_str()), "{op}: input {leaf:?} echoed in {}", lines[0]);
            }
        }
    }
    let (status, lines, _) = ce(tmp.path(), None, b"{}");
    assert_eq!(
        (status, serde_json::from_str::<Value>(&lines[0]).unwrap()["code"].clone()),
        (1, json!("UNSUPPORTED_OPERATION"))
    );
    assert_eq!(listing(tmp.path()), before, "the stateless operations write nothing");
}

#[test]
fn a_good_request_gives_one_success_line_and_explain_names_the_rule() {
    let tmp = tempfile::tempdir().unwrap();
    let (status, lines, stderr) =
        ce(tmp.path(), Some("route"), json!({"input": {"trivial": true}, "extra": 1}).to_string().as_bytes());
    assert_eq!(status, 0);
    assert_eq!(
        lines,
        vec![
            r#"{"ok":true,"operation":"route","result":{"mode":"local","reason_codes":["LOCAL_CHEAPER"]}}"#.to_owned()
        ]
    );
    assert!(stderr.is_empty());
    let mut cmd = Command::new(strata_tests::strata_bin!());
    let mut child = cmd
        .current_dir(tmp.path())
        .args(["ce", "route", "--explain"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(br#"{"input":{"nesting_depth":-1}}"#).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("input.nesting_depth"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
