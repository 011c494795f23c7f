//! How the extension's `agentLs.*` settings become the server's configuration. Pure (no
//! `vscode` import), so it is unit-tested with Node's own test runner.

/** What VS Code's `WorkspaceConfiguration.inspect` tells of one setting. */
export interface Inspected {
  globalValue?: unknown;
  workspaceValue?: unknown;
  workspaceFolderValue?: unknown;
}

/** The settings that map to a server key one to one. */
export const MAPPING: [string, string][] = [
  ['approval', 'agent.approval'],
  ['maxRetries', 'agent.max_retries'],
  ['model.provider', 'model.provider'],
  ['model.name', 'model.name'],
  ['model.baseUrl', 'model.base_url'],
  ['test.command', 'test.command'],
  ['test.onSave', 'test.on_save'],
  ['log.level', 'log.level'],
];

/**
 * Server keys that only the user decides (which secrets reach test processes, whether commands
 * run unconfined): a workspace's `.vscode/settings.json` is a file of the project, so its
 * `agentLs.settings` never sets them, trusted or not, as the server treats `.agent-ls.toml`.
 */
export const USER_ONLY: string[][] = [
  ['test', 'env_allow'],
  ['sandbox', 'mode'],
];

/**
 * The server configuration the user's settings ask for. Only values the user set are sent:
 * the editor's layer outranks the workspace's .agent-ls.toml, so sending VS Code's defaults
 * would silently override the project's own choices. `agentLs.settings` (any server key, in
 * the shape of .agent-ls.toml) is merged over the mapped ones, the user's value first, then
 * the workspace's and the folder's.
 *
 * In a workspace VS Code does not trust, its settings files count for nothing: only the
 * user's own values are sent (a cloned repository's `.vscode/settings.json` must not choose
 * the test command or the model server).
 */
export function serverSettings(
  inspect: (key: string) => Inspected | undefined,
  trusted = true,
): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [setting, key] of MAPPING) {
    const value = explicit(inspect(setting), trusted);
    if (value === undefined || value === '' || (Array.isArray(value) && value.length === 0)) {
      continue;
    }
    setPath(out, key.split('.'), value);
  }
  const extra = inspect('settings');
  const levels = trusted
    ? [extra?.globalValue, withoutUserOnly(extra?.workspaceValue), withoutUserOnly(extra?.workspaceFolderValue)]
    : [extra?.globalValue];
  for (const level of levels) {
    if (isObject(level)) {
      merge(out, level);
    }
  }
  return out;
}

function explicit(i: Inspected | undefined, trusted: boolean): unknown {
  return trusted ? (i?.workspaceFolderValue ?? i?.workspaceValue ?? i?.globalValue) : i?.globalValue;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return !!v && typeof v === 'object' && !Array.isArray(v);
}

/** A copy of a workspace level's `agentLs.settings` without the keys only the user sets. */
function withoutUserOnly(value: unknown): unknown {
  if (!isObject(value)) {
    return value;
  }
  const copy = structuredClone(value);
  for (const [section, key] of USER_ONLY) {
    const table = copy[section];
    if (isObject(table)) {
      delete table[key];
    }
  }
  return copy;
}

function setPath(target: Record<string, unknown>, keys: string[], value: unknown): void {
  let node = target;
  for (const k of keys.slice(0, -1)) {
    if (typeof node[k] !== 'object' || node[k] === null) {
      node[k] = {};
    }
    node = node[k] as Record<string, unknown>;
  }
  node[keys[keys.length - 1]] = value;
}

function merge(target: Record<string, unknown>, extra: Record<string, unknown>): void {
  for (const [k, v] of Object.entries(extra)) {
    const t = target[k];
    if (v && typeof v === 'object' && !Array.isArray(v) && t && typeof t === 'object' && !Array.isArray(t)) {
      merge(t as Record<string, unknown>, v as Record<string, unknown>);
    } else {
      target[k] = v;
    }
  }
}
