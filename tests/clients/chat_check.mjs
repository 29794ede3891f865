// A conversation with a GGUF file in llama.cpp through node-llama-cpp's chat session, which
// renders it with the file's own chat template (tokenizer.chat_template).
// usage: node chat_check.mjs MODEL.gguf REQUEST.json [ADAPTER.gguf]
// REQUEST.json: {"system": "...", "turns": ["user turn", ...], "max_tokens": N}
// Prints {"wrapper": the chat wrapper node-llama-cpp would pick by itself,
//         "replies": [text of each reply], "reply_ids": [[ids of each reply]],
//         "context": [the ids the context holds after the last reply]}.
// Greedy (temperature 0), no repetition penalty. The session applies the file's Jinja template
// itself (JinjaTemplateChatWrapper): left to choose, node-llama-cpp recognises ChatML and uses
// its own ChatML wrapper, which puts the model's BOS token (here <|endoftext|>) before the
// conversation, where the template, MiniMind's and tapegrad's, puts none.
import { readFileSync } from "node:fs";
import { LlamaChatSession, JinjaTemplateChatWrapper, resolveChatWrapper } from "node-llama-cpp";
import { openChatModel } from "./chat_model.mjs";

const [modelPath, requestPath, adapterPath] = process.argv.slice(2);
if (!requestPath) {
  console.error("usage: node chat_check.mjs MODEL.gguf REQUEST.json [ADAPTER.gguf]");
  process.exit(2);
}
const { system, turns, max_tokens } = JSON.parse(readFileSync(requestPath, "utf8"));
const { model, template, context } = await openChatModel(
  modelPath, adapterPath ? { lora: { adapters: [{ filePath: adapterPath, scale: 1 }] } } : {});
const sequence = context.getSequence();
const session = new LlamaChatSession({
  contextSequence: sequence,
  chatWrapper: new JinjaTemplateChatWrapper({ template, tokenizer: model.tokenizer }),
  systemPrompt: system,
});
const replies = [], reply_ids = [];
for (const turn of turns) {
  const ids = [];
  const text = await session.prompt(turn, {
    maxTokens: max_tokens, temperature: 0, repeatPenalty: false, onToken: (tokens) => ids.push(...tokens),
  });
  replies.push(text);
  reply_ids.push(ids);
}
const wrapper = resolveChatWrapper(model).wrapperName;
process.stdout.write(JSON.stringify({ wrapper, replies, reply_ids, context: Array.from(sequence.contextTokens) }) + "\n");
await context.dispose();
await model.dispose();
