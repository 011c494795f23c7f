// One code-server with the built .vsix installed, for the end-to-end scenarios (e2e.mjs).
// Starting code-server and installing the extension cost each scenario about ten seconds of
// CPU, so tests/it/vscode.rs starts one for all of them: run as a program, this prints
// {"url", "userData", "log"} as one JSON line, and stops code-server (its whole process
// group) and removes its folders when its stdin closes, which happens when the test process
// ends however it ends. e2e.mjs run alone imports `startCodeServer` and starts its own.
//
// Environment: CODE_SERVER (the code-server script), NODE24 (folder of a Node 24 binary), VSIX.

import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set`);
  return v;
};

async function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
    s.on('error', reject);
  });
}

/** Installs the .vsix and starts code-server on 127.0.0.1; resolves once it answers. */
export async function startCodeServer() {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'agent-ls-vscode-'));
  const userData = path.join(tmp, 'user-data');
  const extensions = path.join(tmp, 'extensions');
  const log = path.join(tmp, 'code-server.log');
  fs.mkdirSync(path.join(userData, 'User'), { recursive: true });
  const childEnv = {
    ...process.env,
    PATH: `${env('NODE24')}:${process.env.PATH}`,
    XDG_CONFIG_HOME: path.join(tmp, 'config'),
    XDG_DATA_HOME: path.join(tmp, 'data'),
    XDG_CACHE_HOME: path.join(tmp, 'cache'),
  };
  const common = ['--user-data-dir', userData, '--extensions-dir', extensions];
  const install = spawnSync(env('CODE_SERVER'), [...common, '--install-extension', env('VSIX')], {
    env: childEnv,
    encoding: 'utf8',
  });
  if (install.status !== 0) {
    throw new Error(`the .vsix did not install: ${(install.stdout + install.stderr).trim().slice(-300)}`);
  }
  const port = await freePort();
  const out = fs.openSync(log, 'a');
  const server = spawn(
    env('CODE_SERVER'),
    [
      ...common,
      '--auth', 'none',
      '--bind-addr', `127.0.0.1:${port}`,
      '--disable-telemetry',
      '--disable-update-check',
      '--disable-workspace-trust',
      '--disable-getting-started-override',
      // A scenario's window is closed when it ends: its extension host (and the agent-ls
      // server it started) goes a few seconds later, not after the 3 hours VS Code waits for a
      // reconnection.
      '--reconnection-grace-time', '5',
    ],
    { env: childEnv, stdio: ['ignore', out, out], detached: true },
  );
  const url = `http://127.0.0.1:${port}`;
  const end = Date.now() + 60000;
  for (;;) {
    try {
      if ((await fetch(`${url}/healthz`)).ok) break;
    } catch {
      // Not listening yet.
    }
    if (Date.now() > end || server.exitCode !== null) {
      throw new Error(`code-server did not answer: ${fs.readFileSync(log, 'utf8').slice(-2000)}`);
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  const stop = () => {
    try {
      process.kill(-server.pid, 'SIGKILL');
    } catch {
      // Already gone.
    }
    fs.rmSync(tmp, { recursive: true, force: true });
  };
  return { url, userData, log, stop };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const server = await startCodeServer();
  console.log(JSON.stringify({ url: server.url, userData: server.userData, log: server.log }));
  process.stdin.on('data', () => undefined);
  process.stdin.on('end', () => {
    server.stop();
    process.exit(0);
  });
}
