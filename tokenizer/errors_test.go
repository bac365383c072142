package tokenizer

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/format/gguf"
)

// miniJSON is a small valid byte-level tokenizer.json: bytes "a", "b", "c", " " (as
// "Ġ"), merges a+b and ab+c.
const miniJSON = `{
 "added_tokens": [{"id": 7, "content": "<|end|>", "special": true}],
 "normalizer": null,
 "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
 "post_processor": null,
 "decoder": {"type": "ByteLevel"},
 "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "Ġ": 3, "ab": 4, "abc": 5, "<|end|>": 7},
           "merges": ["a b", "ab c"]}
}`

func TestMiniJSON(t *testing.T) {
	tok, err := FromJSON([]byte(miniJSON), nil)
	require.NoError(t, err)
	assert.Equal(t, 8, tok.VocabSize())
	assert.Equal(t, []int32{5, 3, 4, 7}, tok.Encode("abc ab<|end|>", EncodeOptions{ParseSpecial: true}))
	assert.Equal(t, "abc ab<|end|>", tok.Decode([]int32{5, 3, 4, 7, 6})) // 6 is a gap: skipped
	_, ok := tok.Token(6)
	assert.False(t, ok)
	assert.True(t, tok.IsSpecial(7))
	assert.Equal(t, []int32{7}, tok.EOS()) // <|end|> is a known end-of-turn marker
}

func TestFromJSONErrors(t *testing.T) {
	edit := func(old, new string) string {
		if !strings.Contains(miniJSON, old) {
			panic("edit: " + old)
		}
		return strings.Replace(miniJSON, old, new, 1)
	}
	tests := []struct {
		name, json, config, want string
	}{
		{"bad JSON", `{"model": `, "", "not valid JSON"},
		{"not an object", `[1, 2]`, "", "not valid JSON"},
		{"no model", `{"added_tokens": []}`, "", `no "model"`},
		{"unknown model type", edit(`"type": "BPE"`, `"type": "WordPiece"`), "", `model type "WordPiece" is not supported`},
		{"missing vocab", edit(`"vocab": {"a": 0, "b": 1, "c": 2, "Ġ": 3, "ab": 4, "abc": 5, "<|end|>": 7},`, ``), "", `no "vocab"`},
		{"vocab is a list", edit(`"vocab": {"a": 0, "b": 1, "c": 2, "Ġ": 3, "ab": 4, "abc": 5, "<|end|>": 7}`, `"vocab": [["a", 0]]`), "", "not an object of token ids"},
		{"duplicate ids", edit(`"ab": 4`, `"ab": 2`), "", `id 2 is given to both "ab" and "c"`},
		{"negative id", edit(`"ab": 4`, `"ab": -4`), "", `token "ab" has id -4`},
		{"sparse ids", edit(`"ab": 4`, `"ab": 400000`), "", "too sparse"},
		{"merge of unknown token", edit(`"ab c"`, `"ab x"`), "", `merge 1 ("ab" "x"): "x" is not in the vocab`},
		{"merged token missing", edit(`"a b"`, `"a c"`), "", `the merged token "ac" is not in the vocab`},
		{"merge with three parts", edit(`"a b"`, `"a b c"`), "", `merge 0 "a b c" is not two tokens`},
		{"merges not a list", edit(`"merges": ["a b", "ab c"]`, `"merges": {"a": 1}`), "", "merges: not a list"},
		{"added token without id", edit(`{"id": 7, "content": "<|end|>"`, `{"content": "<|end|>"`), "", "has no id"},
		{"duplicate added ids", edit(`[{"id": 7, "content": "<|end|>", "special": true}]`, `[{"id": 7, "content": "<|end|>"}, {"id": 7, "content": "<x>"}]`), "", `id 7 is given to both "<|end|>" and "<x>"`},
		{"split on an empty string", edit(`{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}`, `{"type": "Split", "pattern": {"String": ""}, "behavior": "MergedWithPrevious"}`), "", "Split with an empty String pattern"},
		{"split on a string, removed", edit(`{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}`, `{"type": "Split", "pattern": {"String": " "}, "behavior": "Removed"}`), "", `Split on a String with behavior "Removed" is not supported`},
		{"split without a pattern", edit(`{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}`, `{"type": "Split", "behavior": "Isolated"}`), "", "Split has neither a Regex nor a String pattern"},
		{"unknown pre-tokenizer regex", edit(`{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}`, `{"type": "Split", "pattern": {"Regex": "\\d+"}, "behavior": "Isolated"}`), "", `Split regex "\\d+" is not supported`},
		{"unknown normalizer", edit(`"normalizer": null`, `"normalizer": {"type": "BertNormalizer"}`), "", `normalizer type "BertNormalizer" is not supported`},
		{"no decoder", edit(`"decoder": {"type": "ByteLevel"}`, `"decoder": null`), "", "decoder: there is none"},
		{"unknown decoder", edit(`"decoder": {"type": "ByteLevel"}`, `"decoder": {"type": "WordPiece"}`), "", `decoder type "WordPiece" is not supported`},
		{"unk token not in vocab", edit(`"type": "BPE",`, `"type": "BPE", "unk_token": "<unk>",`), "", `unk_token "<unk>" is not in the vocab`},
		{"dropout", edit(`"type": "BPE",`, `"type": "BPE", "dropout": 0.1,`), "", "dropout"},
		{"template id not in vocab", edit(`"post_processor": null`, `"post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}], "special_tokens": {"<s>": {"id": "<s>", "ids": [6]}}}`), "", `special token "<s>" has id 6, which is not in the vocabulary`},
		{"unknown post-processor", edit(`"post_processor": null`, `"post_processor": {"type": "BertProcessing"}`), "", `post-processor type "BertProcessing" is not supported`},
		{"bad config", miniJSON, `{"bos_token": 5`, "tokenizer_config.json is not valid"},
		{"config bos not in vocab", miniJSON, `{"bos_token": "<s>"}`, `bos_token "<s>" is not in the vocabulary`},
		{"config add_bos without bos", miniJSON, `{"add_bos_token": true}`, "add_bos_token is true but there is no bos_token"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var cfg []byte
			if tc.config != "" {
				cfg = []byte(tc.config)
			}
			_, err := FromJSON([]byte(tc.json), cfg)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.True(t, strings.HasPrefix(err.Error(), "tokenizer.json: "), err.Error())
		})
	}
}

// ggufBytes writes a GGUF file with the given metadata and no tensors.
func ggufBytes(t testing.TB, kv []gguf.KeyValue) []byte {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, gguf.Write(&buf, kv, nil, 0))
	return buf.Bytes()
}

func miniGGUF(model string) []gguf.KeyValue {
	kv := []gguf.KeyValue{
		{Key: "tokenizer.ggml.model", Value: gguf.String(model)},
		{Key: "tokenizer.ggml.bos_token_id", Value: gguf.Uint32(1)},
		{Key: "tokenizer.ggml.eos_token_id", Value: gguf.Uint32(2)},
	}
	if model == "llama" {
		tokens := []string{"<unk>", "<s>", "</s>", "▁", "a", "b", "▁a", "ab", "▁ab"}
		types := []int32{2, 3, 3, 1, 1, 1, 1, 1, 1}
		for b := range 256 {
			tokens = append(tokens, byteName(byte(b)))
			types = append(types, typeByte)
		}
		scores := make([]float32, len(tokens))
		for i := range scores {
			scores[i] = -float32(i)
		}
		return append(kv,
			gguf.KeyValue{Key: "tokenizer.ggml.tokens", Value: gguf.Strings(tokens)},
			gguf.KeyValue{Key: "tokenizer.ggml.token_type", Value: gguf.Int32s(types)},
			gguf.KeyValue{Key: "tokenizer.ggml.scores", Value: gguf.Float32s(scores)})
	}
	tokens := []string{"<|endoftext|>", "<s>", "</s>"}
	types := []int32{3, 3, 3}
	for b := range 256 {
		tokens = append(tokens, string(byteToRune[b]))
		types = append(types, typeNormal)
	}
	tokens = append(tokens, "ab", "Ġab")
	types = append(types, typeNormal, typeNormal)
	return append(kv,
		gguf.KeyValue{Key: "tokenizer.ggml.pre", Value: gguf.String("gpt-2")},
		gguf.KeyValue{Key: "tokenizer.ggml.tokens", Value: gguf.Strings(tokens)},
		gguf.KeyValue{Key: "tokenizer.ggml.token_type", Value: gguf.Int32s(types)},
		gguf.KeyValue{Key: "tokenizer.ggml.merges", Value: gguf.Strings([]string{"a b", "Ġ ab"})})
}

func byteName(b byte) string {
	const hex = "0123456789ABCDEF"
	return "<0x" + string(hex[b>>4]) + string(hex[b&15]) + ">"
}

func TestMiniGGUF(t *testing.T) {
	f, err := gguf.Parse(ggufBytes(t, miniGGUF("llama")))
	require.NoError(t, err)
	tok, err := FromGGUF(f)
	require.NoError(t, err)
	// "▁ab": of the pairs "▁a" (score -6) and "ab" (-7), "▁a" merges first, then
	// "▁a"+"b" gives "▁ab".
	assert.Equal(t, []int32{1, 8}, tok.Encode("ab", tok.DefaultOptions()))
	assert.Equal(t, "ab", tok.Decode(tok.Encode("ab", EncodeOptions{})))
	// "é" is not a piece: byte fallback.
	assert.Equal(t, []int32{6, 9 + 0xC3, 9 + 0xA9}, tok.Encode("aé", EncodeOptions{}))
	assert.Equal(t, "aé", tok.Decode(tok.Encode("aé", EncodeOptions{})))

	f, err = gguf.Parse(ggufBytes(t, miniGGUF("gpt2")))
	require.NoError(t, err)
	tok, err = FromGGUF(f)
	require.NoError(t, err)
	assert.False(t, tok.DefaultOptions().AddBOS)
	ab := int32(3 + 256)
	assert.Equal(t, []int32{ab, ab + 1, 0}, tok.Encode("ab ab<|endoftext|>", EncodeOptions{ParseSpecial: true}))
	assert.Equal(t, []int32{2, 0}, tok.EOS())
}

func TestFromGGUFErrors(t *testing.T) {
	without := func(kv []gguf.KeyValue, key string) []gguf.KeyValue {
		var out []gguf.KeyValue
		for _, e := range kv {
			if e.Key != key {
				out = append(out, e)
			}
		}
		return out
	}
	set := func(kv []gguf.KeyValue, key string, v gguf.Value) []gguf.KeyValue {
		return append(without(kv, key), gguf.KeyValue{Key: key, Value: v})
	}
	tests := []struct {
		name string
		kv   []gguf.KeyValue
		want string
	}{
		{"no model", without(miniGGUF("llama"), "tokenizer.ggml.model"), "tokenizer.ggml.model"},
		{"unknown model", set(miniGGUF("llama"), "tokenizer.ggml.model", gguf.String("bert")), `tokenizer.ggml.model "bert" is not supported`},
		{"no tokens", without(miniGGUF("llama"), "tokenizer.ggml.tokens"), "tokenizer.ggml.tokens"},
		{"empty tokens", set(miniGGUF("gpt2"), "tokenizer.ggml.tokens", gguf.Strings(nil)), "tokenizer.ggml.tokens is empty"},
		{"tokens are not strings", set(miniGGUF("gpt2"), "tokenizer.ggml.tokens", gguf.Int32s([]int32{1})), "tokenizer.ggml.tokens"},
		{"scores length", set(miniGGUF("llama"), "tokenizer.ggml.scores", gguf.Float32s([]float32{0, 1})), "tokenizer.ggml.scores has 2 entries for 265 tokens"},
		{"no scores", without(miniGGUF("llama"), "tokenizer.ggml.scores"), "tokenizer.ggml.scores"},
		{"types length", set(miniGGUF("gpt2"), "tokenizer.ggml.token_type", gguf.Int32s([]int32{1})), "tokenizer.ggml.token_type has 1 entries for 261 tokens"},
		{"no merges", without(miniGGUF("gpt2"), "tokenizer.ggml.merges"), "tokenizer.ggml.merges"},
		{"bad merge", set(miniGGUF("gpt2"), "tokenizer.ggml.merges", gguf.Strings([]string{"a x"})), `tokenizer.ggml.merges[0] "a x"`},
		{"merge without space", set(miniGGUF("gpt2"), "tokenizer.ggml.merges", gguf.Strings([]string{"ab"})), "not two tokens"},
		{"unknown pre", set(miniGGUF("gpt2"), "tokenizer.ggml.pre", gguf.String("falcon")), "tokenizer.ggml.pre falcon is not supported"},
		{"no pre", without(miniGGUF("gpt2"), "tokenizer.ggml.pre"), "tokenizer.ggml.pre (missing) is not supported"},
		{"bos out of range", set(miniGGUF("gpt2"), "tokenizer.ggml.bos_token_id", gguf.Uint32(9999)), "tokenizer.ggml.bos_token_id 9999 is outside the vocabulary"},
		{"add_bos not bool", set(miniGGUF("gpt2"), "tokenizer.ggml.add_bos_token", gguf.Uint32(1)), "tokenizer.ggml.add_bos_token"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := gguf.Parse(ggufBytes(t, tc.kv))
			require.NoError(t, err)
			_, err = FromGGUF(f)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// A small SentencePiece model, written with the protobuf wire format.
func appendVarint(b []byte, x uint64) []byte { return binary.AppendUvarint(b, x) }

func appendKey(b []byte, field, wireType int) []byte {
	return appendVarint(b, uint64(field)<<3|uint64(wireType))
}

func appendBytesField(b []byte, field int, data []byte) []byte {
	b = appendKey(b, field, 2)
	b = appendVarint(b, uint64(len(data)))
	return append(b, data...)
}

func appendVarintField(b []byte, field int, x uint64) []byte {
	return appendVarint(appendKey(b, field, 0), x)
}

func spPieceBytes(piece string, score float32, typ int) []byte {
	b := appendBytesField(nil, 1, []byte(piece))
	b = appendKey(b, 2, 5)
	b = binary.LittleEndian.AppendUint32(b, math.Float32bits(score))
	if typ != typeNormal {
		b = appendVarintField(b, 3, uint64(typ))
	}
	return b
}

// miniSentencePiece returns a model with <unk> <s> </s>, the 256 byte pieces, and
// "▁", "a", "b", "▁a", "ab", "▁ab" (scores 0, -1, -2, ...).
func miniSentencePiece() []byte {
	var b []byte
	b = appendBytesField(b, 1, spPieceBytes("<unk>", 0, typeUnknown))
	b = appendBytesField(b, 1, spPieceBytes("<s>", 0, typeControl))
	b = appendBytesField(b, 1, spPieceBytes("</s>", 0, typeControl))
	for c := range 256 {
		b = appendBytesField(b, 1, spPieceBytes(byteName(byte(c)), 0, typeByte))
	}
	for i, p := range []string{"▁", "a", "b", "ab", "▁a", "▁ab"} {
		b = appendBytesField(b, 1, spPieceBytes(p, -float32(i), typeNormal))
	}
	trainer := appendVarintField(nil, 3, 2)              // model_type BPE
	trainer = appendVarintField(trainer, 35, 1)          // byte_fallback
	b = appendBytesField(b, 2, trainer)                  // trainer_spec
	norm := appendBytesField(nil, 1, []byte("identity")) // name
	norm = appendVarintField(norm, 4, 0)                 // remove_extra_whitespaces false
	return appendBytesField(b, 3, norm)
}

func TestMiniSentencePiece(t *testing.T) {
	tok, err := FromSentencePiece(miniSentencePiece())
	require.NoError(t, err)
	base := int32(3 + 256)
	// "▁ab▁b": "ab" (-3) merges first, then "▁"+"ab" → "▁ab" (-5); "▁b" is no piece.
	assert.Equal(t, []int32{1, base + 5, base, base + 2}, tok.Encode("ab b", tok.DefaultOptions()))
	assert.Equal(t, "ab b", tok.Decode(tok.Encode("ab b", tok.DefaultOptions())[1:]))
	// Tabs and other characters that are no pieces fall back to bytes.
	assert.Equal(t, []int32{base, 3 + '\t', base + 1}, tok.Encode("\ta", EncodeOptions{}))
	assert.Equal(t, " x", tok.Decode([]int32{base, base, 3 + 'x'}))
}

func TestFromSentencePieceErrors(t *testing.T) {
	good := slices.Clip(miniSentencePiece()) // each case appends to its own copy
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "no pieces"},
		{"truncated", good[:len(good)-3], "runs past the end"},
		{"truncated varint", []byte{0x0a, 0x80}, "truncated"},
		{"bad wire type", []byte{0x0b, 0x00}, "wire type 3"},
		{"piece with wrong wire type", []byte{0x08, 0x01}, "piece has wire type 0, want 2"},
		{"bad piece type", appendBytesField(nil, 1, append(appendBytesField(nil, 1, []byte("x")), 0x18, 0x09)), "type 9 is not a piece type"},
		{"unigram", appendBytesField(good, 2, appendVarintField(nil, 3, 1)), "UNIGRAM is not supported"},
		{"nfkc", appendBytesField(good, 3, appendBytesField(nil, 1, []byte("nmt_nfkc"))), `normalizer "nmt_nfkc" is not supported`},
		{"duplicate piece", appendBytesField(good, 1, spPieceBytes("ab", 0, typeNormal)), `"ab" is already defined`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := FromSentencePiece(tc.data)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	// A tokenizer.json file by itself, a directory, a tokenizer.model and a GGUF file.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte(miniJSON), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(`{"eos_token_id": [7, 5]}`), 0o644))
	for _, p := range []string{dir, filepath.Join(dir, "tokenizer.json")} {
		tok, err := Load(p)
		require.NoError(t, err)
		assert.Equal(t, []int32{7, 5}, tok.EOS())
	}
	sp := filepath.Join(dir, "sp", "tokenizer.model")
	require.NoError(t, os.MkdirAll(filepath.Dir(sp), 0o755))
	require.NoError(t, os.WriteFile(sp, miniSentencePiece(), 0o644))
	for _, p := range []string{sp, filepath.Dir(sp)} {
		tok, err := Load(p)
		require.NoError(t, err)
		assert.Equal(t, 265, tok.VocabSize())
	}
	g := filepath.Join(dir, "v.gguf")
	require.NoError(t, os.WriteFile(g, ggufBytes(t, miniGGUF("gpt2")), 0o644))
	tok, err := Load(g)
	require.NoError(t, err)
	assert.Equal(t, 261, tok.VocabSize())

	_, err = Load(filepath.Join(dir, "missing"))
	assert.Error(t, err)
	_, err = Load(t.TempDir())
	assert.ErrorContains(t, err, "has neither tokenizer.json nor tokenizer.model")
	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte("{"), 0o644))
	_, err = Load(bad)
	assert.ErrorContains(t, err, bad)
}
