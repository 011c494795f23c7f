//! Forwards VS Code's own diagnostics (its other language servers', such as the built-in
//! TypeScript support) to agent-ls as `agent-ls/editorDiagnostics`, so a run checks each edit
//! with them and starts no language server of its own (docs/project-lsp.md). agent-ls's own
//! diagnostics (its test failures and review findings) are left out.

import * as vscode from 'vscode';
import { LanguageClient } from 'vscode-languageclient/node';

/** The sources of agent-ls's own diagnostics (src/lsp/test_runs.rs, review_diagnostics.rs). */
const OURS = ['agent-ls test', 'agent-ls review'];

/** LSP's severities, from VS Code's (which count from 0, Error first). */
const SEVERITY: Record<vscode.DiagnosticSeverity, number> = {
  [vscode.DiagnosticSeverity.Error]: 1,
  [vscode.DiagnosticSeverity.Warning]: 2,
  [vscode.DiagnosticSeverity.Information]: 3,
  [vscode.DiagnosticSeverity.Hint]: 4,
};

/** A file's diagnostics, as the notification carries them. */
export function wireDiagnostics(diagnostics: readonly vscode.Diagnostic[]): object[] {
  return diagnostics
    .filter((d) => !OURS.includes(d.source ?? ''))
    .map((d) => ({
      range: {
        start: { line: d.range.start.line, character: d.range.start.character },
        end: { line: d.range.end.line, character: d.range.end.character },
      },
      severity: SEVERITY[d.severity],
      message: d.message,
      source: d.source,
      code: typeof d.code === 'object' ? String(d.code.value) : d.code,
    }));
}

/**
 * Sends every file's diagnostics now, then each file's whenever they change, with the
 * document's version at that moment (the one didChange carried), so the server can tell the
 * diagnostics of an agent edit's text from a late word on the text before it.
 */
export function forwardDiagnostics(client: LanguageClient): vscode.Disposable {
  const send = (uri: vscode.Uri) => {
    if (uri.scheme === 'file') {
      const key = uri.toString();
      const document = vscode.workspace.textDocuments.find((d) => d.uri.toString() === key);
      void client.sendNotification('agent-ls/editorDiagnostics', {
        uri: client.code2ProtocolConverter.asUri(uri),
        diagnostics: wireDiagnostics(vscode.languages.getDiagnostics(uri)),
        version: document?.version,
      });
    }
  };
  for (const [uri] of vscode.languages.getDiagnostics()) {
    send(uri);
  }
  return vscode.languages.onDidChangeDiagnostics((e) => e.uris.forEach(send));
}
