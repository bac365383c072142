// Drives a running specula server with the official OpenAI client and prints what it
// saw as one JSON object. TestOpenAINodeClient starts the server and checks the output.
//
//   node openai_client.mjs http://127.0.0.1:PORT/v1 MODEL API_KEY
import OpenAI from "openai";

const [baseURL, model, apiKey] = process.argv.slice(2);
if (!baseURL || !model || !apiKey) {
  console.error("usage: node openai_client.mjs BASE_URL MODEL API_KEY");
  process.exit(2);
}
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60_000 });
const prompt = "func main() {";
const messages = [
  { role: "system", content: "You write Go." },
  { role: "user", content: "Write a function that reverses a string." },
];
const out = {};

// Models.
const models = [];
for await (const m of client.models.list()) models.push(m.id);
out.models = models;

// Completions, whole and streamed.
const c = await client.completions.create({ model, prompt, max_tokens: 24, temperature: 0 });
out.completion = { text: c.choices[0].text, finish: c.choices[0].finish_reason, usage: c.usage, object: c.object, id: c.id };

let text = "";
let finish = null;
let chunks = 0;
const cs = await client.completions.create({ model, prompt, max_tokens: 24, temperature: 0, stream: true });
for await (const chunk of cs) {
  chunks++;
  for (const ch of chunk.choices) {
    text += ch.text;
    if (ch.finish_reason) finish = ch.finish_reason;
  }
}
out.completionStream = { text, finish, chunks };

// Chat, whole and streamed with usage.
const cc = await client.chat.completions.create({ model, messages, max_tokens: 24, temperature: 0 });
out.chat = { content: cc.choices[0].message.content, role: cc.choices[0].message.role, finish: cc.choices[0].finish_reason, usage: cc.usage, object: cc.object };

let content = "";
let role = null;
let chatFinish = null;
let usage = null;
const ccs = await client.chat.completions.create({
  model, messages, max_tokens: 24, temperature: 0, stream: true, stream_options: { include_usage: true },
});
for await (const chunk of ccs) {
  if (chunk.usage) usage = chunk.usage;
  for (const ch of chunk.choices) {
    if (ch.delta.role) role = ch.delta.role;
    if (ch.delta.content) content += ch.delta.content;
    if (ch.finish_reason) chatFinish = ch.finish_reason;
  }
}
out.chatStream = { content, role, finish: chatFinish, usage };

// The stream helper of the client, which accumulates the message itself.
const runner = client.chat.completions.stream({ model, messages, max_tokens: 24, temperature: 0 });
const final = await runner.finalChatCompletion();
out.chatStreamHelper = { content: final.choices[0].message.content, finish: final.choices[0].finish_reason };

// Log-probabilities, completions and chat, and several choices.
const lc = await client.completions.create({ model, prompt, max_tokens: 8, temperature: 0, logprobs: 2 });
const l = lc.choices[0].logprobs;
out.completionLogprobs = { text: lc.choices[0].text, tokens: l.tokens, tokenLogprobs: l.token_logprobs, top: l.top_logprobs.map((m) => Object.keys(m).length) };
const lcc = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 2 });
out.chatLogprobs = lcc.choices[0].logprobs.content.map((e) => ({ token: e.token, logprob: e.logprob, top: e.top_logprobs.length, bytes: e.bytes.length }));
// Scoring a text as lm-evaluation-harness does: echo, logprobs, max_tokens 0.
const sc = await client.completions.create({ model, prompt, max_tokens: 0, echo: true, logprobs: 1 });
const sl = sc.choices[0].logprobs;
out.scored = { text: sc.choices[0].text, tokens: sl.tokens, tokenLogprobs: sl.token_logprobs, top: sl.top_logprobs, completionTokens: sc.usage.completion_tokens };
const nc = await client.completions.create({ model, prompt, max_tokens: 8, temperature: 0, n: 2 });
out.choices = { texts: nc.choices.map((c) => c.text), indices: nc.choices.map((c) => c.index), completionTokens: nc.usage.completion_tokens };

// Several choices streamed: every chunk names its choice's index; seeded, so each
// streamed choice equals the whole response's.
const seeded = { model, prompt, max_tokens: 12, temperature: 0.9, seed: 11, n: 3 };
const whole = await client.completions.create(seeded);
const streamedTexts = ["", "", ""];
const streamedFinish = [null, null, null];
let streamedUsage = null;
const ns = await client.completions.create({ ...seeded, stream: true, stream_options: { include_usage: true } });
for await (const chunk of ns) {
  if (chunk.usage) streamedUsage = chunk.usage.completion_tokens;
  for (const ch of chunk.choices) {
    streamedTexts[ch.index] += ch.text;
    if (ch.finish_reason) streamedFinish[ch.index] = ch.finish_reason;
  }
}
out.choicesStreamed = {
  whole: whole.choices.map((c) => c.text), wholeFinish: whole.choices.map((c) => c.finish_reason), wholeUsage: whole.usage.completion_tokens,
  streamed: streamedTexts, streamedFinish, streamedUsage,
};
const chatSeeded = { model, messages, max_tokens: 12, temperature: 0.9, seed: 11, n: 2 };
const wholeChat = await client.chat.completions.create(chatSeeded);
const helper = client.chat.completions.stream(chatSeeded);
const helperFinal = await helper.finalChatCompletion();
out.chatChoicesStreamed = {
  whole: wholeChat.choices.map((c) => c.message.content),
  helper: helperFinal.choices.map((c) => c.message.content),
  helperIndices: helperFinal.choices.map((c) => c.index),
};

// Structured output: a JSON object, and JSON of a schema.
const jo = await client.chat.completions.create({ model, messages, max_tokens: 60, temperature: 0, response_format: { type: "json_object" } });
out.jsonObject = { content: jo.choices[0].message.content, finish: jo.choices[0].finish_reason };
const schema = { type: "object", properties: { name: { type: "string", maxLength: 8 }, lines: { type: "integer" } }, required: ["name", "lines"] };
const js = await client.chat.completions.create({
  model, messages, max_tokens: 60, temperature: 0.7, seed: 3,
  response_format: { type: "json_schema", json_schema: { name: "function", schema } },
});
out.jsonSchema = { content: js.choices[0].message.content, finish: js.choices[0].finish_reason };

// vLLM's structured-output fields, as a Python client passes them in extra_body, and a
// request with OpenAI's fields that change nothing here (user, store, metadata).
const gc = await client.chat.completions.create({
  model, messages, max_tokens: 8, temperature: 0, user: "u", store: false, metadata: { a: "b" },
  guided_choice: ["yes", "no"],
});
out.guidedChoice = { content: gc.choices[0].message.content, finish: gc.choices[0].finish_reason };
const so = await client.completions.create({ model, prompt, max_tokens: 8, temperature: 0, structured_outputs: { regex: "[a-z]{3}" } });
out.structuredRegex = { content: so.choices[0].text, finish: so.choices[0].finish_reason };

// Errors surface as APIError subclasses with the server's status, param and code.
async function failure(fn) {
  try {
    await fn();
    return { thrown: false };
  } catch (err) {
    return {
      thrown: true,
      apiError: err instanceof OpenAI.APIError,
      name: err.constructor.name,
      status: err.status,
      param: err.param ?? null,
      code: err.code ?? null,
      type: err.type ?? null,
      message: err.message,
    };
  }
}
out.badTemperature = await failure(() => client.completions.create({ model, prompt, temperature: -1 }));
out.unknownModel = await failure(() => client.chat.completions.create({ model: "gpt-4o", messages }));
out.badStream = await failure(async () => {
  const s = await client.chat.completions.create({ model, messages, top_p: 0, stream: true });
  for await (const _ of s) {
    // not reached
  }
});

out.tooManyLogprobs = await failure(() => client.chat.completions.create({ model, messages, logprobs: true, top_logprobs: 21 }));
out.tooManyChoices = await failure(() => client.completions.create({ model, prompt, n: 65 }));
out.messageTypo = await failure(() => client.chat.completions.create({
  model, messages: [{ role: "user", content: "hi", bogus: 1 }], max_tokens: 2,
}));
out.partTypo = await failure(() => client.chat.completions.create({
  model, messages: [{ role: "user", content: [{ type: "text", txt: "hi" }] }], max_tokens: 2,
}));
out.schemaTypo = await failure(() => client.chat.completions.create({
  model, messages, max_tokens: 2,
  response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "integer" }, strikt: true } },
}));
out.streamOptionsTypo = await failure(async () => {
  const s = await client.completions.create({ model, prompt, max_tokens: 2, stream: true, stream_options: { include_usge: true } });
  for await (const _ of s) {
    // not reached
  }
});
const stranger = new OpenAI({ baseURL, apiKey: "wrong-key", maxRetries: 0, timeout: 60_000 });
out.badSchema = await failure(() => client.chat.completions.create({
  model, messages, response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "number", multipleOf: 2 } } },
}));
out.typo = await failure(() => client.completions.create({ model, prompt, temperture: 0.2 }));
out.wrongKey = await failure(() => stranger.completions.create({ model, prompt, max_tokens: 2 }));

console.log(JSON.stringify(out));
