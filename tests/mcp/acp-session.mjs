// The official TypeScript ACP SDK as an editor driving one `agent-ls acp` session through a
// list of steps, for the cross-surface scenarios (tests/it/surfaces.rs). It offers
// fs/read_text_file and fs/write_text_file over the files on disk, answers each
// session/request_permission as ACP_ANSWER says, and prints what each step said as JSON.
// Usage: node acp-session.mjs AGENT_LS_BINARY WORKSPACE STEPS_JSON
//   STEPS_JSON: [{"prompt": TEXT} | {"write": [PATH, TEXT]}, ...] (PATH relative to WORKSPACE)
//   ACP_ANSWER: allow | reject | "delete:PATH" (delete PATH, then allow: the file goes away
//   while its edit waits for the answer)
import { spawn } from "node:child_process";
import { unlinkSync, writeFileSync } from "node:fs";
import { readFileSync } from "node:fs";
import { Readable, Writable } from "node:stream";
import { client, methods, ndJsonStream } from "@agentclientprotocol/sdk";

const [binary, workspace, stepsJson] = process.argv.slice(2);
const answer = process.env.ACP_ANSWER || "allow";
const child = spawn(binary, ["acp"], { stdio: ["pipe", "pipe", "inherit"], env: process.env });
const stream = ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
const seen = { turns: [], permissions: [] };
let text = [];

const app = client({ name: "agent-ls-test" })
  .onRequest(methods.client.session.requestPermission, ({ params }) => {
    seen.permissions.push(params);
    if (answer.startsWith("delete:")) {
      unlinkSync(`${workspace}/${answer.slice(7)}`);
    }
    const wanted = answer === "reject" ? "reject" : "allow";
    const option = params.options.find((o) => o.kind.startsWith(wanted)) ?? params.options[0];
    return { outcome: { outcome: "selected", optionId: option.optionId } };
  })
  .onRequest(methods.client.fs.readTextFile, ({ params }) => ({ content: readFileSync(params.path, "utf8") }))
  .onRequest(methods.client.fs.writeTextFile, ({ params }) => {
    writeFileSync(params.path, params.content);
    return {};
  })
  .onNotification(methods.client.session.update, ({ params }) => {
    const u = params.update;
    if (u.sessionUpdate === "agent_message_chunk" && u.content?.type === "text") {
      text.push(u.content.text);
    }
  });

await app.connectWith(stream, async (agent) => {
  await agent.request(methods.agent.initialize, {
    protocolVersion: 1,
    clientCapabilities: { fs: { readTextFile: true, writeTextFile: true } },
  });
  const { sessionId } = await agent.request(methods.agent.session.new, { cwd: workspace, mcpServers: [] });
  for (const step of JSON.parse(stepsJson)) {
    if (step.write) {
      writeFileSync(`${workspace}/${step.write[0]}`, step.write[1]);
      continue;
    }
    text = [];
    const { stopReason } = await agent.request(methods.agent.session.prompt, {
      sessionId, prompt: [{ type: "text", text: step.prompt }],
    });
    // The SDK may hand the turn's last updates to their handler after the answer resolves.
    await new Promise((r) => setTimeout(r, 200));
    seen.turns.push({ stop: stopReason, text: text.join("") });
  }
});
child.kill();
console.log(JSON.stringify(seen));
