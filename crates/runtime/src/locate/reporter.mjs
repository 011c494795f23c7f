// agent-ls's reporter for node's test runner (docs/locate.md): one JSON line per test that
// ran, with its file, whether it failed, and the test() parents it runs inside, so agent-ls
// can run each alone under V8's coverage. Suites and tests with subtests are left out (their
// leaves are listed), and so are skipped and todo tests. Nothing of the project is changed:
// this file lives in .agent-ls/locate/.
export default async function* agentLsReporter(source) {
  // The names of the tests running at each nesting level, from their start.
  const running = [];
  // Whether a test one level deeper ended since this level's last: then it had subtests.
  const deeper = [];
  // A suite is known as one only when it ends, after its leaves: the lines wait for the end.
  const suites = new Set();
  const leaves = [];
  for await (const event of source) {
    const d = event.data || {};
    const n = d.nesting || 0;
    if (event.type === 'test:start') {
      running[n] = d.name;
      running.length = n + 1;
      continue;
    }
    if (event.type !== 'test:pass' && event.type !== 'test:fail') continue;
    const parent = deeper[n + 1] === true;
    deeper[n + 1] = false;
    deeper[n] = true;
    const ancestors = running.slice(0, n).map((name, level) => `${level}\u0000${name}`);
    if (d.details && d.details.type === 'suite') suites.add(`${n}\u0000${d.name}`);
    if (parent || d.skip || d.todo || (d.details && d.details.type === 'suite')) continue;
    leaves.push({ name: d.name, file: d.file || null, failed: event.type === 'test:fail', ancestors });
  }
  for (const leaf of leaves) {
    // A suite runs when a test in it matches the name filter; a test() parent must match.
    const parents = leaf.ancestors
      .filter((a) => !suites.has(a))
      .map((a) => a.slice(a.indexOf('\u0000') + 1));
    yield JSON.stringify({ agentLsTest: leaf.name, file: leaf.file, failed: leaf.failed, parents }) + '\n';
  }
}
