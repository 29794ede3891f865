// A conversation in llama.cpp with a GGUF file of a fine-tuned run (docs/chat.md; not run by the
// tests, which run chat_check.mjs): node-llama-cpp's chat session applies the file's chat
// template. Greedy, no repetition penalty and no system turn: what `tapegrad chat --temperature 0
// --repetition-penalty 1` does with the same turns. A LoRA run's pair (`ckpt export RUN
// --gguf-adapter A.gguf --gguf-base BASE.gguf`) chats as: node chat.mjs BASE.gguf --lora A.gguf ...
// usage: node chat.mjs MODEL.gguf [--lora ADAPTER.gguf] "first user turn" ["second user turn" ...]
import { getLlama, LlamaLogLevel, LlamaChatSession, JinjaTemplateChatWrapper } from "node-llama-cpp";

const args = process.argv.slice(2);
const modelPath = args.shift();
let adapterPath = null;
if (args[0] === "--lora") {
  args.shift();
  adapterPath = args.shift();
}
const turns = args;
if (!modelPath || turns.length === 0 || (adapterPath === undefined)) {
  console.error('usage: node chat.mjs MODEL.gguf [--lora ADAPTER.gguf] "user turn" ...');
  process.exit(2);
}
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath });
const template = model.fileInfo.metadata.tokenizer.chat_template;
if (typeof template !== "string") {
  console.error(`${modelPath} has no chat template: give the GGUF of a fine-tuned run (tapegrad sft), or, for a LoRA run, ` +
    "the base that `ckpt export RUN --gguf-adapter A.gguf --gguf-base BASE.gguf` writes");
  process.exit(1);
}
const context = await model.createContext({
  contextSize: model.trainContextSize,
  ...(adapterPath ? { lora: { adapters: [{ filePath: adapterPath, scale: 1 }] } } : {}),
});
const session = new LlamaChatSession({
  contextSequence: context.getSequence(),
  // the file's own template: left to choose, node-llama-cpp's ChatML wrapper adds a BOS token first
  chatWrapper: new JinjaTemplateChatWrapper({ template, tokenizer: model.tokenizer }),
});
session.setChatHistory([]); // the session starts with a system turn of its own otherwise
for (const turn of turns) {
  process.stdout.write(`> ${turn}\n`);
  const reply = await session.prompt(turn, { temperature: 0, repeatPenalty: false, maxTokens: 128 });
  process.stdout.write(reply + "\n");
}
