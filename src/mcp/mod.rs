//! `agent-ls mcp`: agent-ls's own tools served over MCP on stdio (the official `rmcp` SDK), so
//! other agents (Claude Code, Codex, Goose) can use its reading tools, its test runners and
//! parsers, and its edit engine. An edge like `src/lsp/`: the tools, the test runs and the
//! steps are the same code the loop uses. `checkpoint` and `rollback` (`git.rs`) are git's.

mod diagnostics;
mod git;
mod run;
mod wire;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ErrorData, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ServerHandler, ServiceExt};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use agent_ls_runtime::config::Config;
use agent_ls_runtime::tests_run::RunResult;
use agent_ls_runtime::tools::{self, Limits, Snapshot};
use agent_ls_runtime::trust::sandbox::Sandbox;
use wire::{object, text_result, tool};

/// Why `agent-ls mcp` stopped serving.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// Boxed: rmcp's error is large, and this one is rare.
    #[error("the MCP session did not start: {0}")]
    Start(Box<rmcp::service::ServerInitializeError>),
    #[error("the MCP session ended with an error: {0}")]
    Ended(tokio::task::JoinError),
}

/// The tools `agent-ls mcp` serves.
const SERVED: &[&str] = &[
    "read_file",
    "outline",
    "read_symbol",
    "list_files",
    "find_files",
    "grep",
    "get_diagnostics",
    "run_tests",
];

#[derive(Clone)]
pub struct AgentLsMcp {
    root: PathBuf,
    config: Arc<Config>,
    /// The folder is trusted: a run's commit may run its git hooks.
    trusted: bool,
    /// The last whole test run, for `get_diagnostics`.
    last: Arc<Mutex<Option<RunResult>>>,
    /// Cancelled when the client closes our stdin: nothing more will be asked, so the test
    /// runs still going end now rather than hold the exit.
    closing: CancellationToken,
}

impl AgentLsMcp {
    pub fn new(
        root: PathBuf,
        (config, trusted): (Config, bool),
        closing: CancellationToken,
    ) -> Self {
        AgentLsMcp {
            root,
            config: Arc::new(config),
            trusted,
            last: Arc::new(Mutex::new(None)),
            closing,
        }
    }

    fn tools(&self) -> Vec<Tool> {
        let mut out: Vec<Tool> = tools::specs()
            .into_iter()
            .filter(|s| SERVED.contains(&s.name.as_str()))
            .map(|s| tool(&s.name, &s.description, s.parameters))
            .collect();
        if let Some(run_tests) = out.iter_mut().find(|t| t.name == "run_tests") {
            *run_tests = run_tests.clone().with_raw_output_schema(object(json!({
                "type": "object",
                "properties": {
                    "command": {"type": "string"},
                    "state": {"type": "string", "enum": ["passed", "failed", "error", "cancelled", "timed_out"]},
                    "passed": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
                    "failed": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
                    "duration_ms": {"type": "integer"},
                    "failures": {"type": "array", "items": {"type": "object", "properties": {
                        "test_id": {"type": "string"}, "message": {"type": "string"},
                        "file": {"anyOf": [{"type": "string"}, {"type": "null"}]}, "line": {"anyOf": [{"type": "integer"}, {"type": "null"}]}}}},
                    "environment": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                    "stopped": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                    "report": {"type": "string"}
                },
                "required": ["command", "state", "failures", "report"]
            })));
        }
        out.push(tool(
            "apply_edit",
            "Apply edits to workspace files through agent-ls's edit engine: SEARCH/REPLACE blocks (path line, <<<<<<< SEARCH, =======, >>>>>>> REPLACE), JSON {\"edits\": [...]}, or a unified diff. Each edit is located even when the text moved or its indentation differs; if any edit cannot be located, or a protected file (.git/, hooks, editor settings, agent-ls's configuration) is touched, nothing is written. Writes are atomic. The change is recorded as a step that `agent-ls undo` reverts. Returns the step and the diff.",
            json!({"type": "object", "properties": {
                "edits": {"type": "string", "description": "the edits, in any of the formats above"},
                "dry_run": {"type": "boolean", "description": "locate and show the diff, write nothing"}
            }, "required": ["edits"]}),
        ).with_raw_output_schema(object(json!({
            "type": "object",
            "properties": {
                "step": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
                "files": {"type": "array", "items": {"type": "string"}},
                "diff": {"type": "string"},
                "written": {"type": "boolean"},
                "already_applied": {"type": "boolean"}
            },
            "required": ["step", "files", "diff", "written", "already_applied"]
        }))));
        out.into_iter()
            .map(annotated)
            .chain(git::tools())
            .chain([run::spec()])
            .collect()
    }

    fn limits(&self) -> Limits {
        Limits {
            result_bytes: self.config.agent.tool_result_bytes,
            ..Limits::default()
        }
    }

    /// Answers one tool call; `cancel` fires when the client cancels it or goes away.
    async fn call(&self, name: &str, args: Value, cancel: &CancellationToken) -> CallToolResult {
        match name {
            "run_tests" => self.run_tests(&args, cancel).await,
            "apply_edit" => self.apply_edit(&args),
            "checkpoint" => git::take(self.root.clone()).await,
            "run" => {
                let config = (self.config.clone(), self.trusted);
                run::run(self.root.clone(), config, &args, cancel).await
            }
            "rollback" => {
                let memory = self.config.memory.clone();
                git::rollback(self.root.clone(), &args, memory).await
            }
            "get_diagnostics" | "read_file" | "outline" | "read_symbol" | "list_files"
            | "find_files" | "grep" => {
                let last = self.last.lock().ok().and_then(|l| l.clone());
                let mut diagnostics = agent_ls_runtime::tests_run::diagnostics_of(last.as_ref());
                if name == "get_diagnostics"
                    && let (Some(path), Some(last)) =
                        (args.get("path").and_then(Value::as_str), &last)
                {
                    diagnostics.extend(diagnostics::of_source(&self.root, path, last));
                }
                let snapshot = Snapshot {
                    root: self.root.clone(),
                    buffers: Default::default(),
                    diagnostics,
                };
                let call = agent_ls_runtime::model::ToolCall {
                    id: String::new(),
                    name: name.to_string(),
                    arguments: args,
                };
                let limits = self.limits();
                let out =
                    tokio::task::spawn_blocking(move || tools::run(&call, &snapshot, &limits))
                        .await
                        .unwrap_or_else(|e| tools::Output::error(format!("the tool failed: {e}")));
                text_result(out.text, out.is_error)
            }
            other => text_result(format!("there is no tool `{other}`"), true),
        }
    }

    async fn run_tests(&self, args: &Value, cancel: &CancellationToken) -> CallToolResult {
        let mut test = self.config.test.clone();
        if let Some(filter) = args
            .get("filter")
            .and_then(Value::as_str)
            .filter(|f| !f.trim().is_empty())
        {
            match agent_ls_runtime::tests_run::narrowed(&self.root, &test, filter.trim()) {
                Ok(argv) => test = agent_ls_runtime::tests_run::with_command(&test, argv),
                Err(e) => return text_result(e.to_string(), true),
            }
        }
        let whole = test.command == self.config.test.command;
        let sandbox = Sandbox::from_config(&self.config.sandbox);
        match agent_ls_runtime::tests_run::run(&self.root, &test, &sandbox, cancel).await {
            Ok(r) => {
                let failures: Vec<Value> = r
                    .failures
                    .iter()
                    .map(|f| json!({"test_id": f.test_id, "message": f.message,
                        "file": f.location.as_ref().map(|l| &l.file), "line": f.location.as_ref().map(|l| l.line)}))
                    .collect();
                let value = json!({"command": r.command.argv.join(" "), "state": r.state(), "passed": r.passed,
                    "failed": r.failed.or(Some(r.failures.len() as u32)), "duration_ms": r.duration_ms,
                    "failures": failures, "environment": r.environment, "stopped": r.stopped(), "report": r.report});
                let cancelled = matches!(r.end, agent_ls_runtime::tests_run::RunEnd::Cancelled);
                if whole
                    && !cancelled
                    && let Ok(mut last) = self.last.lock()
                {
                    *last = Some(r);
                }
                CallToolResult::structured(value)
            }
            Err(e) => text_result(e.to_string(), true),
        }
    }

    fn apply_edit(&self, args: &Value) -> CallToolResult {
        let text = match args.get("edits") {
            None | Some(Value::Null) => return text_result("`edits` is required".into(), true),
            Some(Value::String(text)) => text,
            Some(other) => {
                return text_result(format!("`edits` must be a string, not {other}"), true);
            }
        };
        let dry_run = args
            .get("dry_run")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let plan = match agent_ls_core::edit::parse_plan(text) {
            Ok(p) => p,
            Err(e) => return text_result(format!("the edits could not be read: {e}"), true),
        };
        match agent_ls_runtime::steps::apply(
            &self.root,
            &plan,
            &self.config.edit.limits(),
            "mcp",
            "apply_edit (MCP)",
            dry_run,
        ) {
            // A dry run records no step: its step is null, not 0.
            Ok(applied) => CallToolResult::structured(json!({
                "step": (!dry_run).then_some(applied.step), "files": applied.files,
                "diff": applied.diff, "written": !dry_run, "already_applied": false})),
            // The tool is idempotent: the same edits sent again find their work done, which
            // is a success that says so.
            Err(agent_ls_runtime::steps::StepError::AlreadyInPlace) => {
                let mut result = CallToolResult::structured(json!({"step": null, "files": [],
                    "diff": "", "written": false, "already_applied": true}));
                result.content.push(rmcp::model::ContentBlock::text(
                    "the edits are already in place; nothing was changed",
                ));
                result
            }
            Err(e) => text_result(e.to_string(), true),
        }
    }
}

/// What a host may assume of each tool (MCP's annotations): the reading ones change nothing,
/// run_tests changes no file of the workspace but runs its code, and apply_edit rewrites
/// files (sending the same edits again changes nothing more: they are already applied).
fn annotated(tool: Tool) -> Tool {
    let annotations = match tools::kind_of(&tool.name) {
        tools::ToolKind::Read | tools::ToolKind::Search => ToolAnnotations::new()
            .read_only(true)
            .destructive(false)
            .idempotent(true)
            .open_world(false),
        tools::ToolKind::Execute => ToolAnnotations::new()
            .read_only(false)
            .destructive(false)
            .idempotent(true)
            .open_world(false),
        tools::ToolKind::Edit | tools::ToolKind::Other => ToolAnnotations::new()
            .read_only(false)
            .destructive(true)
            .idempotent(true)
            .open_world(false),
    };
    tool.annotate(annotations)
}

impl ServerHandler for AgentLsMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("agent-ls", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "agent-ls's tools for this workspace: read, list, find and grep files; run the tests and get their failures parsed; apply edits through its edit engine (undo with `agent-ls undo`); in a git repository, take a checkpoint of the workspace and roll back to it.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult {
            tools: self.tools(),
            ..ListToolsResult::default()
        })
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request
            .arguments
            .map(Value::Object)
            .unwrap_or_else(|| json!({}));
        // The call ends early when the client cancels it (`notifications/cancelled`) or closes
        // our stdin; either way its test run's processes end with it.
        let cancel = self.closing.child_token();
        let watch = {
            let (cancel, asked) = (cancel.clone(), context.ct.clone());
            tokio::spawn(async move {
                tokio::select! {
                    _ = asked.cancelled() => cancel.cancel(),
                    _ = cancel.cancelled() => {}
                }
            })
        };
        let answer = self.call(&request.name, args, &cancel).await;
        watch.abort();
        Ok(answer.into())
    }
}

/// Serves the workspace's tools on stdin and stdout until the client goes away.
pub async fn serve(root: &Path, config: (Config, bool)) -> Result<(), McpError> {
    let closing = CancellationToken::new();
    // rmcp speaks through two pipes; tasks of ours stand between them and stdio.
    let (rmcp_in, to_rmcp) = tokio::io::duplex(64 * 1024);
    let (rmcp_out, from_rmcp) = tokio::io::duplex(64 * 1024);
    let (tx, unparsable) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(sort_lines(
        tokio::io::stdin(),
        to_rmcp,
        tx,
        closing.clone(),
        MAX_LINE,
    ));
    let writer = tokio::spawn(merge_lines(from_rmcp, unparsable, tokio::io::stdout()));
    let service = AgentLsMcp::new(root.to_path_buf(), config, closing)
        .serve((rmcp_in, rmcp_out))
        .await
        .map_err(|e| McpError::Start(Box::new(e)))?;
    let ended = service.waiting().await.map_err(McpError::Ended);
    // rmcp's last answers are still on their way to stdout.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), writer).await;
    ended.map(|_| ())
}

/// The longest line read, as rmcp bounds it: a longer one is skipped, never held whole.
const MAX_LINE: usize = 16 * 1024 * 1024;

/// Copies the JSON lines of `input` to rmcp and reports the others on `unparsable`: rmcp drops
/// a line that is not JSON without a word, and the client would wait for an answer that never
/// comes, where JSON-RPC answers a parse error. Cancels `closing` when the input ends: rmcp
/// waits up to 5 s for the calls in flight once its input ends; a test run would hold that
/// long, and its processes with it, so the runs hear of the end at once and answer as
/// cancelled.
async fn sort_lines(
    input: impl tokio::io::AsyncRead + Unpin,
    mut to_rmcp: tokio::io::DuplexStream,
    unparsable: tokio::sync::mpsc::UnboundedSender<String>,
    closing: CancellationToken,
    max_line: usize,
) {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
    let mut input = tokio::io::BufReader::new(input);
    let mut line = Vec::new();
    loop {
        line.clear();
        // A line of max_line bytes and its newline is whole; more is too long.
        let limit = u64::try_from(max_line).map_or(u64::MAX, |m| m.saturating_add(1));
        match (&mut input).take(limit).read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if line.len() > max_line && !line.ends_with(b"\n") {
            let skipped = skip_line(&mut input).await;
            let why = format!("a line longer than {max_line} bytes was skipped");
            if !skipped || unparsable.send(why).is_err() {
                break;
            }
            continue;
        }
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        let text = text.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(text);
        let parsed = if text.iter().all(u8::is_ascii_whitespace) {
            Ok(())
        } else {
            serde_json::from_slice::<serde::de::IgnoredAny>(text).map(|_| ())
        };
        let passed = match parsed {
            Ok(()) => to_rmcp.write_all(&line).await.is_ok(),
            Err(e) => unparsable.send(e.to_string()).is_ok(),
        };
        if !passed {
            break;
        }
    }
    drop(to_rmcp);
    closing.cancel();
}

/// Reads past the rest of a line without keeping it; false when the input ended or failed.
async fn skip_line(input: &mut (impl tokio::io::AsyncBufRead + Unpin)) -> bool {
    use tokio::io::AsyncBufReadExt;
    loop {
        let (used, ended) = match input.fill_buf().await {
            Ok([]) | Err(_) => return false,
            Ok(buf) => match buf.iter().position(|&b| b == b'\n') {
                Some(at) => (at + 1, true),
                None => (buf.len(), false),
            },
        };
        input.consume(used);
        if ended {
            return true;
        }
    }
}

/// Writes rmcp's messages and the parse errors to `out`, each line whole, so the two never
/// interleave. A parse error's id is null, as JSON-RPC asks (rmcp would leave it out).
async fn merge_lines(
    from_rmcp: tokio::io::DuplexStream,
    mut unparsable: tokio::sync::mpsc::UnboundedReceiver<String>,
    mut out: impl tokio::io::AsyncWrite + Unpin,
) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let mut from_rmcp = tokio::io::BufReader::new(from_rmcp);
    // Kept across the loop: a read that loses the race leaves its partial line here.
    let mut line = Vec::new();
    loop {
        let whole = tokio::select! {
            read = from_rmcp.read_until(b'\n', &mut line) => match read {
                Ok(0) | Err(_) => break,
                Ok(_) => std::mem::take(&mut line),
            },
            Some(why) = unparsable.recv() => {
                let answer = json!({"jsonrpc": "2.0", "id": null,
                    "error": {"code": -32700, "message": "Parse error", "data": why}});
                format!("{answer}\n").into_bytes()
            }
        };
        if out.write_all(&whole).await.is_err() || out.flush().await.is_err() {
            break;
        }
    }
    let _ = out.flush().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_that_are_not_json_or_too_long_are_reported_and_the_rest_go_on() {
        use tokio::io::AsyncReadExt;
        let input: &[u8] = b"{\"a\": 1}\nnot json\n[\"a line too long\"]\n\n{\"b\": 2}\n";
        let (to_rmcp, mut from_sorter) = tokio::io::duplex(1024);
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let closing = CancellationToken::new();
        sort_lines(input, to_rmcp, tx, closing.clone(), 16).await;
        let mut passed = String::new();
        from_sorter.read_to_string(&mut passed).await.unwrap();
        assert_eq!(passed, "{\"a\": 1}\n\n{\"b\": 2}\n");
        let mut reported = Vec::new();
        while let Ok(why) = rx.try_recv() {
            reported.push(why);
        }
        assert_eq!(reported.len(), 2, "{reported:?}");
        assert!(reported[1].contains("longer than 16 bytes"), "{reported:?}");
        assert!(closing.is_cancelled(), "the end of the input is said");
    }
}
