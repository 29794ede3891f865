// Renders conversations with a chat template through Hugging Face's Jinja engine in JavaScript
// (@huggingface/jinja, what transformers.js's apply_chat_template runs).
// usage: node chat_template.mjs TOKENIZER_CONFIG.json CONVERSATIONS.json
// CONVERSATIONS.json: [{"messages": [{"role", "content"}, ...], "add_generation_prompt": bool}, ...]
// Prints {"rendered": ["<hex of the UTF-8 bytes>", ...]}, with the config's bos_token and
// eos_token given to the template as apply_chat_template gives them.
import { readFileSync } from "node:fs";
import { Template } from "@huggingface/jinja";

const [configPath, conversationsPath] = process.argv.slice(2);
if (!conversationsPath) {
  console.error("usage: node chat_template.mjs TOKENIZER_CONFIG.json CONVERSATIONS.json");
  process.exit(2);
}
const config = JSON.parse(readFileSync(configPath, "utf8"));
if (typeof config.chat_template !== "string") {
  console.error(`${configPath} has no chat_template`);
  process.exit(1);
}
const template = new Template(config.chat_template);
const conversations = JSON.parse(readFileSync(conversationsPath, "utf8"));
const rendered = conversations.map(({ messages, add_generation_prompt }) =>
  Buffer.from(
    template.render({ messages, add_generation_prompt, bos_token: config.bos_token, eos_token: config.eos_token }),
    "utf8",
  ).toString("hex"),
);
process.stdout.write(JSON.stringify({ rendered }) + "\n");
