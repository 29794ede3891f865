// A chat over a tool call and its response in llama.cpp through node-llama-cpp: LlamaChat
// continues the model's turn after a call whose result was fed back, everything rendered by the
// GGUF's own chat template (tokenizer.chat_template) through JinjaTemplateChatWrapper, which
// takes from the template how calls and results are written.
// usage: node tool_chat_check.mjs MODEL.gguf REQUEST.json
// REQUEST.json: {"system": "...", "question": "...", "max_tokens": N,
//                "functions": {NAME: {"description": "...", "params": a JSON schema}},
//                "call": {"name": NAME, "params": {...}}, "result": the call's result}
// Prints {"reply": the text drawn after the result, "context": [the ids the context holds after it],
// "context_text": their text, special tokens as text}. Greedy (temperature 0), no repetition penalty.
import { readFileSync } from "node:fs";
import { LlamaChat, JinjaTemplateChatWrapper, defineChatSessionFunction } from "node-llama-cpp";
import { openChatModel } from "./chat_model.mjs";

const [modelPath, requestPath] = process.argv.slice(2);
if (!requestPath) {
  console.error("usage: node tool_chat_check.mjs MODEL.gguf REQUEST.json");
  process.exit(2);
}
const request = JSON.parse(readFileSync(requestPath, "utf8"));
const { model, template, context } = await openChatModel(modelPath);
const sequence = context.getSequence();
const chatWrapper = new JinjaTemplateChatWrapper({ template, tokenizer: model.tokenizer });
if (chatWrapper.settings.functions?.call?.prefix == null) {
  console.error("node-llama-cpp found no way to write a call in the template");
  process.exit(1);
}
const functions = {};
for (const [name, f] of Object.entries(request.functions)) {
  functions[name] = defineChatSessionFunction({
    description: f.description, params: f.params,
    handler() { throw new Error("the check calls no function itself"); },
  });
}
const history = [
  { type: "system", text: request.system },
  { type: "user", text: request.question },
  { type: "model", response: [{ type: "functionCall", name: request.call.name, params: request.call.params, result: request.result }] },
];
const res = await new LlamaChat({ contextSequence: sequence, chatWrapper }).generateResponse(history, {
  functions, maxTokens: request.max_tokens, temperature: 0, repeatPenalty: false,
});
const ids = Array.from(sequence.contextTokens);
process.stdout.write(JSON.stringify({ reply: res.response, context: ids, context_text: model.detokenize(ids, true) }) + "\n");
await context.dispose();
await model.dispose();
