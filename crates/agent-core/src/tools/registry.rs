//! The tool registry: tools by name, with argument validation before every call.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use super::schema::{check_schema, validate};
use super::{
    BACKSTOP_GRACE, EditFile, Glob, ListDir, ReadFile, Recovery, Search, Shell, Tool, ToolContext,
    ToolError, ToolOutput, WriteFile,
};

/// The tools an agent may call, by unique name.
///
/// Cloning is cheap: the tools are shared.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// A registry with the seven built-in tools: `read_file`, `write_file`, `edit_file`,
    /// `list_dir`, `search`, `glob` and `shell`.
    pub fn with_builtins() -> Self {
        let builtins: [Arc<dyn Tool>; 7] = [
            Arc::new(ReadFile::new()),
            Arc::new(WriteFile::new()),
            Arc::new(EditFile::new()),
            Arc::new(ListDir::new()),
            Arc::new(Search::new()),
            Arc::new(Glob::new()),
            Arc::new(Shell::new()),
        ];
        // Their names are distinct and their schemas pass `check_schema` (unit-tested), so
        // they skip `register`'s checks, which could only fail on a bug.
        let tools = builtins.into_iter().map(|tool| (tool.name().to_owned(), tool)).collect();
        Self { tools }
    }

    /// Adds `tool`.
    ///
    /// Refuses a name that is already registered ([`ToolError::DuplicateTool`]) and a schema
    /// that [`check_schema`] rejects ([`ToolError::InvalidSchema`]; for a tool with a
    /// [foreign schema](Tool::foreign_schema), only a root that is not an object schema); the
    /// registry is unchanged then.
    pub fn register(&mut self, tool: Arc<dyn Tool>) -> Result<(), ToolError> {
        let name = tool.name();
        if self.tools.contains_key(name) {
            return Err(ToolError::DuplicateTool { name: name.to_owned() });
        }
        let problems = schema_problems(tool.as_ref());
        if !problems.is_empty() {
            return Err(ToolError::InvalidSchema { tool: name.to_owned(), problems });
        }
        self.tools.insert(name.to_owned(), tool);
        Ok(())
    }

    /// Adds `tool`, replacing the tool of the same name if there is one (which is returned):
    /// a `shell` with its own network setting for some agents, say. A schema that
    /// [`check_schema`] rejects is refused ([`ToolError::InvalidSchema`]), changing nothing.
    pub fn replace(&mut self, tool: Arc<dyn Tool>) -> Result<Option<Arc<dyn Tool>>, ToolError> {
        let problems = schema_problems(tool.as_ref());
        if !problems.is_empty() {
            return Err(ToolError::InvalidSchema { tool: tool.name().to_owned(), problems });
        }
        Ok(self.tools.insert(tool.name().to_owned(), tool))
    }

    /// The tool named `name`, if registered.
    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.tools.get(name).cloned()
    }

    /// The registered names, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.tools.keys().map(String::as_str).collect()
    }

    /// Calls the tool `name` with `args` after validating them against its schema.
    ///
    /// Returns [`ToolError::UnknownTool`] (listing the available names) when no tool has that
    /// name and [`ToolError::InvalidArguments`] (listing every problem with its JSON path) when
    /// `args` do not match; the tool is not called then. Otherwise returns what the tool returns.
    pub async fn call(
        &self,
        ctx: &ToolContext,
        name: &str,
        args: Value,
    ) -> Result<ToolOutput, ToolError> {
        let Some(tool) = self.tools.get(name) else {
            return Err(ToolError::UnknownTool {
                name: name.to_owned(),
                available: self.tools.keys().cloned().collect(),
            });
        };
        let mut problems = validate(tool.schema(), &args);
        if problems.is_empty() {
            problems = tool.check_args(&args);
        }
        if !problems.is_empty() {
            return Err(ToolError::InvalidArguments { tool: name.to_owned(), problems });
        }
        tracing::debug!(tool = name, "calling tool");
        bounded(tool.as_ref(), ctx, tool.call(ctx, args)).await
    }

    fn checked(&self, name: &str, args: &Value) -> Result<&Arc<dyn Tool>, ToolError> {
        let Some(tool) = self.tools.get(name) else {
            return Err(ToolError::UnknownTool {
                name: name.to_owned(),
                available: self.tools.keys().cloned().collect(),
            });
        };
        let mut problems = validate(tool.schema(), args);
        if problems.is_empty() {
            problems = tool.check_args(args);
        }
        if !problems.is_empty() {
            return Err(ToolError::InvalidArguments { tool: name.to_owned(), problems });
        }
        Ok(tool)
    }

    /// [`call`](Self::call) keeping the call's crash journal under the context's journal
    /// directory, in a directory named after `key` (see [`Tool::call_journaled`]). Without a
    /// journal directory this is `call`.
    pub async fn call_journaled(
        &self,
        ctx: &ToolContext,
        name: &str,
        args: Value,
        key: &str,
    ) -> Result<ToolOutput, ToolError> {
        let tool = self.checked(name, &args)?;
        match ctx.journal() {
            Some(root) => {
                let journal = root.join(journal_name(key));
                bounded(tool.as_ref(), ctx, tool.call_journaled(ctx, args, &journal)).await
            }
            None => bounded(tool.as_ref(), ctx, tool.call(ctx, args)).await,
        }
    }

    /// Removes the crash journal kept under `key`, if any: done before a call is recorded as
    /// started, so that a journal found later belongs to that call and not to an earlier one.
    pub async fn discard_journal(&self, ctx: &ToolContext, key: &str) -> Result<(), ToolError> {
        let Some(root) = ctx.journal() else { return Ok(()) };
        let dir = root.join(journal_name(key));
        let result = tokio::task::spawn_blocking(move || match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(ToolError::Io { tool: "journal".into(), path: dir, source: e }),
        })
        .await;
        result.map_err(|e| ToolError::Failed { tool: "journal".into(), message: e.to_string() })?
    }

    /// What became of a call started with [`call_journaled`](Self::call_journaled) under `key`
    /// before a crash (see [`Tool::recover`]).
    pub async fn recover(
        &self,
        ctx: &ToolContext,
        name: &str,
        args: Value,
        key: &str,
    ) -> Result<Recovery, ToolError> {
        let tool = self.checked(name, &args)?;
        match ctx.journal() {
            Some(root) => {
                let dir = root.join(journal_name(key));
                match tool.recover(ctx, args, &dir).await? {
                    // No journal here at all: it may have been started on another host.
                    Recovery::NotStarted
                        if ctx.foreign_calls()
                            && !tokio::fs::try_exists(&dir).await.unwrap_or(true) =>
                    {
                        Ok(Recovery::Unknown)
                    }
                    Recovery::Completed(output) => Ok(Recovery::Completed(redacted(output))),
                    Recovery::Interrupted(output) => Ok(Recovery::Interrupted(redacted(output))),
                    recovery => Ok(recovery),
                }
            }
            None => Ok(Recovery::Unknown),
        }
    }
}

impl fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolRegistry").field("tools", &self.names()).finish()
    }
}

/// The problems of `tool`'s schema: [`check_schema`]'s, or for a [foreign
/// schema](Tool::foreign_schema) (any JSON Schema, checked by its server) only a root that is
/// not an object schema.
fn schema_problems(tool: &dyn Tool) -> Vec<String> {
    if !tool.foreign_schema() {
        return check_schema(tool.schema());
    }
    if tool.schema().get("type").and_then(Value::as_str) == Some("object") {
        Vec::new()
    } else {
        vec!["`#`: the root of an argument schema must have \"type\": \"object\"".into()]
    }
}

/// Runs `call` of `tool` within the context's hard limit of a tool call, measured on tokio's
/// clock: past it the call is dropped and fails with [`ToolError::Timeout`] if the tool is
/// [idempotent](Tool::idempotent) (read-only tools are), so that a retry may send it again,
/// and with [`ToolError::OutcomeUnknown`] otherwise: dropping the call does not undo what it
/// started (an MCP server keeps working on a request until it gets its cancellation), so it
/// must not be sent again automatically. A tool that [stops itself](Tool::stops_itself) at the
/// limit gets [`BACKSTOP_GRACE`] more, so its own stop (and its recorded outcome) normally wins.
async fn bounded(
    tool: &dyn Tool,
    ctx: &ToolContext,
    call: impl std::future::Future<Output = Result<ToolOutput, ToolError>>,
) -> Result<ToolOutput, ToolError> {
    let limit = ctx.tool_timeout();
    let wait = if tool.stops_itself() { limit.saturating_add(BACKSTOP_GRACE) } else { limit };
    match tokio::time::timeout(wait, call).await {
        Ok(result) => result.map(redacted),
        Err(_) => {
            let after_ms = u64::try_from(limit.as_millis()).unwrap_or(u64::MAX);
            let tool_name = tool.name().to_owned();
            if tool.idempotent() {
                tracing::warn!(tool = %tool_name, limit_ms = after_ms, "tool call timed out");
                Err(ToolError::Timeout { tool: tool_name, after_ms })
            } else {
                tracing::warn!(
                    tool = %tool_name,
                    limit_ms = after_ms,
                    "tool call timed out; it is not idempotent, so its outcome is unknown"
                );
                // Whatever the dropped call cancels on its side, this side cannot tell: a
                // tool that cancels for sure stops itself at the limit and says so.
                Err(ToolError::OutcomeUnknown { tool: tool_name, after_ms, cancelled: false })
            }
        }
    }
}

/// A tool's output with the secrets this process knows redacted ([`crate::secrets`]): what
/// every caller gets, records, audits and shows a model.
fn redacted(mut output: ToolOutput) -> ToolOutput {
    crate::secrets::redact_string(&mut output.output);
    crate::secrets::redact_json(&mut output.data);
    output
}

/// A directory name for a journal key: letters, digits and `-` kept, every other byte as `_XX`
/// hex (so `.` and `..` cannot name the journal root or its parent).
fn journal_name(key: &str) -> String {
    key.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b == b'-' {
                (b as char).to_string()
            } else {
                format!("_{b:02x}")
            }
        })
        .collect()
}
