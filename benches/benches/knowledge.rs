//! Knowledge API benchmarks over 10,000 generated chunks and 50 concerns (10 projects), each
//! against a baseline measured in the same run.
//!
//! * `get_knowledge` in process: the projection's bitset query (concerns OR-ed, AND the shared
//!   and project scopes), sorted by slug and capped at the default 20,000 tokens; also the whole
//!   harness call, which builds the answer and appends the serve record (in-memory journal).
//! * The naive baseline the issue names: a linear scan that parses every chunk's JSON per query.
//! * MCP stdio round trip: rmcp's client calling `get_knowledge` on a real `strata mcp` child
//!   process over a real sled journal, at two answer sizes: the seed's typical serve (a budget of
//!   1,100 tokens, about five chunks) and the default cap (20,000 tokens, about a hundred chunks);
//!   and a small call (`start_session` of a started session, which appends nothing) for the
//!   protocol's own cost.
//! * The JSON floor of a full-cap answer, in process: what any MCP server and client must do with
//!   those bytes (structured content, its text copy, the JSON-RPC line, the client's parse into a
//!   JSON value), without the pipe, the journal or rmcp's typed message parse.
//!
//! Chunks carry about 160 words: the seed's chunks are 120–220 tokens. Requests: 256 fixed,
//! seeded ones; one or two concerns and one project each.
//!
//! Run: `cargo bench -p strata-benches --bench knowledge`.

use std::path::Path;
use std::process::Command;
use std::sync::LazyLock;

use criterion::{Criterion, criterion_group, criterion_main};
use rmcp::ServiceExt as _;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;
use serde::Deserialize;
use strata_adapters::harness::{GetArgs, Harness};
use strata_benches::{Samples, report, timed_per_call};
use strata_engine::knowledge::decide;
use strata_engine::knowledge::fixture::{Generated, generate};
use strata_engine::knowledge::state::Request;
use strata_engine::ports::{CountingIds, FixedClock};
use strata_journal::Journal;

static SAMPLES: LazyLock<Samples> = LazyLock::new(Samples::default);

const CHUNKS: usize = 10_000;
const CONCERNS: usize = 50;
const PROJECTS: usize = 10;
const WORDS: usize = 160;
/// The seed's typical session loads about 1,100 tokens of knowledge.
const TYPICAL_BUDGET: u32 = 1_100;

fn catalogue() -> Generated {
    generate(7, CHUNKS, CONCERNS, PROJECTS, WORDS)
}

/// 256 seeded requests: one or two concerns, one project.
fn requests(g: &Generated) -> Vec<Request> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = |n: usize| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % n as u64) as usize
    };
    (0..256)
        .map(|_| {
            let n = 1 + next(2);
            let concerns = (0..n).map(|_| g.concerns[next(g.concerns.len())].clone()).collect();
            Request { concerns, project: Some(g.projects[next(g.projects.len())].clone()), max_tokens: None }
        })
        .collect()
}

fn harness(g: &Generated) -> std::sync::Arc<Harness> {
    let journal = Journal::in_memory("strata.bench/knowledge").expect("in-memory journal");
    let mut ids = CountingIds::new(1);
    let h = Harness::new(journal.clone()).expect("harness");
    let declare = h
        .read(|k| decide::declare(k, &g.concerns, &g.projects, &mut ids, &FixedClock(0)))
        .expect("read")
        .expect("declares");
    journal.append_multi_blocking(declare.into_iter().collect()).expect("append").expect("no conflict");
    // In batches: one put is one atomic append of at most PUT_FILES_MAX chunks.
    for batch in g.files.chunks(decide::PUT_FILES_MAX) {
        let plan = h
            .read(|k| decide::put(k, batch, &mut ids, &FixedClock(0)))
            .expect("read")
            .unwrap_or_else(|p| panic!("the catalogue does not put: {p:?}"));
        journal.append_multi_blocking(plan.appends).expect("append").expect("no conflict");
    }
    assert_eq!(h.list_knowledge().expect("list").chunks.len(), CHUNKS);
    h
}

/// What the naive implementation keeps: one JSON document per chunk.
#[derive(Deserialize)]
struct NaiveChunk {
    slug: String,
    concerns: Vec<String>,
    project_scope: Vec<String>,
    content: String,
    tokens: u64,
}

fn naive_store(h: &Harness) -> Vec<String> {
    h.read(|k| {
        k.chunks()
            .map(|c| {
                serde_json::json!({"slug": c.slug, "title": c.title, "concerns": c.concerns, "project_scope": c.project_scope, "content": c.content, "tokens": c.tokens, "version": c.version, "hash": c.hash})
                    .to_string()
            })
            .collect()
    })
    .expect("read")
}

fn naive_get(store: &[String], req: &Request) -> (Vec<String>, u64) {
    let mut found: Vec<NaiveChunk> = store
        .iter()
        .map(|s| serde_json::from_str::<NaiveChunk>(s).expect("stored json"))
        .filter(|c| c.concerns.iter().any(|x| req.concerns.contains(x)))
        .filter(|c| c.project_scope.is_empty() || req.project.as_ref().is_some_and(|p| c.project_scope.contains(p)))
        .collect();
    found.sort_by(|a, b| a.slug.cmp(&b.slug));
    let mut total = 0;
    let mut out = Vec::new();
    for c in found {
        if total + c.tokens <= 20_000 {
            total += c.tokens;
            std::hint::black_box(&c.content);
            out.push(c.slug);
        }
    }
    (out, total)
}

fn bench_in_process(c: &mut Criterion) {
    let g = catalogue();
    let h = harness(&g);
    let reqs = requests(&g);
    // The engine answers exactly what the naive scan answers.
    let store = naive_store(&h);
    for r in reqs.iter().take(32) {
        let ours: Vec<String> =
            h.read(|k| k.get(r).expect("answers").chunks.iter().map(|c| c.slug.clone()).collect()).expect("read");
        assert_eq!(ours, naive_get(&store, r).0, "engine and naive scan disagree on {r:?}");
    }
    let sizes: Vec<f64> =
        reqs.iter().map(|r| h.read(|k| k.get(r).expect("answers").chunks.len()).expect("read") as f64).collect();
    let mut sorted = sizes.clone();
    sorted.sort_by(f64::total_cmp);
    SAMPLES.value("chunks-per-answer-p50", sorted[sorted.len() / 2]);

    timed_per_call(c, &SAMPLES, "knowledge-get", "strata-query", 2, |i| {
        let r = &reqs[i % reqs.len()];
        std::hint::black_box(h.read(|k| k.get(r).map(|a| a.total_tokens)).expect("read").expect("answers"));
    });
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    timed_per_call(c, &SAMPLES, "knowledge-get", "strata-get-knowledge-with-serve-record", 2, |i| {
        let r = &reqs[i % reqs.len()];
        let args = GetArgs { concerns: r.concerns.clone(), project: r.project.clone(), ..GetArgs::default() };
        std::hint::black_box(rt.block_on(h.get_knowledge(args)).expect("answers"));
    });
    timed_per_call(c, &SAMPLES, "knowledge-get", "naive-scan-parse", 2, |i| {
        std::hint::black_box(naive_get(&store, &reqs[i % reqs.len()]));
    });
    // The JSON floor of one full-cap answer: structured content, its text copy, the JSON-RPC
    // line, and the client's parse of that line.
    let answers: Vec<_> = reqs
        .iter()
        .take(32)
        .map(|r| {
            let args = GetArgs { concerns: r.concerns.clone(), project: r.project.clone(), ..GetArgs::default() };
            rt.block_on(h.get_knowledge(args)).expect("answers")
        })
        .collect();
    timed_per_call(c, &SAMPLES, "knowledge-get", "json-floor-full-cap", 2, |i| {
        let structured = serde_json::to_value(&answers[i % answers.len()]).expect("serialises");
        let line = serde_json::to_vec(&serde_json::json!({"jsonrpc": "2.0", "id": i, "result": {
            "content": [{"type": "text", "text": structured.to_string()}],
            "structuredContent": structured, "isError": false}}))
        .expect("serialises");
        std::hint::black_box(serde_json::from_slice::<serde_json::Value>(&line).expect("parses"));
    });
}

fn cli(ws: &Path, args: &[&str]) {
    let out =
        Command::new(env!("CARGO_BIN_EXE_strata-bench-cli")).arg("--dir").arg(ws).args(args).output().expect("runs");
    assert!(out.status.success(), "strata {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

fn bench_mcp(c: &mut Criterion) {
    let g = catalogue();
    let reqs = requests(&g);
    let tmp = std::env::temp_dir().join(format!("strata-bench-knowledge-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let ws = tmp.join("ws");
    std::fs::create_dir_all(&ws).expect("mkdir");
    let mut batches = Vec::new();
    // The CLI reads at most intake::FILES_MAX files per command.
    let per_put = decide::PUT_FILES_MAX.min(strata_engine::kb::intake::FILES_MAX);
    for (i, batch) in g.files.chunks(per_put).enumerate() {
        let dir = tmp.join(format!("chunks-{i}"));
        std::fs::create_dir_all(&dir).expect("mkdir");
        for f in batch {
            std::fs::write(dir.join(Path::new(&f.path).file_name().expect("file name")), &f.bytes).expect("write");
        }
        batches.push(dir);
    }
    cli(&ws, &["init", "--durability", "process"]);
    let mut declare = vec!["knowledge".to_owned(), "declare".to_owned()];
    for c in &g.concerns {
        declare.extend(["--concern".to_owned(), c.clone()]);
    }
    for p in &g.projects {
        declare.extend(["--project".to_owned(), p.clone()]);
    }
    cli(&ws, &declare.iter().map(String::as_str).collect::<Vec<_>>());
    for dir in &batches {
        cli(&ws, &["knowledge", "put", dir.to_str().expect("utf-8 path")]);
    }

    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let client = rt.block_on(async {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_strata-bench-cli"));
        cmd.arg("--dir").arg(&ws).arg("mcp");
        ().serve(TokioChildProcess::new(cmd).expect("spawn strata mcp")).await.expect("initialize")
    });
    let call = |name: &str, args: serde_json::Value| {
        let params =
            CallToolRequestParams::new(name.to_owned()).with_arguments(args.as_object().cloned().unwrap_or_default());
        let r = rt.block_on(client.call_tool(params)).expect("call");
        assert_eq!(r.is_error, Some(false), "{r:?}");
        r
    };
    call("start_session", serde_json::json!({"session": "bench"}));
    let chunks = |r: &rmcp::model::CallToolResult| {
        r.structured_content.as_ref().and_then(|v| v["chunks"].as_array()).map_or(0, Vec::len) as f64
    };
    timed_per_call(c, &SAMPLES, "knowledge-mcp", "mcp-stdio-get-knowledge-typical", 2, |i| {
        let r = &reqs[i % reqs.len()];
        let args = serde_json::json!({"concerns": r.concerns, "project": r.project, "max_tokens": TYPICAL_BUDGET});
        SAMPLES.value("typical-chunks", chunks(&call("get_knowledge", args)));
    });
    timed_per_call(c, &SAMPLES, "knowledge-mcp", "mcp-stdio-get-knowledge-full-cap", 2, |i| {
        let r = &reqs[i % reqs.len()];
        let answer = call("get_knowledge", serde_json::json!({"concerns": r.concerns, "project": r.project}));
        SAMPLES.value("full-cap-chunks", chunks(&answer));
    });
    timed_per_call(c, &SAMPLES, "knowledge-mcp", "mcp-stdio-small-call", 2, |_| {
        std::hint::black_box(call("start_session", serde_json::json!({"session": "bench"})));
    });
    rt.block_on(client.cancel()).expect("close");
    let _ = std::fs::remove_dir_all(&tmp);
}

fn summary(_: &mut Criterion) {
    let m = |n: &str| SAMPLES.median(n).unwrap_or(f64::NAN);
    println!("\n== knowledge: p50 over every timed call ({CHUNKS} chunks, {CONCERNS} concerns, {PROJECTS} projects)");
    let rows = [
        ("get_knowledge query, in process", m("strata-query-us"), "≤ 50 µs"),
        ("get_knowledge + serve record (in-memory journal)", m("strata-get-knowledge-with-serve-record-us"), "-"),
        ("naive scan parsing chunk JSON per query", m("naive-scan-parse-us"), "-"),
        ("MCP stdio get_knowledge, seed-typical answer", m("mcp-stdio-get-knowledge-typical-us"), "≤ 1000 µs"),
        ("MCP stdio get_knowledge, full 20,000-token cap", m("mcp-stdio-get-knowledge-full-cap-us"), "-"),
        ("JSON floor of a full-cap answer, in process", m("json-floor-full-cap-us"), "-"),
        ("MCP stdio round trip, small call", m("mcp-stdio-small-call-us"), "-"),
    ];
    for (label, v, target) in rows {
        println!("  {label:<52} {v:>10.1} µs  (target {target})");
    }
    println!(
        "  chunks per answer, p50: default cap {} (MCP: {}), seed-typical budget {}",
        m("chunks-per-answer-p50"),
        m("full-cap-chunks"),
        m("typical-chunks")
    );
    let speedup = m("naive-scan-parse-us") / m("strata-query-us");
    report(
        "knowledge",
        &SAMPLES,
        &[],
        &[
            ("get_knowledge query p50 (µs)", m("strata-query-us"), "µs"),
            ("get_knowledge + serve record p50 (µs)", m("strata-get-knowledge-with-serve-record-us"), "µs"),
            ("naive scan p50 (µs)", m("naive-scan-parse-us"), "µs"),
            ("naive / strata query", speedup, "x"),
            ("MCP stdio get_knowledge, seed-typical p50 (µs)", m("mcp-stdio-get-knowledge-typical-us"), "µs"),
            ("MCP stdio get_knowledge, full cap p50 (µs)", m("mcp-stdio-get-knowledge-full-cap-us"), "µs"),
            ("JSON floor, full cap p50 (µs)", m("json-floor-full-cap-us"), "µs"),
            ("MCP full cap / JSON floor", m("mcp-stdio-get-knowledge-full-cap-us") / m("json-floor-full-cap-us"), "x"),
            ("MCP stdio small call p50 (µs)", m("mcp-stdio-small-call-us"), "µs"),
            ("chunks per answer p50", m("chunks-per-answer-p50"), "chunks"),
        ],
    );
}

criterion_group!(benches, bench_in_process, bench_mcp, summary);
criterion_main!(benches);
