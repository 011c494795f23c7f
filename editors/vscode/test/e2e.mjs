// The extension in real VS Code (code-server in headless Chromium, driven by playwright-core):
// installs the built .vsix, opens a fixture project, runs "Agent: Fix Failing Tests" from the
// palette, accepts the refactor preview, and checks the file, the status bar and the problems.
// Run by tests/vscode.rs; every check is written to $RESULT as one JSON line.
//
// Environment: CODE_SERVER (the code-server script), NODE24 (folder of a Node 24 binary),
// CHROMIUM, VSIX, AGENT_LS (the server binary), WORKSPACE (the project), RESULT, ARTIFACTS
// (where a screenshot goes when a step fails).

import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set`);
  return v;
};
const ws = env('WORKSPACE');
// "accept" (the default): apply the preview, then undo and redo; "reject": discard it;
// "explain": ask a question through Agent: Run….
const scenario = process.env.SCENARIO ?? 'accept';
class Done extends Error {}
const result = env('RESULT');
const artifacts = process.env.ARTIFACTS ?? os.tmpdir();

function check(name, ok, detail) {
  fs.appendFileSync(result, JSON.stringify({ name, ok: !!ok, detail: detail ?? null }) + '\n');
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${name}${detail ? ` (${detail})` : ''}`);
}

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

async function until(what, fn, ms = 30000) {
  const end = Date.now() + ms;
  let last;
  while (Date.now() < end) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) {
      last = e;
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`timed out waiting for ${what} (last: ${last})`);
}

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'agent-ls-vscode-'));
const userData = path.join(tmp, 'user-data');
const extensions = path.join(tmp, 'extensions');
fs.mkdirSync(path.join(userData, 'User'), { recursive: true });
// Settings a user would set: the server binary and, for this test, the replay model.
fs.writeFileSync(
  path.join(userData, 'User', 'settings.json'),
  JSON.stringify({
    'agentLs.server.path': env('AGENT_LS'),
    'agentLs.settings': { model: { provider: 'replay', replay_file: '.replay.jsonl' } },
    'agentLs.log.level': 'debug',
    'workbench.startupEditor': 'none',
    'files.hotExit': 'off',
    'security.workspace.trust.enabled': false,
    'workbench.tips.enabled': false,
    'extensions.autoUpdate': false,
    'extensions.autoCheckUpdates': false,
    'telemetry.telemetryLevel': 'off',
    'chat.disableAIFeatures': true,
  }),
);

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
check('the .vsix installs', install.status === 0, (install.stdout + install.stderr).trim().slice(-300));

const port = await freePort();
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
    ws,
  ],
  { env: childEnv, stdio: ['ignore', 'pipe', 'pipe'], detached: true },
);
let serverLog = '';
server.stdout.on('data', (d) => (serverLog += d));
server.stderr.on('data', (d) => (serverLog += d));

let browser;
let page;
let failed = false;
try {
  await until('code-server', async () => (await fetch(`http://127.0.0.1:${port}/healthz`)).ok);
  browser = await chromium.launch({
    executablePath: env('CHROMIUM'),
    args: [
      '--headless', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage',
      '--disable-background-networking', '--disable-component-update', '--disable-sync',
      '--no-first-run',
    ],
  });
  const context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
  page = await context.newPage();
  await page.goto(`http://127.0.0.1:${port}/?folder=${encodeURIComponent(ws)}`);
  await page.waitForSelector('.monaco-workbench', { timeout: 60000 });

  // The extension starts on startup and shows its status-bar item.
  const bar = page.locator('.statusbar-item', { hasText: /agent-ls|tests/ }).first();
  await bar.waitFor({ timeout: 60000 });
  check('the status bar shows agent-ls', true, await bar.innerText());

  // Open the file the agent will fix, as a user would (Quick Open).
  await page.keyboard.press('Control+P');
  await page.keyboard.type('calc.py');
  await page.waitForSelector('.quick-input-list .monaco-list-row');
  await page.keyboard.press('Enter');
  await page.waitForSelector('.monaco-editor .view-lines:has-text("def add")', { timeout: 20000 });

  const palette = async (title) => {
    for (let attempt = 0; attempt < 3; attempt++) {
      await page.keyboard.press('F1');
      try {
        await page.waitForSelector('.quick-input-widget input', { state: 'visible', timeout: 5000 });
        break;
      } catch {
        // The first key can race the editor's focus; try again.
      }
    }
    await page.keyboard.type(title);
    const row = page.locator('.quick-input-list .monaco-list-row', { hasText: title }).first();
    await row.waitFor({ timeout: 10000 });
    await page.keyboard.press('Enter');
  };

  if (scenario === 'explain') {
    // Agent: Run… asks for the goal; a question is answered without editing, and the long
    // answer opens as a Markdown document beside the code.
    await palette('Agent: Run…');
    // The palette's own box closes as the goal's opens: wait for the goal's, by its prompt,
    // so the typing cannot land in the editor between the two.
    await page.waitForSelector('.quick-input-widget:has-text("What should the agent do")', { state: 'visible', timeout: 10000 });
    await page.waitForSelector('.quick-input-widget input:focus', { timeout: 10000 });
    await page.keyboard.type('explain what add does');
    await page.keyboard.press('Enter');
    const shown = await until('the explanation as a document', async () => {
      const texts = await page.locator('.monaco-editor .view-lines').allInnerTexts();
      return texts.map((t) => t.replace(/\u00a0/g, ' ')).find((t) => t.includes('It subtracts instead')) ?? false;
    }, 30000);
    check('the explanation opens as a document', true, shown.replace(/\s+/g, ' ').slice(0, 120));
    const tabs = await page.locator('.tabs-container .tab').allInnerTexts();
    check('beside the code, which stays open', tabs.some((t) => t.replace(/\s+/g, '').includes('calc.py')), JSON.stringify(tabs));
    check('nothing was edited', fs.readFileSync(path.join(ws, 'calc.py'), 'utf8').includes('return a - b'));
    throw new Done();
  }

  await palette('Agent: Fix Failing Tests');

  // The baseline run fails first: its failure shows in the problems while the agent works.
  // The problems item of the status bar reads "2 errors, 0 warnings" or similar; it is found
  // by its label rather than an id, which changed between VS Code versions.
  // (VS Code 1.139 says "Errors: 2"; others "2 errors, 0 warnings" or "No Problems".)
  const problemCount = async () => {
    const labels = await page.$$eval('.statusbar-item, .statusbar-item a', (els) =>
      els.map((e) => e.getAttribute('aria-label') ?? ''),
    );
    const label = labels.find((l) => /problems|errors?\b/i.test(l)) ?? '';
    const m = label.match(/errors?:\s*(\d+)|(\d+) errors?/i);
    const count = m ? Number(m[1] ?? m[2]) : -1;
    return { label, errors: /no problems/i.test(label) ? 0 : count, labels };
  };
  let seen = [];
  const errors = await until('the failing test as a problem', async () => {
    const p = await problemCount();
    seen = p.labels;
    return p.errors > 0 ? p.label : false;
  }, 60000).catch((e) => {
    throw new Error(`${e.message}; status bar labels: ${JSON.stringify(seen)}`);
  });
  check('the failing test shows as a problem', true, errors);

  // The proposal opens VS Code's refactor preview with nothing ticked: tick, then Apply.
  const panel = page.locator('.bulk-edit-panel');
  await panel.waitFor({ timeout: 60000 });
  check('the proposal opens the refactor preview', true);
  await page.waitForSelector('.bulk-edit-panel .monaco-list-row', { timeout: 20000 });
  const file = path.join(ws, 'calc.py');
  if (scenario === 'reject') {
    // Discard: the editor answers applied: false; nothing changes and the run says why.
    await page.locator('.bulk-edit-panel .buttons .monaco-button', { hasText: 'Discard' }).first().click();
    const said = await until('the rejection message', async () => {
      const texts = await page.locator('.notification-list-item-message').allInnerTexts();
      return texts.find((t) => t.includes('rejected')) ?? false;
    }, 30000);
    check('the run reports the rejection', true, said);
    check('calc.py is unchanged on disk', fs.readFileSync(file, 'utf8').includes('return a - b'));
    const editorText = (await page.locator('.monaco-editor .view-lines').first().innerText()).replace(/\u00a0/g, ' ');
    check('the editor is unchanged', editorText.includes('a - b'), editorText.replace(/\s+/g, ' ').slice(0, 200));
    const p = await problemCount();
    check('the failing test still shows as a problem', p.errors > 0, p.label);
    throw new Done();
  }
  const boxes = page.locator('.bulk-edit-panel .monaco-list-row .edit-checkbox');
  const n = await boxes.count();
  // Ticking the file (the first row) ticks its edits.
  await boxes.first().click();
  const ticked = await until('every change ticked', async () => {
    const states = await boxes.evaluateAll((els) => els.map((e) => e.getAttribute('aria-checked')));
    return states.every((s) => s === 'true') ? states.length : false;
  }, 10000);
  check('the preview lists the change, all ticked with the file', n > 0 && ticked === n, `${n} checkbox(es)`);
  await page.locator('.bulk-edit-panel .buttons .monaco-button', { hasText: 'Apply' }).first().click();

  // The server writes the accepted change to disk, reruns the tests and clears the problem.
  await until('calc.py fixed on disk', () => fs.readFileSync(file, 'utf8').includes('return a + b'), 60000);
  check('calc.py holds the fix on disk', true);
  const cleared = await until('the problems cleared', async () => {
    const p = await problemCount();
    return p.errors === 0 ? p.label : false;
  }, 60000);
  check('the problems clear after the tests pass', true, cleared);
  const passed = await until('the status bar says the tests passed', async () => {
    const t = await page.locator('.statusbar-item', { hasText: 'tests passed' }).first().innerText();
    return t || false;
  }, 30000);
  check('the status bar says the tests passed', true, passed);
  // Monaco renders spaces as no-break spaces.
  const editorText = (await page.locator('.monaco-editor .view-lines').first().innerText()).replace(/\u00a0/g, ' ');
  check('the editor shows the fix', editorText.includes('a + b'), editorText.replace(/\s+/g, ' ').slice(0, 200));

  // Undo and redo from the palette: applied without a preview (the user asked for them), the
  // editor and the disk follow.
  await palette('Agent: Undo');
  await until('the undo on disk', () => fs.readFileSync(file, 'utf8').includes('return a - b'), 30000);
  const undone = await until('the editor shows the undo', async () =>
    (await page.locator('.monaco-editor .view-lines').first().innerText()).replace(/\u00a0/g, ' ').includes('a - b'),
  );
  check('Agent: Undo reverts the step in the editor and on disk', undone);
  await palette('Agent: Redo');
  await until('the redo on disk', () => fs.readFileSync(file, 'utf8').includes('return a + b'), 30000);
  check('Agent: Redo applies it again', true);
} catch (e) {
  if (e instanceof Done) {
    // The scenario ended early, as planned.
  } else {
    failed = true;
    check('the scripted flow', false, String(e && e.stack ? e.stack : e).slice(0, 2000));
    if (page) {
      await page.screenshot({ path: path.join(artifacts, `vscode-e2e-${scenario}.png`) }).catch(() => undefined);
      fs.writeFileSync(path.join(artifacts, `vscode-e2e-${scenario}.html`), await page.content().catch(() => ''));
    }
    fs.writeFileSync(path.join(artifacts, `code-server-${scenario}.log`), serverLog);
  }
} finally {
  await browser?.close().catch(() => undefined);
  try {
    process.kill(-server.pid, 'SIGKILL');
  } catch {
    // Already gone.
  }
  fs.rmSync(tmp, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
