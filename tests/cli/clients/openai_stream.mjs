// The official `openai` package for Node.js against `servesim serve`:
// a streamed chat completion, a streamed completion and a whole one.
// Usage: node openai_stream.mjs BASE_URL MODEL   (prints one JSON line)
import OpenAI from "openai";

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "test-key", maxRetries: 0, timeout: 60000 });

const chat = { chunks: 0, text: "", finish: null, usage: null };
const chatStream = await client.chat.completions.create({
  model,
  messages: [{ role: "system", content: "You are terse." }, { role: "user", content: "Hello!" }],
  max_tokens: 12,
  stream: true,
  stream_options: { include_usage: true },
  ignore_eos: true,  // vLLM's extra field, passed through
});
for await (const chunk of chatStream) {
  chat.chunks += 1;
  if (chunk.usage) chat.usage = chunk.usage;
  for (const choice of chunk.choices) {
    chat.text += choice.delta?.content ?? "";
    if (choice.finish_reason) chat.finish = choice.finish_reason;
  }
}

const completion = { chunks: 0, text: "", finish: null };
const completionStream = await client.completions.create({ model, prompt: "Once upon a time", max_tokens: 9, stream: true, ignore_eos: true });
for await (const chunk of completionStream) {
  completion.chunks += 1;
  completion.text += chunk.choices[0]?.text ?? "";
  if (chunk.choices[0]?.finish_reason) completion.finish = chunk.choices[0].finish_reason;
}

const whole = await client.completions.create({ model, prompt: [5, 6, 7], max_tokens: 4, ignore_eos: true });
const models = await client.models.list();
let refused = null;
try {
  await client.completions.create({ model, prompt: "x", max_tokens: -1 });
} catch (e) {
  refused = { status: e.status, message: e.message };
}
console.log(JSON.stringify({ chat, completion, whole: whole.usage, models: models.data.map((m) => m.id), refused }));
