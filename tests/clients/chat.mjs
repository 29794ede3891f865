// A conversation in llama.cpp with a GGUF file of a fine-tuned run (the sample of docs/sft.md; not
// run by the tests): node-llama-cpp's chat session applies the file's chat template. Greedy, no
// repetition penalty and no system turn: what `tapegrad chat --temperature 0 --repetition-penalty 1`
// does with the same turns.
// usage: node chat.mjs MODEL.gguf "first user turn" ["second user turn" ...]
import { getLlama, LlamaLogLevel, LlamaChatSession, JinjaTemplateChatWrapper } from "node-llama-cpp";

const [modelPath, ...turns] = process.argv.slice(2);
if (turns.length === 0) {
  console.error('usage: node chat.mjs MODEL.gguf "user turn" ...');
  process.exit(2);
}
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath });
const context = await model.createContext({ contextSize: model.trainContextSize });
const session = new LlamaChatSession({
  contextSequence: context.getSequence(),
  // the file's own template: left to choose, node-llama-cpp's ChatML wrapper adds a BOS token first
  chatWrapper: new JinjaTemplateChatWrapper({ template: model.fileInfo.metadata.tokenizer.chat_template, tokenizer: model.tokenizer }),
});
session.setChatHistory([]); // the session starts with a system turn of its own otherwise
for (const turn of turns) {
  process.stdout.write(`> ${turn}\n`);
  const reply = await session.prompt(turn, { temperature: 0, repeatPenalty: false, maxTokens: 128 });
  process.stdout.write(reply + "\n");
}
