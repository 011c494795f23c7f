// agent-ls's reporter for node's test runner (docs/locate.md): one JSON line per test that
// ran, with its file and whether it failed, so agent-ls can run each alone under V8's
// coverage. Suites and tests with subtests are left out (their leaves are listed), and so
// are skipped and todo tests. Nothing of the project is changed: this file lives in
// .agent-ls/locate/.
export default async function* agentLsReporter(source) {
  // Whether a test one level deeper ended since this level's last: then it had subtests.
  const deeper = [];
  for await (const event of source) {
    if (event.type !== 'test:pass' && event.type !== 'test:fail') continue;
    const d = event.data;
    const n = d.nesting || 0;
    const parent = deeper[n + 1] === true;
    deeper[n + 1] = false;
    deeper[n] = true;
    const suite = d.details && d.details.type === 'suite';
    if (parent || suite || d.skip || d.todo) continue;
    yield JSON.stringify({
      agentLsTest: d.name,
      file: d.file || null,
      failed: event.type === 'test:fail',
    }) + '\n';
  }
}
