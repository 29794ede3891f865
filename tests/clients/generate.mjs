// Greedy text from a GGUF file in llama.cpp (not run by the tests; the sample of docs/export.md).
// usage: node generate.mjs MODEL.gguf PROMPT [TOKENS]
import { getLlama, LlamaCompletion } from "node-llama-cpp";

const [modelPath, prompt, tokens = "60"] = process.argv.slice(2);
const llama = await getLlama({ gpu: false, build: "never" });
const model = await llama.loadModel({ modelPath });
const context = await model.createContext();
const completion = new LlamaCompletion({ contextSequence: context.getSequence() });
const text = await completion.generateCompletion(prompt, { maxTokens: Number(tokens), temperature: 0, repeatPenalty: false });
process.stdout.write(prompt + text + "\n");
