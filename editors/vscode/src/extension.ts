//! agent-ls for VS Code: starts the server, maps settings to its configuration, adds the
//! "Agent:" palette commands, a status-bar item fed by the server's progress and status
//! notifications, and the "Agent Runs" view fed by `agent-ls/runEvent`. Agent edits arrive
//! from the server as workspace/applyEdit with change annotations, so VS Code's refactor
//! preview shows them; nothing here applies edits itself. The server asks, with
//! `agent-ls/saveFiles`, for the documents it changed to be saved, so the disk the tests run
//! on matches the editor and a later save raises no conflict. Inline completion (ghost text)
//! is vscode-languageclient's own `textDocument/inlineCompletion` feature, gated by
//! `agentLs.inlineCompletion.enable` in the middleware.

import * as fs from 'fs';
import * as path from 'path';
import * as vscode from 'vscode';
import {
  DidChangeConfigurationNotification,
  ExecuteCommandRequest,
  LanguageClient,
  LanguageClientOptions,
  MessageType,
  ProgressToken,
  ServerOptions,
  ShowMessageNotification,
  ShowMessageRequest,
  StaticFeature,
  WorkDoneProgress,
  WorkDoneProgressBegin,
  WorkDoneProgressCancelNotification,
  WorkDoneProgressCreateParams,
  WorkDoneProgressCreateRequest,
  WorkDoneProgressReport,
} from 'vscode-languageclient/node';
import { RunChoice, gitAction, offerActions, offerWorktree, pickRun, rollback, runIdOf } from './gitActions';
import { forwardDiagnostics } from './diagnostics';
import { isDiff, isLong, questionParts } from './messages';
import { askInPicker } from './question';
import { RunEvent, figures, worktreeElsewhere } from './runs';
import { RunView } from './runView';
import { serverSettings } from './settings';

/** The payload of `agent-ls/testStatus` (docs/lsp-extensions.md). */
interface TestStatus {
  state: 'running' | 'passed' | 'failed' | 'timed_out' | 'cancelled' | 'error';
  passed: number | null;
  failed: number | null;
  duration_ms: number | null;
  command: string | null;
  message: string | null;
}

/** The payload of `agent-ls/runFinished`. */
interface RunFinished {
  run_id: string;
  status: string;
  answer: string;
  iterations: number;
  files_changed: string[];
  tests: { passed: number; failed: number } | null;
  tokens: number;
  duration_ms: number;
  /** The git checkpoint taken before the run wrote, its branch and commit (docs/git.md). */
  checkpoint?: string | null;
  branch?: string | null;
  commit?: string | null;
  /** The worktree an isolated run worked in (git.isolation = "worktree"). */
  worktree?: string | null;
}

/** The answer of `agent-ls.status`. */
interface Status {
  active: { run_id: string; goal: string } | null;
  last: RunFinished | null;
  interrupted?: { run_id: string; goal: string; iterations: number }[];
  /** Set when the store did not answer in time: the list above is then not "none". */
  interrupted_unknown?: string;
  steps: { id: number; run_id: string; goal: string; files: string[]; undone: boolean }[];
}

let client: LanguageClient | undefined;
let output: vscode.LogOutputChannel;
/** The model's text as it streams, run after run. */
let modelOutput: vscode.OutputChannel;
let bar: vscode.StatusBarItem;
const runView = new RunView();

/** What the status bar shows: a run's step wins over the tests' state. */
const shown: { run?: string; tests?: TestStatus; last?: RunFinished; figures?: string } = {};

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  output = vscode.window.createOutputChannel('agent-ls', { log: true });
  modelOutput = vscode.window.createOutputChannel('agent-ls: model');
  bar = vscode.window.createStatusBarItem('agentLs.status', vscode.StatusBarAlignment.Left, 10);
  bar.name = 'agent-ls';
  bar.command = 'agentLs.status';
  context.subscriptions.push(output, modelOutput, bar);
  context.subscriptions.push(vscode.window.registerTreeDataProvider('agentLs.runs', runView));
  render();
  bar.show();

  const server = (id: string, args?: unknown) => () => execute(id, args);
  const commands: [string, (...args: unknown[]) => unknown][] = [
    ['agentLs.run', runCommand],
    ['agentLs.runSkill', runSkillCommand],
    ['agentLs.fixTests', server('agent-ls.fixTests')],
    // The reviewer on the uncommitted work; its findings arrive as diagnostics.
    ['agentLs.review', server('agent-ls.review')],
    ['agentLs.accept', server('agent-ls.accept')],
    ['agentLs.reject', server('agent-ls.reject')],
    ['agentLs.undo', (step?: unknown) => execute('agent-ls.undo', typeof step === 'number' ? { step } : undefined)],
    ['agentLs.redo', server('agent-ls.redo')],
    ['agentLs.rerunTests', server('agent-ls.rerunTests')],
    ['agentLs.cancel', server('agent-ls.cancel')],
    ['agentLs.resume', (runId?: unknown) => execute('agent-ls.resume', typeof runId === 'string' ? { run_id: runId } : undefined)],
    ['agentLs.status', statusCommand],
    ['agentLs.showRunLog', showRunLog],
    ['agentLs.restart', restart],
    ['agentLs.openDiff', openDiff],
    // From the run view's inline action (its node carries the step) or with a step number.
    ['agentLs.undoStep', (n?: unknown) => {
      const step = typeof n === 'number' ? n : (n as { step?: number } | undefined)?.step;
      return step === undefined ? undefined : execute('agent-ls.undo', { step });
    }],
    // From the palette (a pick among the applied steps) or the run view's step.
    ['agentLs.rewind', rewindCommand],
    ['agentLs.showModelOutput', () => modelOutput.show(true)],
    // From the palette (a pick among the recent runs), the run view's row, or with a run id.
    ['agentLs.rollback', rollbackCommand],
    ['agentLs.commit', (arg?: unknown) => gitCommand('agent-ls.commit', arg)],
    ['agentLs.pr', (arg?: unknown) => gitCommand('agent-ls.pr', arg)],
  ];
  for (const [id, fn] of commands) {
    context.subscriptions.push(vscode.commands.registerCommand(id, fn));
  }
  context.subscriptions.push(
    vscode.workspace.onDidChangeConfiguration(async (e) => {
      if (e.affectsConfiguration('agentLs.server.path')) {
        await restart();
      } else if (e.affectsConfiguration('agentLs') && client?.isRunning()) {
        await sendSettings();
      }
    }),
    // Trust granted in VS Code is the user's word on this folder: the server applies the
    // workspace's settings from now on (the server binary itself stays as it was started).
    vscode.workspace.onDidGrantWorkspaceTrust(async () => {
      if (client?.isRunning()) {
        await sendSettings();
      }
    }),
  );
  await start();
}

export async function deactivate(): Promise<void> {
  await client?.stop();
  client = undefined;
}

/** Whether ghost text is asked of the server for `document` (`agentLs.inlineCompletion.enable`). */
function inlineCompletionEnabled(document: vscode.TextDocument): boolean {
  return vscode.workspace.getConfiguration('agentLs.inlineCompletion', document).get<boolean>('enable', true);
}

/** The forwarding of VS Code's diagnostics to the running client. */
let forwarding: vscode.Disposable | undefined;

async function start(): Promise<void> {
  const command = serverPath();
  if (!command) {
    // Not awaited: activation must not wait for the user to dismiss the message.
    const open = 'Open Settings';
    void vscode.window
      .showErrorMessage(
        'agent-ls: the agent-ls binary was not found on PATH. Install it (cargo install --path .) or set agentLs.server.path.',
        open,
      )
      .then((pick) => {
        if (pick === open) {
          void vscode.commands.executeCommand('workbench.action.openSettings', 'agentLs.server.path');
        }
      });
    return;
  }
  const serverOptions: ServerOptions = { command, args: ['serve'] };
  const clientOptions: LanguageClientOptions = {
    documentSelector: [{ scheme: 'file' }],
    outputChannel: output,
    traceOutputChannel: output,
    initializationOptions: { 'agent-ls': currentSettings(), workspaceTrusted: vscode.workspace.isTrusted },
    middleware: {
      // vscode-languageclient 11 registers the inline completion provider itself once the
      // server advertises `inlineCompletionProvider`; the setting is read at each request, so
      // switching it off takes effect at once, with no restart. VS Code runs the item's
      // command (`agent-ls.completionAccepted`, a server command the client registered) when
      // the whole suggestion is taken.
      provideInlineCompletionItems: (document, position, context, token, next) =>
        inlineCompletionEnabled(document) ? next(document, position, context, token) : null,
    },
  };
  client = new LanguageClient('agentLs', 'agent-ls', serverOptions, clientOptions);
  client.registerFeature(new ProgressWatcher());
  // A diff (the answer to "Show diff" when agentLs.approval is "prompt") or a long answer (an
  // explanation) opens as a document beside the editor; other messages show as VS Code's
  // notifications, as by default.
  client.onNotification(ShowMessageNotification.type, async (m) => {
    if (isDiff(m.message) || (m.type !== MessageType.Error && isLong(m.message))) {
      // An explanation reads best as Markdown; a diff as a diff.
      const language = isDiff(m.message) ? 'diff' : 'markdown';
      const content = m.message.replace(/^agent-ls: /, '');
      const doc = await vscode.workspace.openTextDocument({ content, language });
      await vscode.window.showTextDocument(doc, { viewColumn: vscode.ViewColumn.Beside, preview: true });
      return;
    }
    const show =
      m.type === MessageType.Error
        ? vscode.window.showErrorMessage
        : m.type === MessageType.Warning
          ? vscode.window.showWarningMessage
          : vscode.window.showInformationMessage;
    show(m.message);
  });
  // The server's questions, as by default (a notification with its buttons), except one of
  // several lines (the review question at a run's end: the verdict, then one finding a line),
  // which a notification would run together: it is a picker that lists the lines, and that
  // closes when the server cancels the question (an undo, a rerun or a rollback answered it).
  client.onRequest(ShowMessageRequest.type, async (q, token) => {
    const show =
      q.type === MessageType.Error
        ? vscode.window.showErrorMessage
        : q.type === MessageType.Warning
          ? vscode.window.showWarningMessage
          : vscode.window.showInformationMessage;
    const actions = q.actions ?? [];
    const { message, detail } = questionParts(q.message);
    if (detail !== undefined) {
      const title = await askInPicker(message, detail, actions.map((a) => a.title), token);
      return actions.find((a) => a.title === title) ?? null;
    }
    return (await show(message, ...actions)) ?? null;
  });
  client.onNotification('agent-ls/testStatus', (s: TestStatus) => {
    shown.tests = s;
    render();
  });
  client.onNotification('agent-ls/runFinished', (r: RunFinished) => {
    shown.run = undefined;
    shown.last = r;
    runView.finished(r);
    render();
    // A run in a worktree this window does not show offers to open it; a run that wrote
    // here has a checkpoint: its message offers to roll it back, commit it, or open a pull
    // request.
    const folders = (vscode.workspace.workspaceFolders ?? []).map((f) => f.uri.fsPath);
    const elsewhere = worktreeElsewhere(r, folders, path.sep);
    if (elsewhere) {
      void offerWorktree(r.run_id, r.status, elsewhere, r.branch);
    } else if (r.checkpoint) {
      void offerActions(execute, r.run_id, `agent-ls: run ${r.run_id} ${r.status}; checkpoint ${r.checkpoint.slice(0, 7)}`);
    }
  });
  client.onNotification('agent-ls/runEvent', (e: RunEvent) => {
    const run = runView.add(e);
    if (e.type === 'token') {
      modelOutput.append(String(e.data.text ?? ''));
    } else if (e.type === 'model_call') {
      modelOutput.appendLine(`\n--- ${e.role}: ${e.data.model} (${e.data.duration_ms} ms)`);
      shown.figures = figures(run.tokens, run.costUsd);
      render();
    } else if (e.type === 'intent') {
      modelOutput.appendLine(`=== ${run.goal} (${run.id})`);
      shown.figures = undefined;
    }
  });
  // Saves the documents an accepted agent edit changed, at the version the server saw, so
  // typing that came after is never saved behind the user's back.
  client.onRequest('agent-ls/saveFiles', async (p: { files: { uri: string; version?: number }[] }) => {
    const saved: string[] = [];
    for (const f of p.files) {
      const uri = client?.protocol2CodeConverter.asUri(f.uri);
      const doc = vscode.workspace.textDocuments.find((d) => d.uri.toString() === uri?.toString());
      if (!doc || (f.version !== undefined && doc.version !== f.version)) {
        continue;
      }
      if (!doc.isDirty || (await doc.save())) {
        saved.push(f.uri);
      }
    }
    return { saved };
  });
  try {
    await client.start();
    output.info(`started ${command}`);
    // VS Code's own diagnostics check the agent's edits (docs/project-lsp.md).
    forwarding?.dispose();
    forwarding = forwardDiagnostics(client);
  } catch (e) {
    vscode.window.showErrorMessage(`agent-ls: the server did not start: ${message(e)}`);
  }
}

async function restart(): Promise<void> {
  const old = client;
  client = undefined;
  await old?.stop().catch(() => undefined);
  await start();
}

/** The binary: the setting when given, else `agent-ls` found on PATH. */
function serverPath(): string | undefined {
  // In a workspace VS Code does not trust, a path from its settings is not run: it would be a
  // program the repository chose.
  const inspected = vscode.workspace.getConfiguration('agentLs').inspect<string>('server.path');
  const value = vscode.workspace.isTrusted
    ? (inspected?.workspaceFolderValue ?? inspected?.workspaceValue ?? inspected?.globalValue)
    : inspected?.globalValue;
  const configured = (value ?? '').trim();
  if (configured) {
    return configured;
  }
  const exe = process.platform === 'win32' ? 'agent-ls.exe' : 'agent-ls';
  for (const dir of (process.env.PATH ?? '').split(path.delimiter)) {
    const candidate = path.join(dir, exe);
    try {
      fs.accessSync(candidate, fs.constants.X_OK);
      return candidate;
    } catch {
      // Not in this folder; the next one may have it.
    }
  }
  return undefined;
}

/** The server configuration from the user's `agentLs.*` settings (see settings.ts). */
function currentSettings(): Record<string, unknown> {
  const c = vscode.workspace.getConfiguration('agentLs');
  return serverSettings((key) => c.inspect(key), vscode.workspace.isTrusted);
}

/** Sends the settings again, with VS Code's workspace trust beside them. */
async function sendSettings(): Promise<void> {
  await client?.sendNotification(DidChangeConfigurationNotification.type, {
    settings: { 'agent-ls': currentSettings(), workspaceTrusted: vscode.workspace.isTrusted },
  });
}

/** Runs one of the server's commands, showing its error (a refusal says why) to the user. */
async function execute(command: string, args?: unknown): Promise<unknown> {
  if (!client?.isRunning()) {
    vscode.window.showErrorMessage('agent-ls: the server is not running (Agent: Restart Server).');
    return undefined;
  }
  try {
    return await client.sendRequest(ExecuteCommandRequest.type, {
      command,
      arguments: args === undefined ? [] : [args],
    });
  } catch (e) {
    vscode.window.showErrorMessage(`agent-ls: ${message(e)}`);
    return undefined;
  }
}

async function runCommand(): Promise<void> {
  const goal = await vscode.window.showInputBox({
    title: 'Agent: Run',
    prompt: 'What should the agent do? ("fix the failing tests", "implement this", "explain this")',
    ignoreFocusOut: true,
  });
  if (!goal?.trim()) {
    return;
  }
  const args: Record<string, unknown> = { goal: goal.trim() };
  const editor = vscode.window.activeTextEditor;
  if (editor && client && !editor.selection.isEmpty) {
    args.uri = client.code2ProtocolConverter.asUri(editor.document.uri);
    args.range = client.code2ProtocolConverter.asRange(editor.selection);
  }
  // A goal that names a command ("undo", "status", "run `make lint`") is done by the server
  // at once and answered with `routed`.
  const answer = (await execute('agent-ls.run', args)) as { routed?: string; command?: string } | undefined;
  if (answer?.routed === 'agent-ls.status') {
    await statusCommand();
  } else if (answer?.routed === 'command') {
    info(`running ${answer.command}; its failures arrive as problems`);
  }
}

/** "Agent: Run Skill…": a pick among the skills the server found, then what to do with it. */
async function runSkillCommand(): Promise<void> {
  const skills = (await execute('agent-ls.skills')) as { name: string; description: string }[] | undefined;
  if (!skills) {
    return;
  }
  if (skills.length === 0) {
    info('no skills: add .agents/skills/NAME/SKILL.md (docs/skills.md)');
    return;
  }
  const picked = await vscode.window.showQuickPick(
    skills.map((s) => ({ label: s.name, detail: s.description })),
    { title: 'Agent: Run Skill', ignoreFocusOut: true },
  );
  if (!picked) {
    return;
  }
  const request = await vscode.window.showInputBox({
    title: `Agent: Run Skill ${picked.label}`,
    prompt: 'For what? (optional)',
    ignoreFocusOut: true,
  });
  if (request === undefined) {
    return;
  }
  const args: Record<string, unknown> = { name: picked.label, request: request.trim() };
  const editor = vscode.window.activeTextEditor;
  if (editor && client) {
    args.uri = client.code2ProtocolConverter.asUri(editor.document.uri);
  }
  await execute('agent-ls.runSkill', args);
}

function info(text: string): void {
  vscode.window.showInformationMessage(`agent-ls: ${text}`);
}

/**
 * agent-ls.rewind (docs/rewind.md): the step (the run view's, or one picked among the applied
 * steps), then what to do instead; the server takes the step's run back to it, code and
 * conversation together, and starts the new run, whose events the run view shows.
 */
async function rewindCommand(n?: unknown): Promise<void> {
  let step = typeof n === 'number' ? n : (n as { step?: number } | undefined)?.step;
  if (step === undefined) {
    const status = (await execute('agent-ls.status')) as Status | undefined;
    const picks = (status?.steps ?? [])
      .filter((s) => !s.undone)
      .map((s) => ({ label: `step ${s.id}: ${s.goal}`, description: s.files.join(', '), step: s.id }));
    if (picks.length === 0) {
      vscode.window.showInformationMessage('agent-ls: no applied step to rewind to.');
      return;
    }
    step = (await vscode.window.showQuickPick(picks, { title: 'agent-ls: rewind to which step?' }))?.step;
  }
  if (step === undefined) {
    return;
  }
  const goal = await vscode.window.showInputBox({
    title: `agent-ls: rewind to step ${step}`,
    prompt: "What to do instead from there: the run's later steps are undone, and the model reads its conversation up to the step",
  });
  if (!goal) {
    return;
  }
  const answer = (await execute('agent-ls.rewind', { step, goal })) as
    | { run_id: string; rewound: { run_id: string; step: number; files: string[] } }
    | undefined;
  if (answer?.rewound) {
    const r = answer.rewound;
    vscode.window.showInformationMessage(
      `agent-ls: rewound run ${r.run_id} to step ${r.step} (${r.files.join(', ') || 'no files'}); running: ${goal}`,
    );
  }
}

async function statusCommand(): Promise<void> {
  const status = (await execute('agent-ls.status')) as Status | undefined;
  if (!status) {
    return;
  }
  type Item = vscode.QuickPickItem & { action?: () => unknown };
  const items: Item[] = [];
  if (status.active) {
    items.push({
      label: `$(sync~spin) ${status.active.goal}`,
      description: status.active.run_id,
      detail: 'running: pick to cancel',
      action: () => execute('agent-ls.cancel'),
    });
  }
  for (const run of status.interrupted ?? []) {
    items.push({
      label: `$(debug-pause) ${run.goal}`,
      description: run.run_id,
      detail: `interrupted after ${run.iterations} iteration(s): pick to resume`,
      action: () => execute('agent-ls.resume', { run_id: run.run_id }),
    });
  }
  if (status.interrupted_unknown) {
    items.push({
      label: `$(warning) interrupted runs: ${status.interrupted_unknown}`,
      detail: 'the store did not answer in time; ask again shortly',
    });
  }
  if (status.last) {
    const l = status.last;
    const tests = l.tests ? `, tests ${l.tests.passed} passed / ${l.tests.failed} failed` : '';
    items.push({
      label: `$(history) last run: ${l.status}`,
      description: l.run_id,
      detail: `${l.iterations} iteration(s), ${l.files_changed.length} file(s) changed${tests}: pick to show its log`,
      action: () => showRunLog(),
    });
  }
  if (status.last?.checkpoint) {
    const l = status.last;
    const at = `checkpoint ${status.last.checkpoint.slice(0, 7)}`;
    items.push(
      { label: '$(discard) roll back the last run', description: at, action: () => rollback(execute, l.run_id) },
      { label: '$(git-commit) commit the last run', description: l.run_id, action: () => gitAction(execute, 'agent-ls.commit', l.run_id) },
      { label: '$(git-pull-request) open a pull request for the last run', description: l.run_id, action: () => gitAction(execute, 'agent-ls.pr', l.run_id) },
    );
  }
  for (const step of status.steps) {
    items.push({
      label: `${step.undone ? '$(redo)' : '$(discard)'} step ${step.id}: ${step.goal}`,
      description: step.files.join(', '),
      detail: step.undone ? 'undone: pick to redo' : 'pick to undo this step',
      action: () => (step.undone ? execute('agent-ls.redo') : execute('agent-ls.undo', { step: step.id })),
    });
  }
  if (items.length === 0) {
    vscode.window.showInformationMessage('agent-ls: idle, no runs yet.');
    return;
  }
  const pick = await vscode.window.showQuickPick(items, { title: 'agent-ls status' });
  await pick?.action?.();
}

/** The runs with a checkpoint this window saw, newest first, for a pick. */
function runsWithCheckpoints(): RunChoice[] {
  const out: RunChoice[] = runView.runs.runs
    .filter((r) => r.checkpoint)
    .map((r) => ({ runId: r.id, goal: r.goal, checkpoint: r.checkpoint }));
  const last = shown.last;
  if (last?.checkpoint && !out.some((r) => r.runId === last.run_id)) {
    out.push({ runId: last.run_id, goal: '', checkpoint: last.checkpoint });
  }
  return out;
}

/** Agent: Roll back run: the run given, or picked among the recent ones (the server's latest when none). */
async function rollbackCommand(arg?: unknown): Promise<void> {
  let runId = runIdOf(arg);
  if (!runId) {
    const picked = await pickRun(runsWithCheckpoints(), 'Agent: Roll back run');
    if (picked === null) return;
    runId = picked;
  }
  await rollback(execute, runId);
}

async function gitCommand(command: 'agent-ls.commit' | 'agent-ls.pr', arg?: unknown): Promise<void> {
  let runId = runIdOf(arg);
  if (!runId) {
    const picked = await pickRun(runsWithCheckpoints(), command === 'agent-ls.commit' ? 'Agent: Commit Run' : 'Agent: Create Pull Request');
    if (picked === null) return;
    runId = picked;
  }
  await gitAction(execute, command, runId);
}

/** Opens the journal of the last run (.agent-ls/runs/<time>-<run_id>.jsonl). */
async function showRunLog(): Promise<void> {
  const status = (await execute('agent-ls.status')) as Status | undefined;
  const runId = status?.active?.run_id ?? status?.last?.run_id;
  for (const folder of vscode.workspace.workspaceFolders ?? []) {
    const dir = path.join(folder.uri.fsPath, '.agent-ls', 'runs');
    let names: string[];
    try {
      names = fs.readdirSync(dir).filter((n) => n.endsWith('.jsonl')).sort();
    } catch {
      continue;
    }
    const name = runId ? names.find((n) => n.endsWith(`-${runId}.jsonl`)) : names[names.length - 1];
    if (name) {
      const doc = await vscode.workspace.openTextDocument(path.join(dir, name));
      await vscode.window.showTextDocument(doc, { preview: true });
      return;
    }
  }
  output.show(true);
  vscode.window.showInformationMessage('agent-ls: no run journal yet; the server log is in the output channel.');
}

/**
 * Watches the server's work-done progress so the status bar can show a run's step, and shows
 * a run's progress as a notification with a Cancel button (window/workDoneProgress/cancel).
 * It replaces the client's default progress handler, registered before it.
 */
class ProgressWatcher implements StaticFeature {
  getState() {
    return { kind: 'static' as const };
  }
  fillClientCapabilities(capabilities: {
    window?: { workDoneProgress?: boolean };
    experimental?: Record<string, unknown>;
  }): void {
    capabilities.window = { ...capabilities.window, workDoneProgress: true };
    // Our own: the extension answers agent-ls/saveFiles and forwards VS Code's diagnostics
    // as agent-ls/editorDiagnostics (docs/lsp-extensions.md).
    capabilities.experimental = {
      ...capabilities.experimental,
      agentLs: { saveFiles: true, forwardsDiagnostics: true },
    };
  }
  initialize(): void {
    const c = client;
    if (!c) {
      return;
    }
    c.onRequest(WorkDoneProgressCreateRequest.type, (params: WorkDoneProgressCreateParams) => watch(c, params.token));
  }
  clear(): void {
    shown.run = undefined;
    render();
  }
}

function watch(c: LanguageClient, token: ProgressToken): void {
  const isRun = String(token).startsWith('agent-ls/run/');
  let report: ((m: string) => void) | undefined;
  let finish: (() => void) | undefined;
  const done = new Promise<void>((resolve) => (finish = resolve));
  const sub = c.onProgress(WorkDoneProgress.type, token, (value) => {
    const msg = (value as WorkDoneProgressBegin | WorkDoneProgressReport).message;
    if (value.kind === 'end') {
      if (isRun) {
        shown.run = undefined;
      }
      sub.dispose();
      finish?.();
    } else if (isRun && msg) {
      shown.run = msg;
      report?.(msg);
    }
    render();
  });
  vscode.window.withProgress(
    {
      location: isRun ? vscode.ProgressLocation.Notification : vscode.ProgressLocation.Window,
      title: isRun ? 'agent-ls' : 'agent-ls tests',
      cancellable: true,
    },
    (progress, cancel) => {
      report = (m) => progress.report({ message: m });
      // The server cancels exactly this run (or test run) on the progress's own token.
      cancel.onCancellationRequested(() => {
        c.sendNotification(WorkDoneProgressCancelNotification.type, { token }).catch(() => undefined);
      });
      return done;
    },
  );
}

/** Opens a proposed change's diff beside the editor. */
async function openDiff(arg?: unknown): Promise<void> {
  // A click passes the diff; the context menu passes the row, whose click command holds it.
  const diff = typeof arg === 'string' ? arg : (arg as vscode.TreeItem | undefined)?.command?.arguments?.[0];
  if (typeof diff !== 'string' || !diff) {
    return;
  }
  const doc = await vscode.workspace.openTextDocument({ content: diff, language: 'diff' });
  await vscode.window.showTextDocument(doc, { viewColumn: vscode.ViewColumn.Beside, preview: true });
}

function render(): void {
  if (shown.run) {
    bar.text = `$(sync~spin) agent: ${shown.run}${shown.figures ? ` · ${shown.figures}` : ''}`;
    bar.tooltip = 'agent-ls: a run is going on (click for status, Agent: Cancel to stop it)';
    return;
  }
  const t = shown.tests;
  if (t) {
    const counts = [t.passed !== null ? `${t.passed} passed` : '', t.failed ? `${t.failed} failed` : '']
      .filter(Boolean)
      .join(', ');
    const icon: Record<TestStatus['state'], string> = {
      running: '$(sync~spin)',
      passed: '$(pass)',
      failed: '$(error)',
      timed_out: '$(watch)',
      cancelled: '$(circle-slash)',
      error: '$(warning)',
    };
    // An environment problem says nothing about the code: it is not "tests failed".
    bar.text =
      t.state === 'error'
        ? `${icon.error} tests did not run`
        : `${icon[t.state]} tests ${t.state.replace('_', ' ')}${counts ? `: ${counts}` : ''}`;
    bar.tooltip = t.message ?? t.command ?? undefined;
    return;
  }
  bar.text = '$(hubot) agent-ls';
  bar.tooltip = shown.last ? `agent-ls: last run ${shown.last.status}` : 'agent-ls: idle';
}

function message(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
