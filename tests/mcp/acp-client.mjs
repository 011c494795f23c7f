// The official TypeScript ACP SDK as the client (the editor) of `agent-ls acp`: it offers
// fs/read_text_file and fs/write_text_file over its own copy of the files (the editor's
// buffers), answers session/request_permission as the scenario says, and prints what it saw
// as one JSON object for tests/it/acp.rs to check.
// Usage: node acp-client.mjs AGENT_LS_BINARY WORKSPACE SCENARIO
//   SCENARIO: allow | reject | cancel | undo (then /redo) | load:RUN_ID | mcp (the session brings the MCP filesystem
//   server, whose path is in ACP_MCP_FS) | rollback (the user edits calc.py's buffer without
//   saving, /rollback is refused, then /rollback force, then /rollback again)
import { spawn } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { Readable, Writable } from "node:stream";
import { client, methods, ndJsonStream } from "@agentclientprotocol/sdk";

const [binary, workspace, scenario] = process.argv.slice(2);
const child = spawn(binary, ["acp"], { stdio: ["pipe", "pipe", "inherit"], env: process.env });
const stream = ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
const seen = { updates: [], permissions: [], reads: [], writes: [] };
// Unsaved buffers: path -> text, read instead of the disk until written.
const buffers = new Map();
let sessionId;
let cancelled = false;

const app = client({ name: "agent-ls-test" })
  .onRequest(methods.client.session.requestPermission, ({ params }) => {
    seen.permissions.push(params);
    const allow = scenario !== "reject";
    return { outcome: { outcome: "selected", optionId: allow ? "allow" : "reject" } };
  })
  .onRequest(methods.client.fs.readTextFile, ({ params }) => {
    seen.reads.push(params.path);
    return { content: buffers.get(params.path) ?? readFileSync(params.path, "utf8") };
  })
  .onRequest(methods.client.fs.writeTextFile, ({ params }) => {
    seen.writes.push(params.path);
    buffers.delete(params.path);
    writeFileSync(params.path, params.content);
    return {};
  })
  .onNotification(methods.client.session.update, ({ params, agent }) => {
    seen.updates.push(params.update);
    // Cancel once the first test run has started (the scenario's test command hangs).
    if (scenario === "cancel" && !cancelled && params.update.sessionUpdate === "tool_call" && params.update.kind === "execute") {
      cancelled = true;
      agent.notify(methods.agent.session.cancel, { sessionId: params.sessionId });
    }
  });

await app.connectWith(stream, async (agent) => {
  seen.initialize = await agent.request(methods.agent.initialize, {
    protocolVersion: 1,
    clientCapabilities: { fs: { readTextFile: true, writeTextFile: true } },
  });
  if (scenario.startsWith("load:")) {
    seen.load = await agent.request(methods.agent.session.load, {
      sessionId: scenario.slice(5), cwd: workspace, mcpServers: [],
    });
    // Give the session's updates, sent before the answer, time to arrive.
    await new Promise((r) => setTimeout(r, 200));
    return;
  }
  const mcpServers = scenario === "mcp"
    ? [{ name: "fs", command: "node", args: [process.env.ACP_MCP_FS, workspace], env: [] }]
    : [];
  const session = await agent.request(methods.agent.session.new, { cwd: workspace, mcpServers });
  sessionId = session.sessionId;
  const prompt = (text) => agent.request(methods.agent.session.prompt, {
    sessionId, prompt: [{ type: "text", text }],
  });
  seen.stop = (await prompt(process.env.ACP_PROMPT || "fix the failing tests")).stopReason;
  if (scenario === "undo") {
    seen.afterFix = readFileSync(`${workspace}/calc.py`, "utf8");
    seen.undoStop = (await prompt("/undo")).stopReason;
    seen.afterUndo = readFileSync(`${workspace}/calc.py`, "utf8");
    seen.redoStop = (await prompt("/redo")).stopReason;
  }
  if (scenario === "rollback") {
    const calc = `${workspace}/calc.py`;
    seen.afterFix = readFileSync(calc, "utf8");
    buffers.set(calc, seen.afterFix + "# unsaved\n");
    seen.refusedStop = (await prompt("/rollback")).stopReason;
    seen.afterRefusal = readFileSync(calc, "utf8");
    seen.forcedStop = (await prompt("/rollback force")).stopReason;
    seen.bufferLeft = buffers.has(calc);
    seen.writesAfterForce = seen.writes.length;
    seen.againStop = (await prompt("/rollback")).stopReason;
  }
});
seen.final = readFileSync(`${workspace}/calc.py`, "utf8");
child.kill();
console.log(JSON.stringify(seen));
