// llamacpp.mjs: a CPU speed benchmark of llama.cpp on one GGUF model, run through
// node-llama-cpp's prebuilt binaries. It is the llama.cpp reference point for this repository's
// own prefill/decode/verify numbers.
//
// It measures:
//   - prefill: one batch of --prompt-tokens (512) token ids evaluated into an empty context,
//     with logits for the last token only (the same as llama-bench's pp test). It reports the
//     best and the median tokens/s over --repeats runs, after --warmup untimed runs.
//   - decode at each context length in --contexts (512,4096): the context is filled with that
//     many tokens (untimed), then --decode-tokens single-token forwards are timed. Each forward
//     feeds one token and greedily picks the next one from its logits; the greedy pick is what
//     gets fed next. It reports tokens/s from the median per-token time and from the mean
//     (tokens / total time).
//   - verify at context --verify-context (512): for n = 1..--verify-max (8), a forward over n
//     appended tokens with logits (a greedy pick) at every position, as a speculative-decoding
//     verification step needs. The n tokens are then erased from the KV cache again. It reports
//     the median ms per forward and the ratio to n = 1, and the same with logits at the last
//     position only (which shows how much of the cost is node-llama-cpp's per-position sampling).
//
// Prompt and fill token ids come from a seeded PRNG (mulberry32, --seed) over the model's
// vocabulary, leaving out control, special, end-of-generation, unknown and unused tokens, so
// runs are repeatable. The prefill prompt is the first --prompt-tokens of the fill stream.
//
// Set-up, once, outside the repository (the script needs only node-llama-cpp):
//   mkdir -p /tmp/peer && cd /tmp/peer && npm init -y >/dev/null && npm install node-llama-cpp@3.22.1
// Run. node-llama-cpp is resolved from the current directory, from NODE_PATH, or from next to
// the script:
//   cd /tmp/peer && node /path/to/examples/realscale/llamacpp.mjs --model M.gguf [--threads 2]
//   NODE_PATH=/tmp/peer/node_modules node examples/realscale/llamacpp.mjs --model M.gguf
// Options (defaults in brackets):
//   --model PATH          GGUF file (required)
//   --threads N           n_threads for both batch and single-token evaluation [2]
//   --repeats N           timed prefill runs [3]
//   --warmup N            untimed prefill runs before them [1]
//   --prompt-tokens N     prefill prompt length, evaluated as one batch [512]
//   --decode-tokens N     timed single-token forwards for each context length [32]
//   --contexts LIST       context lengths to measure decode at [512,4096]
//   --verify-context N    context length for the verify timings [512]; 0 skips them
//   --verify-max N        largest verify batch [8]
//   --verify-repeats N    timed forwards for each verify batch size [5]
//   --seed N              PRNG seed for the token ids [1234]
//   --flash-attention X   auto | on | off [auto, node-llama-cpp's default]
//   --verbose             also copy llama.cpp's warnings and errors to stderr
// Output: a single JSON object on stdout. Errors go to stderr, with exit status 1.
//
// Notes:
//   - gpu: false. The CPU variant that ggml loaded (e.g. "zen4") is taken from llama.cpp's
//     "load_backend" log line, or failing that from /proc/self/maps.
//   - Each context is created with at least L + decode-tokens + verify-max + 8 cells, where L is
//     its context length. Positions past the model's trained context length are only a warning
//     in llama.cpp; a decode run that uses them is marked beyond_train_context. If creating a context
//     fails anyway, the script retries with the largest size node-llama-cpp will create, fills
//     less, and records that (context_limited, filled_tokens).
//   - node-llama-cpp queues each evaluation through its JS batching layer and runs it on a libuv
//     worker thread, and each position that gets logits costs one more native sampleToken call
//     (about 0.25 ms each for an 8k vocabulary on a 2-vCPU machine). That fixed per-call cost
//     only matters for very small models; the verify last_only_* numbers show its size.
//   - The prebuilt CPU binaries are built without OpenMP, and node-llama-cpp doesn't attach a
//     persistent ggml threadpool, so each forward with n_threads > 1 starts and joins fresh
//     worker threads. On small machines (for example 2 vCPUs) that can make single-token forwards
//     with --threads 2 slower than with --threads 1. node-llama-cpp has no option for that.

import {createRequire} from "node:module";
import {existsSync, readFileSync} from "node:fs";
import path from "node:path";
import {pathToFileURL, fileURLToPath} from "node:url";
import {parseArgs} from "node:util";

// ---------- command line ----------

const {values: opt} = parseArgs({
    options: {
        "model": {type: "string"},
        "threads": {type: "string", default: "2"},
        "repeats": {type: "string", default: "3"},
        "warmup": {type: "string", default: "1"},
        "prompt-tokens": {type: "string", default: "512"},
        "decode-tokens": {type: "string", default: "32"},
        "contexts": {type: "string", default: "512,4096"},
        "verify-context": {type: "string", default: "512"},
        "verify-max": {type: "string", default: "8"},
        "verify-repeats": {type: "string", default: "5"},
        "seed": {type: "string", default: "1234"},
        "flash-attention": {type: "string", default: "auto"},
        "verbose": {type: "boolean", default: false},
        "help": {type: "boolean", short: "h", default: false}
    },
    strict: true
});

if (opt.help || opt.model == null) {
    const lines = readFileSync(fileURLToPath(import.meta.url), "utf8").split("\n");
    const header = lines.slice(0, lines.findIndex((line) => !line.startsWith("//")))
        .map((line) => line.replace(/^\/\/ ?/, ""));
    (opt.help ? console.log : console.error)(header.join("\n"));
    process.exit(opt.help ? 0 : 2);
}

function intOption(name, min) {
    const value = Number(opt[name]);
    if (!Number.isInteger(value) || value < min)
        fail(`--${name} must be an integer >= ${min}, got ${JSON.stringify(opt[name])}`);
    return value;
}

const modelPath = path.resolve(opt.model);
if (!existsSync(modelPath))
    fail(`no such model file: ${modelPath}`);
const threads = intOption("threads", 1);
const repeats = intOption("repeats", 1);
const warmup = intOption("warmup", 0);
const promptTokens = intOption("prompt-tokens", 1);
const decodeTokens = intOption("decode-tokens", 1);
const verifyContext = intOption("verify-context", 0);
const verifyMax = intOption("verify-max", 1);
const verifyRepeats = intOption("verify-repeats", 1);
const seed = intOption("seed", 0);
const contexts = opt.contexts.split(",").map((s) => Number(s.trim()));
if (contexts.some((c) => !Number.isInteger(c) || c < 1))
    fail(`--contexts must be a comma-separated list of positive integers, got ${JSON.stringify(opt.contexts)}`);
const flashAttentionOption = {auto: "auto", on: true, off: false}[opt["flash-attention"]];
if (flashAttentionOption === undefined)
    fail(`--flash-attention must be auto, on or off, got ${JSON.stringify(opt["flash-attention"])}`);

// Cells kept free after the measured tokens: verify appends up to verifyMax tokens, and
// node-llama-cpp shifts the context once a sequence reaches contextSize - 1.
const spareCells = Math.max(8, verifyMax) + 8;

function fail(message) {
    console.error(`llamacpp.mjs: ${message}`);
    process.exit(1);
}

// ---------- node-llama-cpp, resolved from cwd / NODE_PATH / next to the script ----------

async function importNodeLlamaCpp() {
    const bases = [path.join(process.cwd(), "noop.js"), fileURLToPath(import.meta.url)];
    for (const base of bases) {
        try {
            const require = createRequire(base);
            const entry = require.resolve("node-llama-cpp");   // honours NODE_PATH
            const module = await import(pathToFileURL(entry).href);
            let version = null;
            try {
                const pkgPath = path.join(entry.slice(0, entry.lastIndexOf(`${path.sep}dist${path.sep}`)), "package.json");
                version = JSON.parse(readFileSync(pkgPath, "utf8")).version ?? null;
            } catch {
                // the version is informational only
            }
            return {module, version};
        } catch (err) {
            if (err?.code !== "MODULE_NOT_FOUND")
                throw err;
        }
    }
    fail("cannot find node-llama-cpp: run from the folder holding its node_modules, or set NODE_PATH=/that/folder/node_modules");
}

// ---------- small helpers ----------

/** mulberry32: a tiny seeded PRNG returning floats in [0, 1). */
function mulberry32(a) {
    return () => {
        a = (a + 0x6D2B79F5) | 0;
        let t = Math.imul(a ^ (a >>> 15), 1 | a);
        t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
        return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
}

function median(xs) {
    const s = [...xs].sort((a, b) => a - b);
    const m = s.length >> 1;
    return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length;
const round = (x, digits = 3) => (x == null || !Number.isFinite(x)) ? null : Number(x.toFixed(digits));
const now = () => performance.now();

// ---------- set-up ----------

const {module: nlc, version: nodeLlamaCppVersion} = await importNodeLlamaCpp();
const {getLlama, LlamaLogLevel} = nlc;

// llama.cpp logs are captured, not printed: stdout carries only the JSON result.
const logState = {cpuBackendPath: null, flashAttention: null, nCtx: null, warnings: []};
function onLog(level, message) {
    const text = String(message).trim();
    if (text === "")
        return;
    const backend = /load_backend: loaded CPU backend from (\S+)/.exec(text);
    if (backend != null)
        logState.cpuBackendPath = backend[1];
    const nCtx = /llama_context: n_ctx\s*=\s*(\d+)/.exec(text);
    if (nCtx != null)
        logState.nCtx = Number(nCtx[1]);
    const fa = /Flash Attention (enabled|disabled)|flash_attn\s*=\s*(enabled|disabled)/i.exec(text);
    if (fa != null)
        logState.flashAttention = (fa[1] ?? fa[2]).toLowerCase();
    if (level === LlamaLogLevel.warn || level === LlamaLogLevel.error || level === LlamaLogLevel.fatal) {
        if (!logState.warnings.includes(text) && logState.warnings.length < 20)
            logState.warnings.push(text);
        if (opt.verbose)
            console.error(`[llama.cpp ${level}] ${text}`);
    }
}

// maxThreads: 0 lifts node-llama-cpp's thread cap, so a context uses exactly the threads it asks for.
const llama = await getLlama({gpu: false, logLevel: LlamaLogLevel.log, logger: onLog, maxThreads: 0});
const model = await llama.loadModel({modelPath, gpuLayers: 0});

function cpuVariant() {
    let libPath = logState.cpuBackendPath;
    if (libPath == null) {
        try {
            libPath = readFileSync("/proc/self/maps", "utf8").split("\n")
                .map((line) => line.trim().split(/\s+/).pop())
                .find((p) => /libggml-cpu[^/]*\.(so|dylib|dll)$/.test(p ?? "")) ?? null;
        } catch {
            // not Linux; leave it unknown
        }
    }
    if (libPath == null)
        return {variant: null, library: null};
    const match = /libggml-cpu-?([^/.]*)\.(so|dylib|dll)$/.exec(libPath);
    return {variant: match?.[1] || "generic", library: libPath};
}

/** Token ids usable as "ordinary text": no control, special, EOG, unknown or unused tokens. */
function ordinaryTokens() {
    const pool = [];
    for (const token of model.iterateAllTokens()) {
        const attrs = model.getTokenAttributes(token);
        if (attrs.control || attrs.unknown || attrs.unused || attrs.undefined)
            continue;
        if (model.isSpecialToken(token) || model.isEogToken(token))
            continue;
        pool.push(token);
    }
    return pool;
}

const pool = ordinaryTokens();
if (pool.length === 0)
    fail("no ordinary tokens found in the model's vocabulary");
const random = mulberry32(seed);
const maxFill = Math.max(promptTokens, verifyContext, ...contexts);
const stream = Array.from({length: maxFill + verifyMax + decodeTokens}, () => pool[Math.floor(random() * pool.length)]);
const fillTokens = stream.slice(0, maxFill);
const extraTokens = stream.slice(maxFill);   // appended by the verify and decode phases

/**
 * Create a context with room for `tokens` tokens plus spare cells, in one batch of at least
 * `batchSize` tokens. If the exact size is refused, fall back to the largest size
 * node-llama-cpp creates for this model.
 */
async function createContext(tokens, batchSize) {
    const wanted = tokens + spareCells;
    const base = {sequences: 1, batchSize, threads: {ideal: threads, min: threads}, flashAttention: flashAttentionOption};
    logState.flashAttention = null;
    logState.nCtx = null;
    try {
        const context = await model.createContext({...base, contextSize: wanted});
        return {context, wanted, limited: false, error: null};
    } catch (err) {
        const context = await model.createContext({...base, contextSize: {max: wanted}});
        return {context, wanted, limited: true, error: String(err?.message ?? err)};
    }
}

function contextInfo({context, wanted, limited, error}) {
    return {
        requested_size: wanted,
        context_size: context.contextSize,       // as node-llama-cpp reports it
        llama_cpp_n_ctx: logState.nCtx,          // as llama.cpp allocated it (padded to 256)
        batch_size: context.batchSize,
        threads: context.currentThreads,
        flash_attention: logState.flashAttention,
        context_limited: limited,
        ...(error != null ? {create_error: error} : {})
    };
}

// ---------- measurements ----------

/** Prefill: promptTokens in one batch from an empty context, logits for the last token only. */
async function measurePrefill(sequence) {
    const prompt = fillTokens.slice(0, promptTokens);
    const input = prompt.map((token, i) => i === prompt.length - 1
        ? [token, {generateNext: {token: true, options: {temperature: 0}}}]
        : token);
    const runsMs = [];
    for (let i = 0; i < warmup + repeats; i++) {
        await sequence.clearHistory();
        const t0 = now();
        await sequence.controlledEvaluate(input);
        const ms = now() - t0;
        if (i >= warmup)
            runsMs.push(ms);
    }
    return {
        prompt_tokens: promptTokens,
        warmup,
        repeats,
        runs_ms: runsMs.map((ms) => round(ms)),
        tokens_per_s_best: round(promptTokens / Math.min(...runsMs) * 1000, 2),
        tokens_per_s_median: round(promptTokens / median(runsMs) * 1000, 2)
    };
}

/** Bring the sequence to exactly `length` fill tokens (untimed, in batches of the context's batch size). */
async function fillTo(sequence, length) {
    const target = fillTokens.slice(0, length);
    if (sequence.nextTokenIndex > length || sequence.compareContextTokens(target).firstDifferentIndex < sequence.nextTokenIndex)
        await sequence.eraseContextTokenRanges([{start: 0, end: sequence.nextTokenIndex}]);
    const t0 = now();
    if (sequence.nextTokenIndex < length)
        await sequence.evaluateWithoutGeneratingNewTokens(target.slice(sequence.nextTokenIndex));
    return now() - t0;
}

/**
 * Verify: n appended tokens with a greedy pick at every position, then erased again.
 * Each n gets one untimed forward first. The same forward with a pick at the last position
 * only is timed too: the difference is node-llama-cpp's per-position sampling cost (one native
 * sampleToken call per position), not llama.cpp's.
 */
async function timeAppendAndErase(sequence, base, tokens, pickAll) {
    const pick = {generateNext: {token: true, options: {temperature: 0}}};
    const input = tokens.map((token, i) => (pickAll || i === tokens.length - 1) ? [token, pick] : token);
    const expected = pickAll ? tokens.length : 1;
    const times = [];
    for (let r = 0; r < 1 + verifyRepeats; r++) {
        const t0 = now();
        const out = await sequence.controlledEvaluate(input);
        const ms = now() - t0;
        const picks = out.filter((o) => o?.next?.token != null).length;
        if (picks !== expected)
            throw new Error(`verify n=${tokens.length}: expected ${expected} greedy picks, got ${picks}`);
        await sequence.eraseContextTokenRanges([{start: base, end: sequence.nextTokenIndex}]);
        if (sequence.nextTokenIndex !== base)
            throw new Error(`verify n=${tokens.length}: erase left ${sequence.nextTokenIndex} tokens, expected ${base}`);
        if (r > 0)
            times.push(ms);
    }
    return median(times);
}

async function measureVerify(sequence, base) {
    const all = {}, last = {};
    for (let n = 1; n <= verifyMax; n++) {
        const tokens = extraTokens.slice(0, n);
        all[n] = await timeAppendAndErase(sequence, base, tokens, true);
        last[n] = await timeAppendAndErase(sequence, base, tokens, false);
    }
    const table = (ms) => Object.fromEntries(Object.entries(ms).map(([n, v]) => [n, round(v)]));
    const ratio = (ms) => Object.fromEntries(Object.entries(ms).map(([n, v]) => [n, round(v / ms[1])]));
    return {
        context: base,
        repeats: verifyRepeats,
        method: "LlamaContextSequence.controlledEvaluate of n tokens appended at the context end, then eraseContextTokenRanges back to it",
        ms_per_forward: table(all),              // logits + greedy pick at all n positions
        ratio_to_n1: ratio(all),
        last_only_ms_per_forward: table(last),   // logits + greedy pick at the last position only
        last_only_ratio_to_n1: ratio(last)
    };
}

/**
 * Decode: decodeTokens single-token forwards, each one feeding one token and picking the next
 * one greedily from its logits. The sequence's evaluate() generator is the lowest-overhead way
 * to do this: it reuses one sampler, and each next() is one llama_decode of one token plus one
 * greedy sample. yieldEogToken keeps it from stopping at an end-of-generation token.
 */
async function measureDecode(sequence) {
    const start = sequence.nextTokenIndex;
    const times = [];
    const iterator = sequence.evaluate([extraTokens[0]], {temperature: 0, yieldEogToken: true});
    try {
        for (let i = 0; i < decodeTokens; i++) {
            const t0 = now();
            const {done} = await iterator.next();
            times.push(now() - t0);
            if (done)
                throw new Error(`decode stopped after ${i} tokens`);
        }
    } finally {
        await iterator.return();
    }
    if (sequence.nextTokenIndex !== start + decodeTokens)
        throw new Error(`decode: the context holds ${sequence.nextTokenIndex} tokens, expected ${start + decodeTokens}`);
    const medianMs = median(times);
    const totalMs = times.reduce((a, b) => a + b, 0);
    return {
        tokens: decodeTokens,
        start_position: start,
        per_token_ms: {median: round(medianMs), mean: round(totalMs / times.length), min: round(Math.min(...times)), max: round(Math.max(...times)), first: round(times[0])},
        tokens_per_s_median: round(1000 / medianMs, 2),
        tokens_per_s_mean: round(decodeTokens / totalMs * 1000, 2)
    };
}

// ---------- run ----------

const result = {
    tool: "node-llama-cpp",
    node_llama_cpp_version: nodeLlamaCppVersion,
    llama_cpp: {...llama.llamaCppRelease, build_type: llama.buildType},
    system_info: llama.systemInfo.trim(),
    cpu_backend: cpuVariant(),
    gpu: llama.gpu,
    model: modelPath,
    model_info: {
        architecture: model.architecture ?? null,
        type: model.typeDescription ?? null,
        size_bytes: model.size,
        train_context: model.trainContextSize,
        vocab_size: model.fileInfo?.metadata?.tokenizer?.ggml?.tokens?.length ?? null,
        ordinary_tokens: pool.length,
        flash_attention_supported: model.flashAttentionSupported
    },
    n_threads: threads,
    flash_attention_option: flashAttentionOption,
    seed,
    prefill_tokens_per_s: null,
    prefill_tokens_per_s_median: null,
    decode_tokens_per_s: {},
    prefill: null,
    decode: {},
    verify: null,
    verify_note: null,
    warnings: null
};

// Contexts, smallest first. Prefill runs in the first one (made big enough for the prompt), and
// verify in the one whose length is --verify-context.
const lengths = [...new Set([...contexts, ...(verifyContext > 0 ? [verifyContext] : [])])].sort((a, b) => a - b);
let prefillDone = false;
for (const length of lengths) {
    const needPrefill = !prefillDone;
    const created = await createContext(Math.max(length, needPrefill ? promptTokens : 0) + decodeTokens,
        Math.max(512, promptTokens));
    const {context} = created;
    const sequence = context.getSequence();
    try {
        if (needPrefill) {
            result.prefill = {...await measurePrefill(sequence), context_size: context.contextSize, batch_size: context.batchSize};
            result.prefill_tokens_per_s = result.prefill.tokens_per_s_best;
            result.prefill_tokens_per_s_median = result.prefill.tokens_per_s_median;
            prefillDone = true;
        }

        const fill = Math.min(length, context.contextSize - decodeTokens - spareCells);
        const fillMs = await fillTo(sequence, fill);

        if (length === verifyContext)
            result.verify = {...await measureVerify(sequence, fill), context_limited: fill < length};

        if (contexts.includes(length)) {
            const decode = await measureDecode(sequence);
            // read after the measurements: node-llama-cpp hands llama.cpp's log lines over asynchronously
            result.decode[length] = {...contextInfo(created), filled_tokens: fill, fill_ms: round(fillMs),
                beyond_train_context: fill + decodeTokens > model.trainContextSize, ...decode};
            result.decode_tokens_per_s[length] = {median: decode.tokens_per_s_median, mean: decode.tokens_per_s_mean};
        }
    } finally {
        await context.dispose();
    }
}

if (verifyContext === 0)
    result.verify_note = "verify timings skipped (--verify-context 0)";
else if (result.verify == null)
    result.verify_note = "verify timings not measured";
result.cpu_backend = cpuVariant();
result.warnings = logState.warnings;

console.log(JSON.stringify(result, null, 2));
await model.dispose();
await llama.dispose();
