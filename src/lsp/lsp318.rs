//! The LSP 3.18 pieces the types crate lacks (ls-types 0.0.6 is LSP 3.17): what the client
//! says of them in `initialize`, read from its raw params (the typed ones drop unknown
//! fields), and the code actions as the client can read them: tagged `LLMGenerated` where it
//! supports that tag, and as plain `Command`s for a client without code action literals.
//!
//! It must not decide which actions there are (`code_actions` in mod.rs does); only their
//! shape on the wire.

use serde_json::Value;
use tower_lsp_server::ls_types::CodeActionOrCommand;

use super::ext;

/// `CodeActionTag.LLMGenerated` (LSP 3.18, `codeAction.tagSupport.valueSet`): "Marks the
/// code action as LLM-generated".
pub const LLM_GENERATED: u64 = 1;

/// The method tower-lsp's router serves `textDocument/codeAction` under: its answer is JSON,
/// so it can carry 3.18's `tags`, which the typed `CodeAction` has no field for. The
/// transport answers any request from the client whose method starts with `$/` itself, so
/// only the stdin thread's router, which renames the client's request, reaches it.
pub const CODE_ACTION_ROUTE: &str = "$/agent-ls/codeAction";

/// `workspace/textDocumentContent`'s params (LSP 3.18).
#[derive(Debug, serde::Deserialize)]
pub struct TextDocumentContentParams {
    pub uri: tower_lsp_server::ls_types::Uri,
}

/// The `initialize` response with the 3.18 server capabilities the typed ones cannot hold:
/// `workspace.textDocumentContent` for the `agent-ls:` documents (`run_documents`).
pub fn with_server_capabilities(mut response: Value) -> Value {
    if let Some(capabilities) = response
        .pointer_mut("/result/capabilities")
        .and_then(Value::as_object_mut)
    {
        let workspace = capabilities
            .entry("workspace")
            .or_insert_with(|| serde_json::json!({}));
        if let Some(workspace) = workspace.as_object_mut() {
            workspace.insert(
                "textDocumentContent".into(),
                serde_json::json!({ "schemes": [super::run_documents::SCHEME] }),
            );
        }
    }
    response
}

/// What the client said in `initialize` that the typed capabilities do not keep.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientExtras {
    /// `textDocument.codeAction.tagSupport.valueSet` holds `LLMGenerated`.
    pub llm_generated_tag: bool,
    /// `textDocument.codeAction.codeActionLiteralSupport` is there: the client reads
    /// `CodeAction` literals. Without it the specification has the server answer `Command`s.
    pub code_action_literals: bool,
}

impl ClientExtras {
    /// Read from `initialize`'s raw params.
    pub fn from_initialize(params: Option<&Value>) -> Self {
        let code_action = params.and_then(|p| p.pointer("/capabilities/textDocument/codeAction"));
        let tags = code_action
            .and_then(|c| c.pointer("/tagSupport/valueSet"))
            .and_then(Value::as_array);
        ClientExtras {
            llm_generated_tag: tags
                .is_some_and(|t| t.iter().any(|v| v.as_u64() == Some(LLM_GENERATED))),
            code_action_literals: code_action
                .and_then(|c| c.get("codeActionLiteralSupport"))
                .is_some_and(Value::is_object),
        }
    }
}

/// Whether the action runs the agent (a model writes what follows): the ones tagged
/// `LLMGenerated`. Undo and commit run no model.
fn runs_the_agent(action: &CodeActionOrCommand) -> bool {
    // The predicted next edit is the edit model's text itself.
    if matches!(action, CodeActionOrCommand::CodeAction(a) if a.title == super::next_edit::TITLE) {
        return true;
    }
    let command = match action {
        CodeActionOrCommand::Command(c) => Some(c),
        CodeActionOrCommand::CodeAction(a) => a.command.as_ref(),
    };
    command.is_some_and(|c| {
        [
            ext::RUN_COMMAND,
            ext::FIX_TESTS_COMMAND,
            ext::RUN_SKILL_COMMAND,
        ]
        .contains(&c.command.as_str())
    })
}

/// The code actions as the client reads them: `Command`s for a client without code action
/// literals (the command of each action, under the action's title), else the actions, those
/// that run the agent tagged `LLMGenerated` when the client supports that tag.
pub fn wire_actions(actions: Vec<CodeActionOrCommand>, client: ClientExtras) -> Value {
    let wire = actions.into_iter().filter_map(|action| {
        let tagged = client.llm_generated_tag && runs_the_agent(&action);
        let action = match action {
            CodeActionOrCommand::CodeAction(a) if !client.code_action_literals => {
                let mut command = a.command?;
                command.title = a.title;
                CodeActionOrCommand::Command(command)
            }
            other => other,
        };
        let mut value = serde_json::to_value(&action).ok()?;
        if tagged && matches!(action, CodeActionOrCommand::CodeAction(_)) {
            value["tags"] = serde_json::json!([LLM_GENERATED]);
        }
        Some(value)
    });
    Value::Array(wire.collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tower_lsp_server::ls_types::{CodeAction, Command};

    fn action(title: &str, command: &str) -> CodeActionOrCommand {
        CodeActionOrCommand::CodeAction(CodeAction {
            title: title.into(),
            kind: Some("quickfix".into()),
            command: Some(Command {
                title: "inner".into(),
                command: command.into(),
                arguments: Some(vec![json!({"goal": "fix"})]),
            }),
            ..CodeAction::default()
        })
    }

    fn client(caps: Value) -> ClientExtras {
        ClientExtras::from_initialize(Some(&json!({"capabilities": caps})))
    }

    #[test]
    fn the_agents_actions_are_tagged_llm_generated_only_for_a_client_with_the_tag() {
        let tags = json!({"textDocument": {"codeAction": {
            "codeActionLiteralSupport": {"codeActionKind": {"valueSet": ["quickfix"]}},
            "tagSupport": {"valueSet": [1]}}}});
        let actions = || {
            vec![
                action("Agent: fix this", ext::RUN_COMMAND),
                action("Agent: Undo", ext::UNDO_COMMAND),
            ]
        };
        let wire = wire_actions(actions(), client(tags));
        assert_eq!(wire[0]["tags"], json!([1]));
        assert_eq!(wire[0]["kind"], "quickfix");
        assert!(wire[1].get("tags").is_none(), "{wire}");
        let untagged = json!({"textDocument": {"codeAction": {
            "codeActionLiteralSupport": {"codeActionKind": {"valueSet": []}},
            "tagSupport": {"valueSet": [2]}}}});
        let wire = wire_actions(actions(), client(untagged));
        assert!(wire[0].get("tags").is_none(), "{wire}");
    }

    #[test]
    fn a_client_without_code_action_literals_gets_commands_titled_as_the_actions() {
        let wire = wire_actions(
            vec![action("Agent: fix this", ext::RUN_COMMAND)],
            client(json!({})),
        );
        assert_eq!(
            wire,
            json!([{"title": "Agent: fix this", "command": ext::RUN_COMMAND,
                    "arguments": [{"goal": "fix"}]}])
        );
        assert_eq!(client(json!({})), ClientExtras::default());
        assert_eq!(ClientExtras::from_initialize(None), ClientExtras::default());
    }
}
