// Trains a small byte-level BPE in plain JavaScript, independently of tapegrad, and writes it as
// a tokenizer.json laid out as MiniMind's: its 36 added tokens at ids 0-35 (<|endoftext|>,
// <|im_start|>, <|im_end|>, ... special; <tool_call>, <think>, ... not), then the 256 ByteLevel
// characters in code point order, then one token per merge; ByteLevel pre-tokenizer with
// add_prefix_space false, no normalizer, no post-processor.
// usage: node make_minimind_tokenizer.mjs CORPUS.txt MERGES OUT.json [strings|pairs]
// (merges written as "a b" strings, the default, or as ["a", "b"] pairs, as newer files have)
import { readFileSync, writeFileSync } from "node:fs";

const [corpusPath, mergeCount, outPath, mergeForm = "strings"] = process.argv.slice(2);
if (!outPath) {
  console.error("usage: node make_minimind_tokenizer.mjs CORPUS.txt MERGES OUT.json [strings|pairs]");
  process.exit(2);
}

const special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
  "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
  "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<|audio_start|>", "<|audio_end|>", "<|audio_pad|>",
  "<tts_pad>", "<tts_text_bos>", "<tts_text_eod>", "<tts_text_bos_single>"];
const plain = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>",
  ...Array.from({ length: 9 }, (_, i) => `<|buffer${i + 1}|>`)];

// GPT-2's byte -> character map: printable bytes stand for themselves, the others get U+0100 on.
const byteChar = [];
for (let b = 0, n = 0; b < 256; b++) {
  const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
  byteChar[b] = String.fromCodePoint(printable ? b : 256 + n++);
}

// Words: the GPT-2 pre-split of the corpus, each as a list of ByteLevel characters, counted.
const pattern = /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;
const encoder = new TextEncoder();
const counts = new Map();
for (const piece of readFileSync(corpusPath, "utf8").match(pattern) ?? []) {
  const word = Array.from(encoder.encode(piece), (b) => byteChar[b]).join("\u0000");
  counts.set(word, (counts.get(word) ?? 0) + 1);
}
let words = [...counts].map(([w, c]) => ({ syms: w.split("\u0000"), count: c }));

// Textbook BPE: recount every pair each round, merge the most frequent (ties: the pair that
// sorts first as "left right").
const merges = [];
for (let round = 0; round < Number(mergeCount); round++) {
  const pairs = new Map();
  for (const { syms, count } of words)
    for (let i = 0; i + 1 < syms.length; i++) {
      const key = syms[i] + " " + syms[i + 1];
      pairs.set(key, (pairs.get(key) ?? 0) + count);
    }
  let best = null;
  for (const [key, c] of pairs) if (!best || c > best[1] || (c === best[1] && key < best[0])) best = [key, c];
  if (!best) break;
  const [a, b] = best[0].split(" ");
  merges.push([a, b]);
  words = words.map(({ syms, count }) => {
    const out = [];
    for (let i = 0; i < syms.length; i++) {
      if (i + 1 < syms.length && syms[i] === a && syms[i + 1] === b) out.push(syms[i++] + b);
      else out.push(syms[i]);
    }
    return { syms: out, count };
  });
}

const vocab = {};
const added = [...special, ...plain].map((content, id) => {
  vocab[content] = id;
  return { id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: id < special.length };
});
[...byteChar].sort((x, y) => x.codePointAt(0) - y.codePointAt(0)).forEach((c) => (vocab[c] = Object.keys(vocab).length));
for (const [a, b] of merges) if (!(a + b in vocab)) vocab[a + b] = Object.keys(vocab).length;

const tokenizer = {
  version: "1.0", truncation: null, padding: null, added_tokens: added, normalizer: null,
  pre_tokenizer: { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true },
  post_processor: null,
  decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
  model: {
    type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null,
    fuse_unk: false, byte_fallback: false, ignore_merges: false, vocab,
    merges: mergeForm === "pairs" ? merges : merges.map(([a, b]) => a + " " + b),
  },
};
writeFileSync(outPath, JSON.stringify(tokenizer, null, 2) + "\n");
console.log(JSON.stringify({ tokens: Object.keys(vocab).length, merges: merges.length }));
