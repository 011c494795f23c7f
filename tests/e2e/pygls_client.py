"""A stock pygls/lsprotocol client (pygls 2.1, lsprotocol 2025.0) runs an agent code action
end to end against the real agent-ls: initialize, open calc.py, ask for the code actions,
execute "Agent: fix failing tests", apply the server's workspace/applyEdit to its copy of the
document (sending the didChange that shows it landed), and wait for agent-ls/runFinished.

Usage: pygls_client.py MODE AGENT_LS WORKSPACE RESULT
  MODE "commands": a client that announces no codeActionLiteralSupport (the stock client's
        default capabilities), which the server answers with Commands.
  MODE "literals": a client that announces code action literals and the LLMGenerated tag,
        with the structure hook docs/lsp-extensions.md gives (lsprotocol's own reads every
        CodeAction that runs a command as a Command).
  MODE "stock-literals": the same client with lsprotocol's own hook: records what it reads.
Each check is a JSON line in RESULT: {"name", "ok", "detail"}.
"""

import asyncio
import json
import logging
import sys
from pathlib import Path
from typing import Union

from lsprotocol import types as t
from pygls.lsp.client import LanguageClient
from pygls.protocol import default_converter

MODE, AGENT_LS, WORKSPACE, RESULT = sys.argv[1:5]
# pygls warns of every notification it has no handler for (the server's run events).
logging.disable(logging.WARNING)


def record(name, ok, detail=""):
    with open(RESULT, "a") as f:
        f.write(json.dumps({"name": name, "ok": bool(ok), "detail": str(detail)[:2000]}) + "\n")


def converter_with_fixed_hook():
    """lsprotocol's converter, with the `Command | CodeAction` union told apart by the type of
    `command`: a string in a Command, an object in a CodeAction (the upstream fix,
    docs/lsprotocol-code-action-hook.patch)."""
    converter = default_converter()

    def hook(obj, _type):
        if isinstance(obj.get("command"), str):
            return converter.structure(obj, t.Command)
        return converter.structure(obj, t.CodeAction)

    converter.register_structure_hook(Union[t.Command, t.CodeAction], hook)
    return converter


def capabilities():
    workspace = t.WorkspaceClientCapabilities(
        apply_edit=True,
        workspace_edit=t.WorkspaceEditClientCapabilities(document_changes=True),
    )
    if MODE == "commands":
        return t.ClientCapabilities(workspace=workspace)
    code_action = t.CodeActionClientCapabilities(
        code_action_literal_support=t.ClientCodeActionLiteralOptions(
            code_action_kind=t.ClientCodeActionKindOptions(
                value_set=[t.CodeActionKind.QuickFix, t.CodeActionKind.Source]
            )
        ),
        tag_support=t.CodeActionTagOptions(value_set=[t.CodeActionTag.LlmGenerated]),
    )
    return t.ClientCapabilities(
        workspace=workspace,
        text_document=t.TextDocumentClientCapabilities(code_action=code_action),
    )


def apply_edits(text, edits):
    """The text with `edits` applied (ASCII text: UTF-16 columns are characters)."""
    lines = text.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(pos):
        return starts[min(pos.line, len(lines))] + pos.character

    for e in sorted(edits, key=lambda e: offset(e.range.start), reverse=True):
        text = text[: offset(e.range.start)] + e.new_text + text[offset(e.range.end) :]
    return text


async def main():
    factory = default_converter if MODE != "literals" else converter_with_fixed_hook
    client = LanguageClient("pygls-agent-ls-test", "1", converter_factory=factory)
    path = Path(WORKSPACE) / "calc.py"
    uri = path.as_uri()
    doc = {"text": path.read_text(), "version": 1}
    finished = asyncio.get_running_loop().create_future()

    @client.feature(t.WORKSPACE_APPLY_EDIT)
    def apply_edit(ls, params: t.ApplyWorkspaceEditParams):
        for change in params.edit.document_changes or []:
            if isinstance(change, t.TextDocumentEdit) and change.text_document.uri == uri:
                doc["text"] = apply_edits(doc["text"], change.edits)
                doc["version"] += 1
                ls.text_document_did_change(
                    t.DidChangeTextDocumentParams(
                        text_document=t.VersionedTextDocumentIdentifier(uri=uri, version=doc["version"]),
                        content_changes=[t.TextDocumentContentChangeWholeDocument(text=doc["text"])],
                    )
                )
        return t.ApplyWorkspaceEditResult(applied=True)

    @client.feature("agent-ls/runFinished")
    def run_finished(ls, params):
        if not finished.done():
            finished.set_result(params)

    await client.start_io(AGENT_LS, "serve", cwd=WORKSPACE)
    await client.initialize_async(
        t.InitializeParams(
            capabilities=capabilities(),
            root_uri=Path(WORKSPACE).as_uri(),
            workspace_folders=[t.WorkspaceFolder(uri=Path(WORKSPACE).as_uri(), name="ws")],
            initialization_options={
                "model": {"provider": "replay", "replay_file": str(Path(WORKSPACE) / ".replay.jsonl")},
                "agent": {"approval": "auto"},
            },
        )
    )
    client.initialized(t.InitializedParams())
    client.text_document_did_open(
        t.DidOpenTextDocumentParams(
            text_document=t.TextDocumentItem(uri=uri, language_id="python", version=1, text=doc["text"])
        )
    )
    actions = await client.text_document_code_action_async(
        t.CodeActionParams(
            text_document=t.TextDocumentIdentifier(uri=uri),
            range=t.Range(start=t.Position(line=0, character=0), end=t.Position(line=0, character=0)),
            context=t.CodeActionContext(diagnostics=[]),
        )
    )
    action = next((a for a in actions or [] if a.title == "Agent: fix failing tests"), None)
    record("the fix action is offered", action is not None, actions)
    if MODE == "stock-literals":
        # lsprotocol's own hook: a CodeAction that runs a command comes back as a Command whose
        # command is the CodeAction's Command object turned into a string.
        record("lsprotocol's own hook reads the action as a Command",
               isinstance(action, t.Command) and not action.command.startswith("agent-ls."), action)
        await stop(client)
        return
    if MODE == "commands":
        record("it is a Command running agent-ls", isinstance(action, t.Command)
               and action.command == "agent-ls.run", action)
        command = action
    else:
        record("it is a CodeAction tagged LLMGenerated", isinstance(action, t.CodeAction)
               and list(action.tags or []) == [t.CodeActionTag.LlmGenerated]
               and action.kind == "source.agent-ls.fixTests", action)
        command = action.command
    answer = await client.workspace_execute_command_async(
        t.ExecuteCommandParams(command=command.command, arguments=command.arguments)
    )
    record("the command starts a run", "run_id" in json.dumps(answer, default=lambda o: getattr(o, "__dict__", str(o))), answer)
    outcome = await asyncio.wait_for(finished, 60)
    status = getattr(outcome, "status", None)
    record("the run finishes done", status == "done", outcome)
    record("the document holds the fix", "return a + b" in doc["text"], doc["text"])
    record("the disk holds the fix", "return a + b" in path.read_text(), path.read_text())
    await stop(client)


async def stop(client):
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()


try:
    asyncio.run(main())
except Exception as e:  # noqa: BLE001 - every failure is a check the test reports
    record("the client ran without an error", False, repr(e))
