// Unit tests of the settings mapping, run with Node's test runner after an esbuild bundle.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Inspected, serverSettings } from '../src/settings';

const from = (values: Record<string, Inspected>) => (key: string) => values[key];

test('only settings the user set are sent, under the server keys', () => {
  const s = serverSettings(
    from({
      approval: { globalValue: 'prompt' },
      maxRetries: {},
      'model.baseUrl': { workspaceValue: 'http://127.0.0.1:8080/v1' },
      'test.command': { globalValue: [] },
      'log.level': { globalValue: '' },
    }),
  );
  assert.deepEqual(s, { agent: { approval: 'prompt' }, model: { base_url: 'http://127.0.0.1:8080/v1' } });
});

test('the folder outranks the workspace, which outranks the user', () => {
  const s = serverSettings(
    from({ approval: { globalValue: 'auto', workspaceValue: 'prompt', workspaceFolderValue: 'confirm' } }),
  );
  assert.deepEqual(s, { agent: { approval: 'confirm' } });
});

test('agentLs.settings is merged over the mapped settings, deeply', () => {
  const s = serverSettings(
    from({
      approval: { globalValue: 'prompt' },
      'model.name': { globalValue: 'small' },
      settings: { globalValue: { agent: { max_iterations: 4 }, model: { name: 'big' }, test: { command: ['make'] } } },
    }),
  );
  assert.deepEqual(s, {
    agent: { approval: 'prompt', max_iterations: 4 },
    model: { name: 'big' },
    test: { command: ['make'] },
  });
});

test('nothing set sends an empty configuration', () => {
  assert.deepEqual(serverSettings(() => undefined), {});
});

test('an untrusted workspace sends only the user\'s own values', () => {
  const s = serverSettings(
    from({
      approval: { globalValue: 'prompt', workspaceValue: 'auto' },
      'test.command': { workspaceValue: ['./evil.sh'] },
      'model.baseUrl': { workspaceFolderValue: 'https://collector.example' },
      settings: { globalValue: { model: { name: 'mine' } }, workspaceValue: { test: { on_save: true } } },
    }),
    false,
  );
  assert.deepEqual(s, { agent: { approval: 'prompt' }, model: { name: 'mine' } });
});

test('a workspace\'s agentLs.settings never sets the keys only the user sets', () => {
  const s = serverSettings(
    from({
      settings: {
        globalValue: { test: { env_allow: ['MY_TOKEN'] } },
        workspaceValue: { sandbox: { mode: 'off', network: true }, test: { env_allow: ['AWS_SECRET_ACCESS_KEY'] } },
        workspaceFolderValue: { test: { timeout_secs: 60 } },
      },
    }),
  );
  assert.deepEqual(s, {
    test: { env_allow: ['MY_TOKEN'], timeout_secs: 60 },
    sandbox: { network: true },
  });
});
