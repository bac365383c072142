// make_golden.mjs writes the tokenizer package's golden files: the ids that the Hugging
// Face tokenizers library (its JavaScript port, @huggingface/tokenizers 0.2.0) gives for
// every text of corpus.json, for the gocoder tokenizer and for four small fixtures that
// this script also writes (Qwen2-style, Llama-3-style, and two Llama-2-style SentencePiece
// BPE tokenizers). The outputs are committed; the Go tests need neither npm nor node.
//
// Run it from anywhere:
//
//	cd /tmp/tok && npm install @huggingface/tokenizers@0.2.0
//	node /path/to/specula/tokenizer/testdata/make_golden.mjs /tmp/tok/node_modules
//
// The optional argument is the node_modules directory holding the library (default: the
// one next to this file, then the usual resolution).
//
// What it writes, relative to this directory:
//
//	qwen2/, llama3/, llama2/, llama2-metaspace/   tokenizer.json + tokenizer_config.json
//	golden/<name>.json                            per corpus text: ids without special
//	                                              tokens added (add_special_tokens false),
//	                                              ids with them (the post-processor's BOS),
//	                                              ids with special tokens treated as plain
//	                                              text, and the library's decode of the ids
//	golden/pretokenize.json                       splits of random strings by the GPT-2,
//	                                              Llama 3 and Qwen2 pre-tokenizer regexes
//
// The fixtures are made, not downloaded: the Qwen2 and Llama 3 ones take the first 2000
// merges of the gocoder byte-level BPE (a self-consistent subset: token 256+i is merge i),
// add a few merges for CJK characters and an emoji, and give it each model's
// pre-tokenizer, normalizer, added tokens and post-processor as the real tokenizer.json
// files have them. The Llama 2 ones come from a tiny SentencePiece-style BPE trained here
// over the corpus (byte fallback, ▁ for spaces).
//
// Tokenizers.js defaults worth knowing: encode() adds special tokens (runs the
// post-processor) unless add_special_tokens is false; decode() cleans up tokenization
// spaces (" ." -> ".") unless clean_up_tokenization_spaces is false. Both are explicit here.

import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const lib = await (async () => {
  const dir = process.argv[2];
  if (dir) {
    return import(pathToFileURL(path.join(dir, "@huggingface/tokenizers/dist/tokenizers.mjs")).href);
  }
  return import(createRequire(path.join(here, "x.js")).resolve("@huggingface/tokenizers"));
})();
const { Tokenizer, SplitPreTokenizer } = lib;
const LIBRARY = "@huggingface/tokenizers 0.2.0 (Tokenizers.js)";

const readJSON = (p) => JSON.parse(fs.readFileSync(path.join(here, p), "utf8"));
const writeJSON = (p, v, indent) => {
  fs.mkdirSync(path.dirname(path.join(here, p)), { recursive: true });
  fs.writeFileSync(path.join(here, p), JSON.stringify(v, null, indent) + "\n");
};

const GPT2_PATTERN = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
const LLAMA3_PATTERN = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const QWEN2_PATTERN = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// ---- GPT-2 bytes-to-unicode ----
const byteToChar = (() => {
  const bs = [];
  for (let b = 33; b <= 126; b++) bs.push(b);
  for (let b = 161; b <= 172; b++) bs.push(b);
  for (let b = 174; b <= 255; b++) bs.push(b);
  const cs = bs.slice();
  let n = 0;
  for (let b = 0; b < 256; b++) {
    if (!bs.includes(b)) {
      bs.push(b);
      cs.push(256 + n);
      n++;
    }
  }
  const m = new Array(256);
  bs.forEach((b, i) => (m[b] = String.fromCharCode(cs[i])));
  return m;
})();
const byteLevel = (s) => Array.from(new TextEncoder().encode(s), (b) => byteToChar[b]).join("");

// ---- byte-level fixtures from the gocoder vocabulary ----
function byteLevelBase(nMerges, extraChars) {
  const src = readJSON("gocoder/tokenizer.json");
  const inv = [];
  for (const [t, id] of Object.entries(src.model.vocab)) inv[id] = t;
  const vocab = {};
  for (let i = 0; i < 256 + nMerges; i++) vocab[inv[i]] = i;
  const merges = src.model.merges.slice(0, nMerges).map((m) => m.split(" "));
  const have = new Set(merges.map((m) => m.join(" ")));
  let next = 256 + nMerges;
  const add = (a, b) => {
    const key = a + " " + b;
    if (have.has(key)) return;
    have.add(key);
    merges.push([a, b]);
    if (!(a + b in vocab)) vocab[a + b] = next++;
  };
  for (const ch of extraChars) {
    const units = Array.from(byteLevel(ch));
    let left = units[0];
    for (let i = 1; i < units.length; i++) {
      add(left, units[i]);
      left += units[i];
    }
  }
  return { vocab, merges, next };
}

function addedToken(id, content, special = true) {
  return { id, content, single_word: false, lstrip: false, rstrip: false, normalized: !special, special };
}

function qwen2Fixture() {
  const { vocab, merges, next } = byteLevelBase(2000, ["的", "是", "模", "型", "中", "文", "🚀"]);
  const names = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];
  const tok = {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: names.map((n, i) => addedToken(next + i, n)),
    normalizer: { type: "NFC" },
    pre_tokenizer: {
      type: "Sequence",
      pretokenizers: [
        { type: "Split", pattern: { Regex: QWEN2_PATTERN }, behavior: "Isolated", invert: false },
        { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false },
      ],
    },
    post_processor: { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false },
    decoder: { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false },
    model: {
      type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: "", end_of_word_suffix: "",
      fuse_unk: false, byte_fallback: false, ignore_merges: false,
      vocab, merges: merges.map((m) => m.join(" ")),
    },
  };
  const cfg = {
    add_prefix_space: false, bos_token: null, eos_token: "<|im_end|>", pad_token: "<|endoftext|>",
    unk_token: null, clean_up_tokenization_spaces: false, errors: "replace", model_max_length: 32768,
    split_special_tokens: false, tokenizer_class: "Qwen2Tokenizer",
    additional_special_tokens: ["<|im_start|>", "<|im_end|>"],
  };
  return { tok, cfg };
}

function llama3Fixture() {
  const { vocab, merges, next } = byteLevelBase(2000, ["的", "是", "模", "型", "中", "文", "🚀"]);
  const names = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"];
  const bos = next;
  const tok = {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: names.map((n, i) => addedToken(next + i, n)),
    normalizer: null,
    pre_tokenizer: {
      type: "Sequence",
      pretokenizers: [
        { type: "Split", pattern: { Regex: LLAMA3_PATTERN }, behavior: "Isolated", invert: false },
        { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false },
      ],
    },
    post_processor: {
      type: "Sequence",
      processors: [
        { type: "ByteLevel", add_prefix_space: true, trim_offsets: false, use_regex: true },
        {
          type: "TemplateProcessing",
          single: [{ SpecialToken: { id: "<|begin_of_text|>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }],
          pair: [
            { SpecialToken: { id: "<|begin_of_text|>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } },
            { SpecialToken: { id: "<|begin_of_text|>", type_id: 1 } }, { Sequence: { id: "B", type_id: 1 } },
          ],
          special_tokens: { "<|begin_of_text|>": { id: "<|begin_of_text|>", ids: [bos], tokens: ["<|begin_of_text|>"] } },
        },
      ],
    },
    decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: {
      type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null,
      fuse_unk: false, byte_fallback: false, ignore_merges: true,
      vocab, merges, // the newer [a, b] merge format
    },
  };
  const cfg = {
    bos_token: "<|begin_of_text|>", eos_token: "<|eot_id|>", clean_up_tokenization_spaces: true,
    model_input_names: ["input_ids", "attention_mask"], model_max_length: 131072,
    tokenizer_class: "PreTrainedTokenizerFast",
  };
  return { tok, cfg };
}

// ---- a tiny SentencePiece-style BPE, trained over the corpus ----
function trainSentencePieceBPE(texts, nMerges) {
  const counts = new Map();
  const chars = new Map();
  for (const text of texts) {
    for (const line of text.split("\n")) {
      if (line.length === 0) continue;
      const norm = "▁" + line.replaceAll(" ", "▁");
      for (const w of norm.match(/▁*[^▁]+|▁+/gu) ?? []) counts.set(w, (counts.get(w) ?? 0) + 1);
      for (const c of norm) chars.set(c, (chars.get(c) ?? 0) + 1);
    }
  }
  // Characters seen at least twice, except control characters: those (like tabs and
  // newlines in Llama 2) and rare characters go through byte fallback.
  const alphabet = [...chars.entries()]
    .filter(([c, n]) => n >= 2 && c.codePointAt(0) >= 0x20)
    .sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1))
    .map(([c]) => c);
  const inAlphabet = new Set(alphabet);
  let words = [...counts.entries()].map(([w, n]) => [Array.from(w).map((c) => (inAlphabet.has(c) ? c : null)), n]);
  const merges = [];
  for (let k = 0; k < nMerges; k++) {
    const pairs = new Map();
    for (const [syms, n] of words) {
      for (let i = 0; i + 1 < syms.length; i++) {
        if (syms[i] === null || syms[i + 1] === null) continue;
        const key = syms[i] + "\u0000" + syms[i + 1];
        pairs.set(key, (pairs.get(key) ?? 0) + n);
      }
    }
    let best = null, bestN = 1;
    for (const [key, n] of pairs) {
      if (n > bestN || (n === bestN && best !== null && key < best)) {
        best = key;
        bestN = n;
      }
    }
    if (best === null) break;
    const [a, b] = best.split("\u0000");
    merges.push([a, b]);
    words = words.map(([syms, n]) => {
      const out = [];
      for (let i = 0; i < syms.length; i++) {
        if (i + 1 < syms.length && syms[i] === a && syms[i + 1] === b) {
          out.push(a + b);
          i++;
        } else out.push(syms[i]);
      }
      return [out, n];
    });
  }
  const vocab = { "<unk>": 0, "<s>": 1, "</s>": 2 };
  for (let b = 0; b < 256; b++) vocab[`<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`] = 3 + b;
  let next = 259;
  for (const c of alphabet) if (!(c in vocab)) vocab[c] = next++;
  for (const [a, b] of merges) if (!(a + b in vocab)) vocab[a + b] = next++;
  return { vocab, merges: merges.map((m) => m.join(" ")) };
}

function llama2Fixtures(texts) {
  const { vocab, merges } = trainSentencePieceBPE(texts, 700);
  const model = {
    type: "BPE", dropout: null, unk_token: "<unk>", continuing_subword_prefix: null, end_of_word_suffix: null,
    fuse_unk: true, byte_fallback: true, ignore_merges: false, vocab, merges,
  };
  const added = [addedToken(0, "<unk>"), addedToken(1, "<s>"), addedToken(2, "</s>")];
  const post = {
    type: "TemplateProcessing",
    single: [{ SpecialToken: { id: "<s>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }],
    pair: [
      { SpecialToken: { id: "<s>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } },
      { SpecialToken: { id: "<s>", type_id: 1 } }, { Sequence: { id: "B", type_id: 1 } },
    ],
    special_tokens: { "<s>": { id: "<s>", ids: [1], tokens: ["<s>"] } },
  };
  const decoder = {
    type: "Sequence",
    decoders: [
      { type: "Replace", pattern: { String: "▁" }, content: " " },
      { type: "ByteFallback" },
      { type: "Fuse" },
      { type: "Strip", content: " ", start: 1, stop: 0 },
    ],
  };
  // The legacy layout of Llama 2 and TinyLlama: the normalizer prepends ▁ and replaces
  // spaces; no pre-tokenizer.
  const legacy = {
    version: "1.0", truncation: null, padding: null, added_tokens: added,
    normalizer: {
      type: "Sequence",
      normalizers: [
        { type: "Prepend", prepend: "▁" },
        { type: "Replace", pattern: { String: " " }, content: "▁" },
      ],
    },
    pre_tokenizer: null, post_processor: post, decoder, model,
  };
  // The layout newer transformers versions write (legacy=false): a Metaspace
  // pre-tokenizer that prepends ▁ to the first section only and does not split.
  const metaspace = {
    ...legacy,
    normalizer: null,
    pre_tokenizer: { type: "Metaspace", replacement: "▁", prepend_scheme: "first", split: false },
  };
  const cfg = {
    add_bos_token: true, add_eos_token: false, bos_token: "<s>", eos_token: "</s>", unk_token: "<unk>",
    clean_up_tokenization_spaces: false, legacy: true, model_max_length: 2048, tokenizer_class: "LlamaTokenizer",
  };
  return { legacy, metaspace, cfg };
}

// ---- golden ids ----
function golden(name, tok, cfg, texts) {
  const t = new Tokenizer(tok, cfg);
  const plainJSON = { ...tok, added_tokens: tok.added_tokens.filter((a) => !a.special) };
  const plain = new Tokenizer(plainJSON, cfg);
  const cases = texts.map((text) => {
    const enc = t.encode(text, { add_special_tokens: false });
    const withSpecial = t.encode(text, { add_special_tokens: true }).ids;
    const noParse = plain.encode(text, { add_special_tokens: false }).ids;
    const decoded = enc.ids.length ? t.decode(enc.ids, { clean_up_tokenization_spaces: false }) : "";
    return { text, ids: enc.ids, ids_with_special: withSpecial, ids_no_parse_special: noParse, decoded };
  });
  writeJSON(`golden/${name}.json`, { tokenizer: name, library: LIBRARY, cases }, 0);
  let roundTrip = 0;
  for (const c of cases) if (c.decoded === c.text) roundTrip++;
  console.log(`${name}: ${cases.length} cases, ${Object.keys(tok.model.vocab).length} vocab, decode==text for ${roundTrip}`);
}

// ---- pre-tokenizer splits of random strings ----
function pretokenizeGolden(texts) {
  // A small deterministic PRNG (mulberry32) so reruns give the same strings.
  let seed = 20240601;
  const rand = () => {
    seed |= 0;
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const alphabet = [
    "a", "b", "Z", "é", "中", "ж", "1", "2", "9", "٣", "²", "Ⅻ", " ", " ", " ", "\t", "\n", "\r", "\u00a0",
    "\u3000", "\u0085", "\ufeff", "\u2028", "'", "'", "s", "S", "t", "T", "l", "L", "d", "D", "r", "R", "e", "E",
    "v", "V", "m", "M", ".", "!", "-", "_", "(", "😀", "\u0301", "\u200d", "$", "ा",
  ];
  const strings = [];
  for (let k = 0; k < 1000; k++) {
    const n = Math.floor(rand() * 24);
    let s = "";
    for (let i = 0; i < n; i++) s += alphabet[Math.floor(rand() * alphabet.length)];
    strings.push(s);
  }
  const all = [...texts, ...strings];
  const split = (pattern) => {
    const p = new SplitPreTokenizer({ type: "Split", pattern: { Regex: pattern }, behavior: "Isolated", invert: false });
    return (s) => p.pre_tokenize_text(s);
  };
  const gpt2 = split(GPT2_PATTERN), llama3 = split(LLAMA3_PATTERN), qwen2 = split(QWEN2_PATTERN);
  const cases = all.map((text) => ({ text, gpt2: gpt2(text), llama3: llama3(text), qwen2: qwen2(text) }));
  writeJSON("golden/pretokenize.json", {
    library: LIBRARY,
    note: "Split pre-tokenizer (behavior Isolated) with each regex; Tokenizers.js rewrites \\s to \\p{White_Space} as Oniguruma has it",
    patterns: { gpt2: GPT2_PATTERN, llama3: LLAMA3_PATTERN, qwen2: QWEN2_PATTERN },
    cases,
  }, 0);
  console.log(`pretokenize: ${cases.length} cases`);
}

const texts = readJSON("corpus.json").texts;

const gocoder = { tok: readJSON("gocoder/tokenizer.json"), cfg: readJSON("gocoder/tokenizer_config.json") };
golden("gocoder", gocoder.tok, gocoder.cfg, texts);

for (const [name, f] of [["qwen2", qwen2Fixture()], ["llama3", llama3Fixture()]]) {
  writeJSON(`${name}/tokenizer.json`, f.tok, 1);
  writeJSON(`${name}/tokenizer_config.json`, f.cfg, 2);
  golden(name, f.tok, f.cfg, texts);
}

const l2 = llama2Fixtures(texts);
for (const [name, tok] of [["llama2", l2.legacy], ["llama2-metaspace", l2.metaspace]]) {
  writeJSON(`${name}/tokenizer.json`, tok, 1);
  writeJSON(`${name}/tokenizer_config.json`, l2.cfg, 2);
  golden(name, tok, l2.cfg, texts);
}

pretokenizeGolden(texts);
