// Package tokenizer turns text into token ids and back exactly as a model's own
// tokenizer does, in pure Go.
//
// It reads three kinds of files:
//
//   - a Hugging Face tokenizer.json (with its tokenizer_config.json): byte-level BPE
//     with the GPT-2, Llama 3 or Qwen2 pre-tokenizer, and SentencePiece-style BPE
//     with byte fallback (Llama 2, TinyLlama), see [FromJSON];
//   - the vocabulary inside a GGUF file, tokenizer.ggml.model "gpt2" or "llama",
//     see [FromGGUF];
//   - a SentencePiece tokenizer.model of model type BPE, see [FromSentencePiece].
//
// [Load] picks the right one from a path.
//
// Encoding follows the Hugging Face tokenizers library step by step: added and
// special tokens are split out of the text first (longest match, leftmost first;
// special ones only when [EncodeOptions.ParseSpecial] is set, so untrusted text can
// be treated as plain text), each remaining section is normalized (NFC for Qwen2, the
// ▁ space handling of SentencePiece), cut into pre-tokens by a hand-written scanner
// that gives the same splits as the model's regular expression (Go's regexp has no
// lookahead), and each pre-token is merged by BPE. The results were checked against
// ids made by the Hugging Face library; see the package tests.
//
// Decoding turns ids back into bytes and then into a string, replacing invalid UTF-8
// the way Rust's String::from_utf8_lossy does. A [Stream] decodes one id at a time for
// streaming output: it never returns half a character and never drops bytes, and the
// concatenation of what it returns equals [Tokenizer.Decode] of all the ids.
//
// [Compatible] says whether a draft model's vocabulary can stand in for a target's
// in speculative decoding.
//
// A Tokenizer is immutable after it is loaded and safe for concurrent use.
//
// # Where the behaviour had to be chosen
//
// The reference is the Rust library that Hugging Face transformers uses; the golden
// ids of the tests come from its JavaScript port, which differs from it in a few
// corners. This package follows the Rust library in all of them:
//
//   - \s is Unicode White_Space (U+0085 is a space, U+FEFF is not) also in the
//     GPT-2 ByteLevel pattern, which the JavaScript port runs with JavaScript's \s;
//   - the case-insensitive contractions of Llama 3 and Qwen2 fold with Unicode
//     simple case folding, so 'ſ matches like 's (the port folds ASCII only);
//   - added tokens honour single_word, and lstrip/rstrip swallow White_Space;
//   - Metaspace with split true cuts before every ▁ (the port never splits).
//
// Other choices:
//
//   - Decoding is exact: clean_up_tokenization_spaces is never applied, so
//     Decode(Encode(s)) is s for byte-level BPE.
//   - Invalid UTF-8 becomes U+FFFD per maximal invalid subpart, also for runs of
//     byte-fallback tokens, where the Rust ByteFallback decoder writes one U+FFFD per
//     byte; this is what makes streaming without look-ahead possible. Valid text is
//     not affected.
//   - A SentencePiece vocabulary (tokenizer.model or GGUF "llama") recognises its
//     control tokens (<s>, </s>) in text when ParseSpecial is set, and puts the dummy
//     prefix space at the start of every stretch of text after one, as llama.cpp
//     and Hugging Face's legacy Llama tokenizer do; the sentencepiece library itself
//     never recognises them (use ParseSpecial false for its exact behaviour).
//   - A GGUF "gpt2" vocabulary with pre-tokenizer "qwen2" gets Qwen2's NFC
//     normalization, as its tokenizer.json has it.
//   - EOS lists more than the one eos_token; see [Tokenizer.EOS].
package tokenizer
