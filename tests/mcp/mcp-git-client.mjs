// The official TypeScript MCP SDK as the client of `agent-ls mcp` in a git repository: takes
// a checkpoint, then changes the workspace as a calling agent would (an apply_edit, a file
// created and one deleted with its own tools, a file in an ignored folder), rolls back to the
// checkpoint, and prints what came back as one JSON object for tests/it/mcp.rs to check.
// Usage: node mcp-git-client.mjs AGENT_LS_BINARY WORKSPACE
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [binary, workspace] = process.argv.slice(2);
const transport = new StdioClientTransport({
  command: binary,
  args: ["mcp", "--workspace", workspace],
  env: { PATH: process.env.PATH, HOME: process.env.HOME, XDG_CONFIG_HOME: process.env.XDG_CONFIG_HOME },
  stderr: "inherit",
});
const client = new Client({ name: "agent-ls-test", version: "1.0.0" });
await client.connect(transport);
const out = {};
out.tools = (await client.listTools()).tools.filter((t) => ["checkpoint", "rollback"].includes(t.name));
const call = (name, args) => client.callTool({ name, arguments: args });
out.checkpoint = await call("checkpoint", {});
out.edit = await call("apply_edit", {
  edits: "calc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE\n",
});
writeFileSync(`${workspace}/scratch.py`, "X = 1\n");
rmSync(`${workspace}/test_calc.py`);
mkdirSync(`${workspace}/build`, { recursive: true });
writeFileSync(`${workspace}/build/out.o`, "built\n");
out.rollback = await call("rollback", {});
out.unknown = await call("rollback", { run: "run_00000000" });
out.gone = await call("rollback", { run: "mcp_00000000" });
await client.close();
console.log(JSON.stringify(out));
