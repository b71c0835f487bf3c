// An OpenAI-compatible HTTP server around llama.cpp (through the
// node-llama-cpp package's prebuilt CPU binaries), so `servesim bench`,
// `validate --measured` and `fit` can be checked against an engine that
// servesim did not write and whose kernels it cannot time.
//
// One llama.cpp context holds --parallel sequences; every request in flight
// owns one and llama.cpp batches their tokens into one decode call of at most
// --batch-size tokens, chosen as vLLM's chunked prefill and servesim's
// `chunked` scheduler choose them: every decoding sequence's next token
// first, then prompt tokens, the oldest prompt first, a long prompt split
// across calls (node-llama-cpp's own default shares the budget evenly among
// the sequences with tokens waiting).
// A request beyond --parallel waits for a free sequence (first come, first
// served). --steps says when a decode call starts:
//   sync (default): once every generating sequence has queued its next
//     token, as llama.cpp's own server and vLLM step: decode the batch,
//     sample every sequence, repeat. Only the call that starts a run of
//     calls waits: node-llama-cpp's batch loop then goes on, under its
//     context lock, with whatever is queued after each call, so steps
//     still split under load;
//   eager: node-llama-cpp's default, on the next event-loop cycle with
//     whatever is queued then. Its samplers finish one by one, so a step
//     splits: the sequences sampled later wait for the next call, which may
//     carry a prompt chunk of a second or more.
//
// Routes: POST /v1/completions (prompt as text or token ids) and
// /v1/chat/completions, streamed (server-sent events, stream_options.
// include_usage, then [DONE]) or not; GET /v1/models, GET /health.
// Request fields: model, prompt, messages, max_tokens, temperature, top_p,
// seed, ignore_eos, stream, stream_options. Bad requests get 400 with an
// OpenAI-style error body; an unknown model or route 404.
//
// Usage: node server.mjs --model FILE.gguf [--host 127.0.0.1] [--port 8000]
//        [--parallel 16] [--ctx-per-seq 1024] [--batch-size 512] [--threads 1]
//        [--steps sync|eager] [--served-model-name NAME]
// Prints "listening on http://HOST:PORT" on stderr once it serves.
import http from "node:http";
import path from "node:path";
import { parseArgs } from "node:util";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const FLAGS = {
  model: { type: "string" },
  host: { type: "string", default: "127.0.0.1" },
  port: { type: "string", default: "8000" },
  parallel: { type: "string", default: "16" },
  "ctx-per-seq": { type: "string", default: "1024" },
  "batch-size": { type: "string", default: "512" },
  threads: { type: "string", default: "1" },
  steps: { type: "string", default: "sync" },
  "served-model-name": { type: "string" },
};

function parseFlags() {
  try {
    return parseArgs({ options: FLAGS }).values;
  } catch (e) {
    console.error(`${e.message} (see the usage at the top of server.mjs)`);
    process.exit(2);
  }
}

const opt = parseFlags();

function positiveFlag(name) {
  const v = Number(opt[name]);
  if (!Number.isInteger(v) || v <= 0) {
    console.error(`--${name}: '${opt[name]}' is not a positive integer`);
    process.exit(2);
  }
  return v;
}

if (!opt.model) {
  console.error("--model FILE.gguf is required");
  process.exit(2);
}
const parallel = positiveFlag("parallel");
const ctxPerSeq = positiveFlag("ctx-per-seq");
const batchSize = positiveFlag("batch-size");
const threads = positiveFlag("threads");
const port = Number(opt.port);
if (!Number.isInteger(port) || port < 0 || port > 65535) {
  console.error(`--port: '${opt.port}' is not a port number`);
  process.exit(2);
}
if (!["sync", "eager"].includes(opt.steps)) {
  console.error(`--steps: '${opt.steps}' is not sync or eager`);
  process.exit(2);
}
const modelName = opt["served-model-name"] ?? path.basename(opt.model, ".gguf");

// A batch as vLLM's chunked prefill builds one. `items` are the sequences'
// queued tokens in the order they were queued (a prompt keeps its place while
// its rest waits); an item of one token is a decode step.
function chunkedPrefill({ items, size }) {
  clearFinished();  // no decode runs now: the finished sequences' cells can go
  let left = size;
  const batch = [];
  for (const item of items)
    if (item.tokens.length === 1 && left > 0) {
      batch.push({ item, processAmount: 1 });
      left -= 1;
    }
  for (const item of items)
    if (item.tokens.length > 1 && left > 0) {
      const n = Math.min(item.tokens.length, left);
      batch.push({ item, processAmount: n });
      left -= n;
    }
  return batch;
}

// Step-synchronous dispatch (--steps sync): node-llama-cpp asks to dispatch
// when a token is queued; the call is held until every generating sequence
// has queued its next one (or a sequence ended), with a timeout as a guard.
const steps = { generating: 0, queued: 0, pending: null, timer: null };
const STEP_WAIT_LIMIT_MS = 50;

function fireStep() {
  clearTimeout(steps.timer);
  steps.timer = null;
  const dispatch = steps.pending;
  steps.pending = null;
  steps.queued = 0;
  if (dispatch) dispatch();
}

function maybeFireStep() {
  if (steps.pending && steps.queued >= steps.generating) fireStep();
}

function syncStepSchedule(dispatch) {
  steps.pending = dispatch;
  maybeFireStep();
  if (steps.pending && !steps.timer) steps.timer = setTimeout(fireStep, STEP_WAIT_LIMIT_MS);
}

const llama = await getLlama({ gpu: false, build: "never", maxThreads: threads, logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath: opt.model });
const context = await model.createContext({
  sequences: parallel,
  contextSize: ctxPerSeq,  // per sequence: node-llama-cpp gives each sequence its own KV cells
  batchSize,
  threads: { ideal: threads, min: threads },
  batching: { itemPrioritizationStrategy: chunkedPrefill,
              dispatchSchedule: opt.steps === "sync" ? syncStepSchedule : "nextCycle" },
});
const vocabSize = model.fileInsights.vocabularySize ?? model.fileInfo.metadata?.llama?.vocab_size;
const freeSequences = [];
for (let i = 0; i < parallel; i++) freeSequences.push(context.getSequence());
const waiting = [];  // resolvers of requests waiting for a sequence, oldest first
// Finished sequences wait here to be cleared between two decode calls.
// Their clearHistory() would wait for node-llama-cpp's context lock, which
// its batch loop holds for as long as tokens keep being queued: under load
// for tens of seconds, while new requests found no free sequence. So, while
// other sequences generate, the batch strategy (called under that lock,
// with no decode running) clears them; with none generating the lock is
// free and clearHistory() does.
const toClear = [];
let nextId = 1;

function acquireSequence() {
  if (freeSequences.length > 0) return Promise.resolve(freeSequences.pop());
  return new Promise((resolve) => waiting.push(resolve));
}

function handOver(seq) {
  const next = waiting.shift();
  if (next) next(seq);
  else freeSequences.push(seq);
}

// node-llama-cpp 3.22's LlamaContextSequence internals, as its own
// _eraseContextTokenRanges() leaves a sequence it disposes and empties.
function clearFinished() {
  while (toClear.length > 0) {
    const seq = toClear.shift();
    seq._context._ctx.disposeSequence(seq._sequenceId);  // llama_memory_seq_rm: its KV cells freed
    seq._contextTokens = [];
    seq._nextTokenIndex = 0;
    handOver(seq);
  }
}

function releaseSequence(seq) {
  toClear.push(seq);
  if (steps.generating > 0) return;  // the next decode call's strategy clears it
  for (const s of toClear.splice(0))
    s.clearHistory().then(() => handOver(s), (e) => console.error(`clearing a sequence failed: ${e.stack ?? e}`));
}

class BadRequest extends Error {
  constructor(message, status = 400) {
    super(message);
    this.status = status;
  }
}

function sendError(res, status, message, param = null) {
  if (res.headersSent) return;
  const body = JSON.stringify({ error: { message, type: status === 404 ? "NotFoundError" : "BadRequestError",
                                         param, code: status } });
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
  res.end(body);
}

function readBody(req, limit = 16 << 20) {
  return new Promise((resolve, reject) => {
    const parts = [];
    let size = 0;
    req.on("data", (c) => {
      size += c.length;
      if (size > limit) reject(new BadRequest(`the body is over ${limit} bytes`));
      else parts.push(c);
    });
    req.on("end", () => resolve(Buffer.concat(parts).toString("utf8")));
    req.on("error", reject);
  });
}

// The prompt's token ids, from text, token ids or chat messages.
function promptTokens(body, chat) {
  if (chat) {
    if (!Array.isArray(body.messages) || body.messages.length === 0)
      throw new BadRequest("'messages' must be a non-empty array");
    const text = body.messages.map((m) => {
      if (typeof m?.content !== "string") throw new BadRequest("each message needs a string 'content'");
      return `${m.role ?? "user"}: ${m.content}\n`;
    }).join("") + "assistant: ";
    return model.tokenize(text);
  }
  const p = body.prompt;
  if (typeof p === "string") return model.tokenize(p);
  if (Array.isArray(p) && p.length > 0 && p.every((t) => Number.isInteger(t))) {
    const bad = p.find((t) => t < 0 || t >= vocabSize);
    if (bad !== undefined) throw new BadRequest(`token id ${bad} is outside the vocabulary [0, ${vocabSize})`);
    return p;
  }
  throw new BadRequest("'prompt' must be a string or a non-empty array of token ids");
}

function parseRequest(text, chat) {
  let body;
  try {
    body = JSON.parse(text);
  } catch (e) {
    throw new BadRequest(`the body is not JSON: ${e.message}`);
  }
  if (typeof body !== "object" || body === null || Array.isArray(body)) throw new BadRequest("the body must be a JSON object");
  if (body.model !== undefined && body.model !== modelName)
    throw new BadRequest(`the model '${body.model}' does not exist (this server serves '${modelName}')`, 404);
  const maxTokens = body.max_tokens ?? body.max_completion_tokens ?? 16;
  if (!Number.isInteger(maxTokens) || maxTokens <= 0) throw new BadRequest("'max_tokens' must be a positive integer");
  for (const f of ["temperature", "top_p"])
    if (body[f] !== undefined && typeof body[f] !== "number") throw new BadRequest(`'${f}' must be a number`);
  const tokens = promptTokens(body, chat);
  if (tokens.length + maxTokens > ctxPerSeq)
    throw new BadRequest(`the prompt (${tokens.length} tokens) plus max_tokens (${maxTokens}) is over the ` +
                         `context of ${ctxPerSeq} tokens a sequence has (--ctx-per-seq)`);
  return { body, tokens, maxTokens, stream: body.stream === true,
           includeUsage: body.stream_options?.include_usage === true, ignoreEos: body.ignore_eos === true };
}

async function complete(req, res, chat) {
  let r;
  try {
    r = parseRequest(await readBody(req), chat);
  } catch (e) {
    if (e instanceof BadRequest) return sendError(res, e.status, e.message);
    throw e;
  }
  const id = `${chat ? "chatcmpl" : "cmpl"}-${nextId++}`;
  const created = Math.floor(Date.now() / 1000);
  const object = chat ? (r.stream ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  let aborted = false;
  res.on("close", () => { if (!res.writableFinished) aborted = true; });
  const choice = (text, finish) => chat
    ? (r.stream ? { index: 0, delta: { content: text }, finish_reason: finish }
                : { index: 0, message: { role: "assistant", content: text }, finish_reason: finish })
    : { index: 0, text, logprobs: null, finish_reason: finish };
  const chunk = (payload) => res.write(`data: ${JSON.stringify({ id, object, created, model: modelName, ...payload })}\n\n`);
  if (r.stream) res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });

  const seq = await acquireSequence();
  const out = [];
  let finish = "length";
  let finishSent = false;  // on the last token's chunk, as vLLM streams it
  let generating = false;  // counted in steps.generating
  try {
    if (!aborted) {
      const gen = seq.evaluate(r.tokens, { temperature: r.body.temperature ?? 0, topP: r.body.top_p,
                                           seed: r.body.seed, yieldEogToken: r.ignoreEos });
      for await (const token of gen) {
        if (!generating) {
          generating = true;
          steps.generating += 1;
        }
        if (aborted) break;
        if (!r.ignoreEos && model.isEogToken(token)) {
          finish = "stop";
          break;
        }
        out.push(token);
        const last = out.length >= r.maxTokens;
        if (r.stream) chunk({ choices: [choice(model.detokenize([token]), last ? "length" : null)] });
        finishSent = last;
        if (last) break;
        // The generator queues this sequence's next token when the loop
        // goes on; count it, and look again once that has happened.
        steps.queued += 1;
        setImmediate(maybeFireStep);
      }
    }
    if (aborted) return;
    // Answer before the sequence is cleared: clearing waits for the
    // context's lock, which the other sequences' steps hold.
    const usage = { prompt_tokens: r.tokens.length, completion_tokens: out.length,
                    total_tokens: r.tokens.length + out.length };
    if (r.stream) {
      if (!finishSent) chunk({ choices: [choice("", finish)] });
      if (r.includeUsage) chunk({ choices: [], usage });
      res.end("data: [DONE]\n\n");
    } else {
      const body = JSON.stringify({ id, object, created, model: modelName,
                                    choices: [choice(model.detokenize(out), finish)], usage });
      res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
      res.end(body);
    }
  } finally {
    if (generating) {
      steps.generating -= 1;
      setImmediate(maybeFireStep);
    }
    releaseSequence(seq);
  }
}

const server = http.createServer((req, res) => {
  const url = (req.url ?? "/").split("?")[0];
  const handle = async () => {
    if (req.method === "GET" && url === "/health") {
      res.writeHead(200, { "content-length": 0 });
      return res.end();
    }
    if (req.method === "GET" && url === "/v1/models") {
      const body = JSON.stringify({ object: "list", data: [{ id: modelName, object: "model", created: 0,
                                                              owned_by: "llama.cpp", max_model_len: ctxPerSeq }] });
      res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
      return res.end(body);
    }
    if (req.method === "POST" && url === "/v1/completions") return complete(req, res, false);
    if (req.method === "POST" && url === "/v1/chat/completions") return complete(req, res, true);
    return sendError(res, 404, `no route ${req.method} ${url}`);
  };
  handle().catch((e) => {
    console.error(`request failed: ${e.stack ?? e}`);
    if (!res.headersSent) sendError(res, 500, String(e.message ?? e));
    else res.destroy();
  });
});
server.keepAliveTimeout = 5000;

server.listen(port, opt.host, () => {
  const a = server.address();
  console.error(`listening on http://${a.address}:${a.port} (llama.cpp by node-llama-cpp, ${parallel} sequences ` +
                `of ${ctxPerSeq} tokens, chunked batches of ${batchSize} tokens, ${opt.steps} steps, ` +
                `${threads} threads)`);
});

async function shutdown() {
  server.close();
  server.closeAllConnections?.();
  await context.dispose();
  await model.dispose();
  process.exit(0);
}
process.on("SIGTERM", shutdown);
process.on("SIGINT", shutdown);
