// Inline completion (ghost text) in real VS Code, for e2e.mjs's scenarios "inline" and
// "inline_stale": the server's suggestion from the stub FIM model (tests/it/vscode.rs) shows as
// ghost text while typing, Ctrl+Right takes its next word, Tab takes the rest, and VS Code runs
// the item's accept command; in "inline_stale" the stub holds its answer to the first keystroke
// while the user types on, and that answer must never show.
import fs from 'node:fs';
import path from 'node:path';

/** The ghost text shown now, Monaco's no-break spaces as spaces. */
async function ghost(page) {
  const parts = await page.locator('.monaco-editor .ghost-text-decoration, .monaco-editor .ghost-text').allInnerTexts();
  return parts.join('').replace(/\u00a0/g, ' ');
}

/** Runs the scenario on main.py (open in the editor); `check` records each step. */
export async function inlineScenario({ page, ws, userData, scenario, check, until, screenshot, palette }) {
  const file = path.join(ws, 'main.py');
  let staleSeen = '';
  // Every wait also watches for the held answer's text, so it cannot show unseen.
  const watch = (what, fn, ms) =>
    until(what, async () => {
      const g = await ghost(page);
      if (g.includes('STALE')) staleSeen = g;
      return fn(g);
    }, ms);

  // The cursor at the end of line 2 (its indentation), through Go to Line.
  await page.locator('.monaco-editor .view-lines', { hasText: 'def add' }).first().click();
  await page.keyboard.press('Control+G');
  await page.waitForSelector('.quick-input-widget input:focus', { timeout: 10000 });
  await page.keyboard.type('2');
  await page.keyboard.press('Enter');
  await page.keyboard.press('End');
  await page.keyboard.type('r');

  if (scenario === 'inline_stale') {
    const held = path.join(ws, '.stub-1');
    await watch('the first request at the model', () => fs.existsSync(held), 20000);
    check('the first keystroke\'s request reaches the model, which holds its answer', true);
    await page.keyboard.type('e');
    const fresh = await watch('the suggestion for what was typed', (g) => (g.includes('turn a + b') ? g : false), 20000);
    check('the suggestion for what was typed since shows as ghost text', true, fresh);
    await watch('the held answer sent', () => fs.existsSync(path.join(ws, '.stub-done-1')), 20000);
    const until_ = Date.now() + 1000;
    await watch('a second after it', () => Date.now() > until_, 5000);
    check('the answer that came after the user typed on is never shown', !staleSeen, staleSeen);
  } else {
    const shown = await watch('ghost text', (g) => (g.includes('eturn a + b') ? g : false), 30000);
    check('the suggestion shows as ghost text after the cursor', true, shown);
    await screenshot('vscode-inline-completion.png');
    // VS Code's own word-by-word accept (editor.action.inlineSuggest.acceptNextWord).
    await page.keyboard.press('Control+ArrowRight');
    const rest = await watch('the rest after a word', (g) => (g.includes('a + b') && !g.includes('eturn') ? g : false), 10000);
    check('Ctrl+Right takes the next word, the rest stays as ghost text', true, rest);
  }

  await page.keyboard.press('Tab');
  await page.keyboard.press('Control+S');
  const saved = await until('main.py saved with the suggestion', () => {
    const text = fs.readFileSync(file, 'utf8');
    return text.includes('    return a + b\n') ? text : false;
  }, 20000);
  check('Tab accepts it into the document', true, saved.split('\n')[1]);
  const journal = path.join(ws, '.agent-ls', 'completions.jsonl');
  const accepted = await until('the acceptance journaled', () => {
    const text = fs.existsSync(journal) ? fs.readFileSync(journal, 'utf8') : '';
    return text.includes('"accepted"') ? text : false;
  }, 20000);
  check('VS Code ran the item\'s command: the acceptance is counted', true, accepted.trim().split('\n').length + ' events');
  // Whether the word taken is counted as a partial accept depends on VS Code asking again
  // after it (it may keep showing the same item instead), so it is not checked here.
  check('the held answer never showed', !staleSeen, staleSeen);
  if (scenario === 'inline') {
    await switchedOff({ page, ws, userData, palette, check, until });
  }
}

/**
 * With `agentLs.inlineCompletion.enable` turned off in the Settings editor, as a user would,
 * typing on asks the model nothing and shows nothing.
 */
async function switchedOff({ page, ws, userData, palette, check, until }) {
  await palette('Preferences: Open User Settings');
  // The search box is a small editor of its own; a click on it focuses it.
  const search = page.locator('.settings-editor .suggest-input-container').first();
  await search.waitFor({ timeout: 20000 });
  await search.click();
  await page.keyboard.type('agentLs.inlineCompletion.enable');
  const box = page.locator('.settings-editor .setting-item-bool .setting-value-checkbox').first();
  await box.waitFor({ timeout: 20000 });
  await until('the setting on screen', async () => (await box.getAttribute('aria-checked')) === 'true', 10000);
  await box.click();
  await until('the setting off', async () => (await box.getAttribute('aria-checked')) === 'false', 10000);
  const file = path.join(userData, 'User', 'settings.json');
  // The Settings editor writes the file a moment later, and the extension host learns of it
  // after that.
  await until('the settings file', () => fs.readFileSync(file, 'utf8').includes('"agentLs.inlineCompletion.enable": false'), 20000);
  check('agentLs.inlineCompletion.enable is switched off in the Settings editor', true);
  await new Promise((r) => setTimeout(r, 3000));
  // The Settings editor opens as a modal here: Escape closes it.
  await page.keyboard.press('Escape');
  await until('the settings closed', async () => !(await page.locator('.monaco-modal-editor-block').isVisible()), 10000);
  await page.locator('.monaco-editor .view-lines', { hasText: 'def add' }).first().click();
  const count = path.join(ws, '.stub-count');
  const asked = () => Number(fs.existsSync(count) ? fs.readFileSync(count, 'utf8') : 0);
  const before = asked();
  await page.keyboard.press('Control+End');
  await page.keyboard.press('Enter');
  await page.keyboard.type('r');
  let shown = '';
  const end = Date.now() + 3000;
  await until('three seconds', async () => {
    shown = shown || (await ghost(page));
    return Date.now() > end;
  }, 10000);
  check('with agentLs.inlineCompletion.enable off, typing asks the model nothing and shows nothing',
    asked() === before && !shown, `requests ${before} -> ${asked()}, shown ${JSON.stringify(shown)}`);
}
