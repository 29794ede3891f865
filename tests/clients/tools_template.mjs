// Renders conversations with tools and thinking through Hugging Face's Jinja engine, each
// prepared as MiniMind's SFT loader prepares one for apply_chat_template (dataset/lm_dataset.py):
// the tools of a system turn's "tools" (a JSON string, or an array), or of the line's own "tools";
// an assistant's "tool_calls" parsed when it is a JSON string.
// usage: node tools_template.mjs TOKENIZER_CONFIG.json LINES.jsonl
// LINES.jsonl: {"conversations": [...], "tools"?, "add_generation_prompt": bool, "open_thinking"?: bool}
// Prints {"rendered": ["<hex of the UTF-8 bytes>", ...]}, one a line.
import { readFileSync } from "node:fs";
import { Template } from "@huggingface/jinja";

const [configPath, linesPath] = process.argv.slice(2);
if (!linesPath) {
  console.error("usage: node tools_template.mjs TOKENIZER_CONFIG.json LINES.jsonl");
  process.exit(2);
}
const template = new Template(JSON.parse(readFileSync(configPath, "utf8")).chat_template);
const parsed = (v) => (typeof v === "string" ? JSON.parse(v) : v);
const rendered = readFileSync(linesPath, "utf8")
  .split("\n")
  .filter((line) => line.trim())
  .map((line) => {
    const { conversations, tools: lineTools, add_generation_prompt, open_thinking } = JSON.parse(line);
    let tools = lineTools === undefined || lineTools === null ? undefined : parsed(lineTools);
    const messages = conversations.map((m) => {
      const message = { ...m };
      if (message.role === "system" && message.tools) tools = parsed(message.tools);
      if (message.tool_calls) message.tool_calls = parsed(message.tool_calls);
      return message;
    });
    const context = { messages, tools, add_generation_prompt };
    if (open_thinking !== undefined) context.open_thinking = open_thinking;
    return Buffer.from(template.render(context), "utf8").toString("hex");
  });
process.stdout.write(JSON.stringify({ rendered }) + "\n");
