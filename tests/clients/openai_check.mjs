// OpenAI's own Node.js client against `tapegrad serve` (tests/test_serve.c).
// usage: node openai_check.mjs BASE_URL API_KEY CONVERSATION.json MAX_TOKENS
// CONVERSATION.json holds the messages. Asks the server for a greedy reply whole, then streamed
// (with usage), then a greedy completion of 12 tokens after "The ", and prints one JSON line:
// {"model", "whole", "finish", "usage", "streamed", "stream_finish", "stream_usage", "chunks",
// "refused": {"status", "type", "param", "code"}, "completion"}; "refused" is what the client raises
// for a request the server must refuse (a role it does not know).
import { readFileSync } from "node:fs";
import OpenAI from "openai";

const [baseURL, apiKey, conversationPath, maxTokens] = process.argv.slice(2);
const messages = JSON.parse(readFileSync(conversationPath, "utf8"));
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });

const models = await client.models.list();
const model = models.data[0].id;
const ask = { model, messages, temperature: 0, max_tokens: Number(maxTokens) };

const whole = await client.chat.completions.create(ask);

const stream = await client.chat.completions.create({ ...ask, stream: true, stream_options: { include_usage: true } });
let streamed = "", streamFinish = null, streamUsage = null, chunks = 0;
for await (const chunk of stream) {
  chunks++;
  const choice = chunk.choices[0];
  if (choice?.delta?.content) streamed += choice.delta.content;
  if (choice?.finish_reason) streamFinish = choice.finish_reason;
  if (chunk.usage) streamUsage = chunk.usage;
}

const completion = await client.completions.create({ model, prompt: "The ", temperature: 0, max_tokens: 12 });

let refused = null;
try {
  await client.chat.completions.create({ ...ask, messages: [{ role: "tool", content: "x", tool_call_id: "1" }] });
} catch (e) {
  refused = { status: e.status, type: e.type ?? e.error?.type, param: e.param ?? e.error?.param, code: e.code ?? e.error?.code };
}

console.log(JSON.stringify({
  model, whole: whole.choices[0].message.content, finish: whole.choices[0].finish_reason, usage: whole.usage,
  streamed, stream_finish: streamFinish, stream_usage: streamUsage, chunks, refused,
  completion: completion.choices[0].text,
}));
