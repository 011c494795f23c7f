//! A real local model behind an OpenAI-compatible chat completions endpoint, on 127.0.0.1, for
//! the real-model tests (tests/it/real_model.rs): node-llama-cpp's prebuilt llama.cpp (npm
//! `@node-llama-cpp/linux-x64`, which picks its CPU variant at run time) runs a GGUF model.
//!
//! Why not llama-cpp-python's server: PyPI has only its source, and compiling llama.cpp
//! portably took 10 to 16 minutes of CI's 2 cores, most of the suite's budget. This file is
//! the HTTP side only: the model, its tokenizer, chat template and grammar-constrained
//! sampling are llama.cpp's.
//!
//! Usage: node server.mjs --model FILE --alias NAME --port N [--threads 1] [--context 4096]
//!
//! It serves what agent-ls's OpenAI client uses: `GET /v1/models`, and `POST
//! /v1/chat/completions` streamed (SSE, with `stream_options.include_usage`) or whole, with
//! `response_format` (`json_schema`, or `json_object` with an optional `schema`) and `tools`
//! with a forced `tool_choice`, both sampled under a grammar made from the JSON schema. Tools
//! without a forced choice are answered with text, as a small model would. And `POST
//! /v1/completions` (whole, not streamed) for inline completion's `openai` provider: the
//! model's own fill-in-the-middle when it has FIM tokens and `suffix` is sent, else a plain
//! continuation of `prompt` (SmolLM2 has none). Requests take turns (one generation at a
//! time), and a client that goes away stops its generation.

import http from "node:http";
import { randomUUID } from "node:crypto";
import { getLlama, LlamaChat, LlamaCompletion } from "node-llama-cpp";

function option(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  if (i >= 0 && i + 1 < process.argv.length) return process.argv[i + 1];
  if (fallback === undefined) {
    console.error(`server.mjs: --${name} is required`);
    process.exit(2);
  }
  return fallback;
}

const modelPath = option("model");
const alias = option("alias");
const port = Number(option("port"));
const threads = Number(option("threads", "1"));
const contextSize = Number(option("context", "4096"));
/** The most one request may read, so a runaway client cannot take the memory. */
const MAX_BODY = 8 * 1024 * 1024;

const llama = await getLlama({ gpu: false, build: "never", logLevel: "warn" });
const model = await llama.loadModel({ modelPath });
// Two sequences: the chat keeps its own, text completions take the other.
const context = await model.createContext({ contextSize, threads, sequences: 2 });
const chat = new LlamaChat({ contextSequence: context.getSequence() });
const text = new LlamaCompletion({ contextSequence: context.getSequence() });

/** A request's fault, answered with 400 and its message. */
class BadRequest extends Error {}

/** The text of an OpenAI message's content: a string, or an array of parts. */
function textOf(content) {
  if (content == null) return "";
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    return content.map((p) => (typeof p === "string" ? p : p?.text ?? "")).join("");
  }
  throw new BadRequest("a message's content is neither a string nor an array of parts");
}

/** OpenAI messages as node-llama-cpp's chat history. Tool calls and their results become
 * text, since the model's template has no place for them; consecutive turns of one speaker
 * are joined, as chat templates expect turns to alternate. */
function historyOf(messages) {
  if (!Array.isArray(messages) || messages.length === 0) {
    throw new BadRequest("messages must be a non-empty array");
  }
  const history = [];
  const push = (type, text) => {
    const last = history[history.length - 1];
    if (last && last.type === type) {
      if (type === "model") last.response[0] += `\n${text}`;
      else last.text += `\n\n${text}`;
    } else if (type === "model") {
      history.push({ type, response: [text] });
    } else {
      history.push({ type, text });
    }
  };
  for (const m of messages) {
    const text = textOf(m?.content);
    switch (m?.role) {
      case "system":
      case "developer":
        push("system", text);
        break;
      case "user":
        push("user", text);
        break;
      case "assistant": {
        const calls = (m.tool_calls ?? []).map(
          (c) => `Called ${c?.function?.name}(${c?.function?.arguments ?? "{}"})`,
        );
        push("model", [text, ...calls].filter((s) => s).join("\n"));
        break;
      }
      case "tool":
        push("user", `The tool call ${m.tool_call_id ?? ""} returned:\n${text}`);
        break;
      default:
        throw new BadRequest(`unknown message role ${JSON.stringify(m?.role)}`);
    }
  }
  history.push({ type: "model", response: [] });
  return history;
}

/** A grammar for `schema`, or for any JSON when llama.cpp's schema grammar cannot take it. */
async function grammarFor(schema) {
  if (schema && typeof schema === "object") {
    try {
      return await llama.createGrammarForJsonSchema(schema);
    } catch (e) {
      console.error(`server.mjs: the schema is sampled as plain JSON (${e.message})`);
    }
  }
  return await llama.getGrammarFor("json");
}

/** A forced call of `fn`: its arguments sampled under its schema, and a system note that
 * says which tool it is, since the chat template has no place for tools. */
async function toolShape(fn) {
  return {
    tool: fn.name,
    grammar: await grammarFor(fn.parameters),
    note: `Answer with the JSON arguments of a call of the tool ${fn.name}: ${fn.description ?? ""}`,
  };
}

/** What the request asks for: a forced tool call, JSON under a schema, or text. */
async function shapeOf(body) {
  const choice = body.tool_choice;
  if (choice && typeof choice === "object") {
    const name = choice.function?.name;
    const tool = (body.tools ?? []).find((t) => t?.function?.name === name);
    if (!tool) throw new BadRequest(`tool_choice names ${JSON.stringify(name)}, which is not in tools`);
    return toolShape(tool.function);
  }
  if (choice === "required" && (body.tools ?? []).length === 1) {
    return toolShape(body.tools[0].function);
  }
  const format = body.response_format;
  if (format?.type === "json_schema") {
    return { grammar: await grammarFor(format.json_schema?.schema) };
  }
  if (format?.type === "json_object") return { grammar: await grammarFor(format.schema) };
  if (format && format.type !== "text") {
    throw new BadRequest(`response_format type ${JSON.stringify(format.type)} is not supported`);
  }
  return {};
}

function promptTokens(history) {
  try {
    const { contextText } = chat.chatWrapper.generateContextState({ chatHistory: history });
    return contextText.tokenize(model.tokenizer).length;
  } catch {
    return 0;
  }
}

/** One completion in `shape`, streamed to `send` piece by piece; resolves to its end. */
async function complete(body, shape, send, signal) {
  const history = historyOf(body.messages);
  if (shape.note) history.splice(history.length - 1, 0, { type: "system", text: shape.note });
  const maxTokens = Math.max(1, Number(body.max_tokens ?? body.max_completion_tokens ?? 512));
  const result = await chat.generateResponse(history, {
    maxTokens,
    // llama.cpp's server defaults, with a fixed seed so a test sees the same answer each time.
    temperature: Number(body.temperature ?? 0.2),
    seed: Number(body.seed ?? 42),
    repeatPenalty: { penalty: 1.1 },
    grammar: shape.grammar,
    signal,
    stopOnAbortSignal: true,
    onTextChunk: (piece) => send(piece),
  });
  const length = result.metadata.stopReason === "maxTokens";
  return {
    text: result.response,
    tool: shape.tool,
    finish: length ? "length" : shape.tool ? "tool_calls" : "stop",
    usage: {
      prompt_tokens: promptTokens(history),
      completion_tokens: model.tokenize(result.response).length,
    },
  };
}

// One generation at a time: each request waits for the one before it.
let turn = Promise.resolve();
function inTurn(work) {
  const mine = turn.then(work, work);
  turn = mine.catch(() => {});
  return mine;
}

function json(res, status, value) {
  res.writeHead(status, { "Content-Type": "application/json" });
  res.end(JSON.stringify(value));
}

function error(res, status, message) {
  json(res, status, { error: { message, type: status === 400 ? "invalid_request_error" : "server_error" } });
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    let size = 0;
    const parts = [];
    req.on("data", (d) => {
      size += d.length;
      if (size > MAX_BODY) {
        reject(new BadRequest(`the request is over ${MAX_BODY} bytes`));
        req.destroy();
      } else parts.push(d);
    });
    req.on("end", () => resolve(Buffer.concat(parts).toString("utf8")));
    req.on("error", reject);
  });
}

async function chatCompletions(req, res) {
  let body;
  try {
    body = JSON.parse(await readBody(req));
  } catch (e) {
    return error(res, 400, e instanceof BadRequest ? e.message : `the body is not JSON (${e.message})`);
  }
  const id = `chatcmpl-${randomUUID()}`;
  const created = Math.floor(Date.now() / 1000);
  const gone = new AbortController();
  res.on("close", () => gone.abort(new Error("the client went away")));
  const chunk = (choices, extra = {}) =>
    `data: ${JSON.stringify({ id, object: "chat.completion.chunk", created, model: alias, choices, ...extra })}\n\n`;
  const callId = `call_${randomUUID().replaceAll("-", "").slice(0, 24)}`;
  let started = false;
  const start = (tool) => {
    if (started) return;
    started = true;
    res.writeHead(200, { "Content-Type": "text/event-stream", "Cache-Control": "no-cache" });
    const delta = tool
      ? { role: "assistant", content: null, tool_calls: [{ index: 0, id: callId, type: "function", function: { name: tool, arguments: "" } }] }
      : { role: "assistant", content: "" };
    res.write(chunk([{ index: 0, delta, finish_reason: null }]));
  };
  try {
    await inTurn(async () => {
      if (gone.signal.aborted) return;
      const stream = body.stream === true;
      // The shape is known before the first piece: a forced tool streams its arguments.
      const shape = await shapeOf(body);
      const tool = shape.tool;
      const send = (piece) => {
        if (!stream || gone.signal.aborted || piece === "") return;
        start(tool);
        const delta = tool
          ? { tool_calls: [{ index: 0, function: { arguments: piece } }] }
          : { content: piece };
        res.write(chunk([{ index: 0, delta, finish_reason: null }]));
      };
      const answer = await complete(body, shape, send, gone.signal);
      const usage = { ...answer.usage, total_tokens: answer.usage.prompt_tokens + answer.usage.completion_tokens };
      if (stream) {
        start(tool);
        res.write(chunk([{ index: 0, delta: {}, finish_reason: answer.finish }]));
        if (body.stream_options?.include_usage) res.write(chunk([], { usage }));
        res.end("data: [DONE]\n\n");
        return;
      }
      const message = answer.tool
        ? { role: "assistant", content: null, tool_calls: [{ id: callId, type: "function", function: { name: answer.tool, arguments: answer.text } }] }
        : { role: "assistant", content: answer.text };
      json(res, 200, { id, object: "chat.completion", created, model: alias, choices: [{ index: 0, message, finish_reason: answer.finish }], usage });
    });
  } catch (e) {
    if (started) {
      res.end(`data: ${JSON.stringify({ error: { message: String(e.message ?? e) } })}\n\n`);
    } else if (!res.headersSent) {
      error(res, e instanceof BadRequest ? 400 : 500, String(e.message ?? e));
    }
  }
}

/** `/v1/completions`: the text that follows `prompt` (or fills up to `suffix`). */
async function textCompletions(req, res) {
  let body;
  try {
    body = JSON.parse(await readBody(req));
  } catch (e) {
    return error(res, 400, e instanceof BadRequest ? e.message : `the body is not JSON (${e.message})`);
  }
  if (typeof body.prompt !== "string") return error(res, 400, "prompt must be a string");
  const gone = new AbortController();
  res.on("close", () => gone.abort(new Error("the client went away")));
  await inTurn(async () => {
    if (gone.signal.aborted) return;
    const stop = [body.stop ?? []].flat().filter((w) => typeof w === "string" && w !== "");
    const options = {
      maxTokens: Math.max(1, Number(body.max_tokens ?? 16)),
      temperature: Number(body.temperature ?? 0.2),
      seed: Number(body.seed ?? 42),
      customStopTriggers: stop,
      signal: gone.signal,
      stopOnAbortSignal: true,
    };
    const fill = typeof body.suffix === "string" && text.infillSupported;
    const answer = fill
      ? await text.generateInfillCompletionWithMeta(body.prompt, body.suffix, options)
      : await text.generateCompletionWithMeta(body.prompt, options);
    const finish = answer.metadata.stopReason === "maxTokens" ? "length" : "stop";
    json(res, 200, {
      id: `cmpl-${randomUUID()}`,
      object: "text_completion",
      created: Math.floor(Date.now() / 1000),
      model: alias,
      choices: [{ index: 0, text: answer.response, finish_reason: finish }],
    });
  });
}

const server = http.createServer((req, res) => {
  const path = (req.url ?? "").split("?")[0];
  if (req.method === "GET" && path === "/v1/models") {
    return json(res, 200, { object: "list", data: [{ id: alias, object: "model", created: 0, owned_by: "local" }] });
  }
  if (req.method === "POST" && path === "/v1/chat/completions") {
    chatCompletions(req, res).catch((e) => {
      if (!res.headersSent) error(res, 500, String(e.message ?? e));
    });
    return;
  }
  if (req.method === "POST" && path === "/v1/completions") {
    textCompletions(req, res).catch((e) => {
      if (!res.headersSent) error(res, 500, String(e.message ?? e));
    });
    return;
  }
  error(res, 404, `no ${req.method} ${path} here`);
});
server.listen(port, "127.0.0.1", () => {
  console.error(`server.mjs: ${alias} from ${modelPath} on http://127.0.0.1:${port}/v1`);
});
for (const signal of ["SIGTERM", "SIGINT"]) {
  process.on(signal, () => {
    server.close();
    process.exit(0);
  });
}
