// What the chat checks (chat_check.mjs, tool_chat_check.mjs) open: a GGUF file in llama.cpp on
// the CPU, its own chat template (tokenizer.chat_template), and a context of the model's length
// whose attention stays in F32.
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

export async function openChatModel(modelPath, contextOptions = {}) {
  const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error, progressLogs: false });
  const model = await llama.loadModel({ modelPath });
  const template = model.fileInfo.metadata.tokenizer.chat_template;
  if (typeof template !== "string") {
    console.error(`${modelPath} has no tokenizer.chat_template`);
    process.exit(1);
  }
  const context = await model.createContext({
    contextSize: model.trainContextSize, threads: 1, flashAttention: false,
    experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32", ...contextOptions,
  });
  return { model, template, context };
}
