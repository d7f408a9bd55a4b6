//! strata's integration and end-to-end tests, linked as one test binary: each module was once a
//! test binary of its own, and every one of them linked the whole workspace again. One binary
//! links it once. Run one module with a filter: `cargo test -p strata-tests --test it crash::`.

// The PostgreSQL helpers, shared by `journal_conformance`, `journal_pg_faults` and `journal_pg_runs`.
mod pg;

mod assembly_memo;
mod caps;
mod caps_real;
mod ce_capsule;
mod ce_compat;
mod ce_dispatch;
mod ce_journal;
mod ce_ownership;
mod ce_props;
mod ce_records;
mod ce_skill;
mod ce_wire;
mod claude_stream;
mod cli;
mod codex_stream;
mod context;
mod context_cli;
mod context_props;
mod conventions;
mod crash;
mod discover;
mod efficiency;
mod git_inproc;
mod graph_snapshot;
mod guard;
mod inherit;
mod inputs;
mod journal;
mod journal_conformance;
mod journal_pg_faults;
mod journal_pg_runs;
mod kb_fixture;
mod kb_graph;
mod kb_intake;
mod kb_modules;
mod kb_props;
mod knowledge;
mod mcp;
mod on_demand;
mod promotion_envelope;
mod promotion_gates;
mod promotion_stages;
mod promotion_stats;
mod props;
mod providers_real;
mod real_cli;
mod rollout;
mod run_real;
mod runner;
mod schemas;
mod simulation;
mod snapshots;
mod tamper;
mod telemetry;
mod tidy;
mod workgroup;
