// Runs a GGUF file in llama.cpp (node-llama-cpp's prebuilt CPU binaries, never built or
// downloaded here).
// usage: node llama_check.mjs MODEL.gguf REQUEST.json [LORA.gguf]
// LORA.gguf: a LoRA adapter for MODEL.gguf, applied at scale 1 (llama.cpp adds alpha / r * B A x).
// REQUEST.json: {"prompt": [ids], "steps": N, "texts": ["<hex bytes>", ...], "stop": id (optional)}
// Prints {"logprobs": [[log p(token | prompt[0..i]) for every token] for each prompt position i],
//         "greedy": [N ids: greedy continuation of the prompt],
//         "text_ids": [[ids] for each text: llama.cpp's tokenization, special tokens parsed],
//         "greedy_text": "<hex bytes>": llama.cpp's text of the greedy tokens before the first `stop`}.
// node-llama-cpp reports the softmax of llama.cpp's logits; their logarithms are the logits less
// their log-sum-exp, the form in which tapegrad's logits are compared.
import { readFileSync } from "node:fs";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const [modelPath, requestPath, loraPath] = process.argv.slice(2);
if (!requestPath) {
  console.error("usage: node llama_check.mjs MODEL.gguf REQUEST.json [LORA.gguf]");
  process.exit(2);
}
const { prompt, steps, texts, stop } = JSON.parse(readFileSync(requestPath, "utf8"));
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error, progressLogs: false });
const model = await llama.loadModel({ modelPath });
// the key/value cache in F32, as tapegrad keeps keys and values (llama.cpp's default is F16)
const context = await model.createContext({
  contextSize: 64, threads: 1, batchSize: 64, flashAttention: false, experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32",
  ...(loraPath ? { lora: { adapters: [{ filePath: loraPath, scale: 1 }] } } : {}),
});
const sequence = context.getSequence();

const next = { generateNext: { probabilities: true, token: true, options: { temperature: 0 } } };
const evaluated = await sequence.controlledEvaluate(prompt.map((id) => [id, next]));
const logprobs = evaluated.map((out) => {
  const row = [];
  for (const [id, p] of out.next.probabilities) row[id] = Math.log(p);
  return row;
});
const greedy = [evaluated[evaluated.length - 1].next.token];
while (greedy.length < steps) {
  const [out] = await sequence.controlledEvaluate([[greedy[greedy.length - 1], next]]);
  greedy.push(out.next.token);
}
const decoder = new TextDecoder("utf-8");
const text_ids = texts.map((hex) => Array.from(model.tokenize(decoder.decode(Buffer.from(hex, "hex")), true)));
const stopAt = greedy.indexOf(stop);
const greedy_text = Buffer.from(model.detokenize(stopAt < 0 ? greedy : greedy.slice(0, stopAt)), "utf8").toString("hex");
process.stdout.write(JSON.stringify({ logprobs, greedy, text_ids, greedy_text }) + "\n");
await context.dispose();
await model.dispose();
