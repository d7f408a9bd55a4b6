//! The harness as an MCP server (rmcp): seven tools over stdio, the daemon's Unix socket, or
//! streamable HTTP. Every tool has an input and an output schema and returns structured content
//! with a text copy; a refused call is an `isError` result whose text names the input, the rule
//! and the fix. Nothing here writes to stdout except the protocol itself.

use std::sync::Arc;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{Implementation, ServerCapabilities, ServerConfig};
use rmcp::{Json, ServerHandler, tool, tool_handler, tool_router};

use crate::harness::{
    ContextArgs, ContextResult, DecisionArgs, GetArgs, GetResult, Harness, LearningArgs, ListResult, Logged,
    OutcomeArgs, StartArgs, StartResult,
};

/// What the server tells clients at `initialize`.
pub const INSTRUCTIONS: &str = "strata's Knowledge API. Call list_knowledge to see the concern \
vocabulary, projects and chunks; start_session once per task; get_knowledge(concerns, project, \
session) for the chunks that apply (suggest_for: \"task text\" with no concerns suggests which \
concerns to ask for); log_learning / log_decision as you work; log_outcome at the \
end; get_context(task, item, reason) for an item your prompt lists under \"On demand\". Every call is \
recorded in the journal; pass idempotency_key when you may retry.";

/// The MCP face of one [`Harness`]. Cheap to clone (one per connection).
#[derive(Clone)]
pub struct KnowledgeServer {
    harness: Arc<Harness>,
    tool_router: ToolRouter<Self>,
}

impl KnowledgeServer {
    /// A server over `harness`.
    pub fn new(harness: Arc<Harness>) -> Self {
        KnowledgeServer { harness, tool_router: Self::tool_router() }
    }
}

#[tool_router]
impl KnowledgeServer {
    #[tool(description = "Knowledge chunks whose concerns overlap the given ones and whose \
project scope holds the project or is shared (empty). Sorted by slug; capped at max_tokens \
(default 20000). The serve is recorded with each chunk's version, hash and tokens. Give \
suggest_for (a task text) to also get the concerns suggested for it, ranked by a full-text match of \
the chunks that carry them; with suggest_for and no concerns the call only suggests and records \
nothing.")]
    async fn get_knowledge(&self, Parameters(a): Parameters<GetArgs>) -> Result<Json<GetResult>, String> {
        self.harness.get_knowledge(a).await.map(Json).map_err(|e| e.to_string())
    }

    #[tool(description = "An item your prompt offers under \"On demand\" (or an onDemand entry of \
your profile, for everything it gives), at its level or coarser: served only if your profile \
lists it on demand, never if a never glob matches it, and only within what is left of your \
prompt's token budget. Each serve and each refusal is recorded in your prompt's bill of \
materials with your reason.")]
    async fn get_context(&self, Parameters(a): Parameters<ContextArgs>) -> Result<Json<ContextResult>, String> {
        self.harness.get_context(a).await.map(Json).map_err(|e| e.to_string())
    }

    #[tool(description = "Every live chunk (slug, title, concerns, scope, token estimate, \
version), the concern vocabulary and the projects.")]
    async fn list_knowledge(&self) -> Result<Json<ListResult>, String> {
        self.harness.refresh().await.map_err(|e| e.to_string())?;
        self.harness.list_knowledge().map(Json).map_err(|e| e.to_string())
    }

    #[tool(description = "Start a session (once per task); pass its id to get_knowledge and the \
log tools so serves, learnings and the outcome are linked.")]
    async fn start_session(&self, Parameters(a): Parameters<StartArgs>) -> Result<Json<StartResult>, String> {
        self.harness.start_session(a).await.map(Json).map_err(|e| e.to_string())
    }

    #[tool(description = "Record something learned during the session.")]
    async fn log_learning(&self, Parameters(a): Parameters<LearningArgs>) -> Result<Json<Logged>, String> {
        self.harness.log_learning(a).await.map(Json).map_err(|e| e.to_string())
    }

    #[tool(description = "Record a decision and its rationale.")]
    async fn log_decision(&self, Parameters(a): Parameters<DecisionArgs>) -> Result<Json<Logged>, String> {
        self.harness.log_decision(a).await.map(Json).map_err(|e| e.to_string())
    }

    #[tool(description = "Record how the session ended: success, failure, partial or abandoned. \
Learned routing (strata knowledge insights) links it to the chunks the session was served.")]
    async fn log_outcome(&self, Parameters(a): Parameters<OutcomeArgs>) -> Result<Json<Logged>, String> {
        self.harness.log_outcome(a).await.map(Json).map_err(|e| e.to_string())
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for KnowledgeServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("strata", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }
}

/// Serves one MCP connection over `io` until the peer closes it. A peer that closes before
/// `initialize` is not an error.
pub async fn serve_connection<R, W>(server: KnowledgeServer, read: R, write: W) -> anyhow::Result<()>
where
    R: tokio::io::AsyncRead + Send + Unpin + 'static,
    W: tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    use rmcp::ServiceExt as _;
    let running = match server.serve((read, write)).await {
        Ok(r) => r,
        Err(e) => {
            let text = e.to_string();
            if text.contains("connection closed") {
                return Ok(());
            }
            return Err(anyhow::anyhow!("MCP session failed before initialize: {text}"));
        }
    };
    running.waiting().await.map_err(|e| anyhow::anyhow!("MCP session ended abnormally: {e}"))?;
    Ok(())
}
