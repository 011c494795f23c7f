// The official TypeScript MCP SDK as the client of `agent-ls mcp`: makes the calls given as
// JSON ([[tool, arguments], ...]) in one session and prints their results as a JSON array.
// Usage: node mcp-calls.mjs AGENT_LS_BINARY WORKSPACE CALLS_JSON
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [binary, workspace, calls] = process.argv.slice(2);
const transport = new StdioClientTransport({
  command: binary,
  args: ["mcp", "--workspace", workspace],
  env: { PATH: process.env.PATH, HOME: process.env.HOME, XDG_CONFIG_HOME: process.env.XDG_CONFIG_HOME },
  stderr: "inherit",
});
const client = new Client({ name: "agent-ls-test", version: "1.0.0" });
await client.connect(transport);
const out = [];
for (const [name, args] of JSON.parse(calls)) {
  out.push(await client.callTool({ name, arguments: args }));
}
await client.close();
console.log(JSON.stringify(out));
