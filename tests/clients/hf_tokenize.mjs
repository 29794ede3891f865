// Encodes texts with Hugging Face's JavaScript tokenizers (@huggingface/tokenizers).
// usage: node hf_tokenize.mjs TOKENIZER.json TEXTS.json
// TEXTS.json: {"texts": ["<hex bytes>", ...]}. Each text's bytes are decoded as UTF-8 the way a
// browser or Node.js does it (an invalid sequence becomes U+FFFD), then encoded without the
// post-processor's special tokens. Prints {"ids": [[...], ...]} on stdout.
import { readFileSync } from "node:fs";
import { Tokenizer } from "@huggingface/tokenizers";

const [tokenizerPath, textsPath] = process.argv.slice(2);
if (!textsPath) {
  console.error("usage: node hf_tokenize.mjs TOKENIZER.json TEXTS.json");
  process.exit(2);
}
const tokenizerJson = JSON.parse(readFileSync(tokenizerPath, "utf8"));
const tokenizer = new Tokenizer(tokenizerJson, {});
const { texts } = JSON.parse(readFileSync(textsPath, "utf8"));
const decoder = new TextDecoder("utf-8");
const ids = texts.map((hex) => tokenizer.encode(decoder.decode(Buffer.from(hex, "hex")), { add_special_tokens: false }).ids);
process.stdout.write(JSON.stringify({ ids }) + "\n");
