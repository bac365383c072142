package quantize

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/format/gguf"
	"github.com/specula/specula/internal/sharedtest"
	"github.com/specula/specula/tokenizer"
)

// TestTokenizerKVMatchesJSON: the GGUF tokenizer written from a tokenizer.json —
// byte-level BPE (Qwen3's, Llama 3's) or SentencePiece-style BPE with byte fallback
// (Gemma 3's, scored from its merges) from ../shared/tokenizers — encodes the texts
// of golden.json to the ids the tokenizer.json gives, and to the golden ids with and
// without the tokens the model adds; it decodes them back, and has the same special
// tokens and defaults (from tokenizer_config.json where there is no config.json, as
// here).
func TestTokenizerKVMatchesJSON(t *testing.T) {
	for _, name := range []string{"qwen3", "llama3", "gemma3"} {
		t.Run(name, func(t *testing.T) {
			dir := sharedtest.Path(t, "tokenizers", name)
			g := sharedtest.ReadTokenizerGolden(t, name)
			fromJSON, err := tokenizer.Load(dir)
			require.NoError(t, err)
			fromGGUF := writeTokenizerKV(t, dir, 0)
			same := 0
			for _, r := range g.Rows {
				opts := tokenizer.EncodeOptions{ParseSpecial: true}
				want, got := fromJSON.Encode(r.Text, opts), fromGGUF.Encode(r.Text, opts)
				ok := assert.Equal(t, want, got, "%q", r.Text)
				ok = assert.Equal(t, r.IDs, got, "%q: golden ids", r.Text) && ok
				ok = assert.Equal(t, r.IDsWithSpecial, fromGGUF.Encode(r.Text, fromGGUF.DefaultOptions()), "%q: golden ids with the added tokens", r.Text) && ok
				if ok {
					same++
				}
				assert.Equal(t, r.Text, fromGGUF.Decode(got))
			}
			t.Logf("%d of %d texts encode to the same ids as the tokenizer.json and golden.json", same, len(g.Rows))
			bj, okj := fromJSON.BOS()
			bg, okg := fromGGUF.BOS()
			assert.Equal(t, []any{bj, okj}, []any{bg, okg}, "BOS")
			assert.ElementsMatch(t, fromJSON.EOS(), fromGGUF.EOS(), "EOS")
			assert.Equal(t, fromJSON.DefaultOptions(), fromGGUF.DefaultOptions())
		})
	}
}

// writeTokenizerKV writes TokenizerKV(dir, vocab) as a GGUF file and loads it.
func writeTokenizerKV(t *testing.T, dir string, vocab int) *tokenizer.Tokenizer {
	t.Helper()
	kv, err := TokenizerKV(dir, vocab)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "tokenizer.gguf")
	require.NoError(t, gguf.WriteFile(path, func(w io.Writer) error { return gguf.Write(w, kv, nil, 32) }))
	tok, err := tokenizer.Load(path)
	require.NoError(t, err)
	return tok
}

// TestGGUFPre: the GGUF pre-tokenizer named for each split pattern a byte-level
// tokenizer.json carries.
func TestGGUFPre(t *testing.T) {
	for _, tc := range []struct{ name, pre, want string }{
		{"llama 3", `{"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}}`, "llama-bpe"},
		{"qwen2", `{"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}}`, "qwen2"},
		{"gpt-2", `{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}`, "gpt-2"},
	} {
		assert.Equal(t, tc.want, ggufPre(tc.pre), tc.name)
	}
}

// TestTokenizerKVScoresCorpus: Gemma 3's GGUF tokenizer, whose SentencePiece scores
// are derived from the merge ranks, segments more text exactly as its tokenizer.json's
// BPE does: the tokenizer tests' corpus, the golden texts of every shared tokenizer and
// the held-out Go prompts, with and without special tokens parsed.
func TestTokenizerKVScoresCorpus(t *testing.T) {
	dir := sharedtest.Path(t, "tokenizers", "gemma3")
	texts := sharedtest.CorpusTexts(t, "qwen3", "llama3", "gemma3")
	fromJSON, err := tokenizer.Load(dir)
	require.NoError(t, err)
	fromGGUF := writeTokenizerKV(t, dir, 262144)
	same, total := 0, 0
	for _, s := range texts {
		for _, opts := range []tokenizer.EncodeOptions{{ParseSpecial: true}, {}} {
			total++
			want, got := fromJSON.Encode(s, opts), fromGGUF.Encode(s, opts)
			if assert.Equal(t, want, got, "%q %+v", s, opts) {
				same++
			}
		}
	}
	t.Logf("%d of %d encodings of %d texts identical", same, total, len(texts))
}

// TestTokenizerKVSpacePrefix: the small SentencePiece-style tokenizer.json files of the
// tokenizer tests, which put ▁ before the text, give a GGUF tokenizer with
// add_space_prefix. With a Prepend normalizer (Llama 2's) it encodes their golden texts
// to the golden ids, with and without the added BOS. A Metaspace pre-tokenizer with
// prepend_scheme "first" adds no ▁ before text that starts with a space, nor after a
// special token, where llama.cpp's add_space_prefix (and so the GGUF tokenizer) does:
// those texts differ, and are only counted.
func TestTokenizerKVSpacePrefix(t *testing.T) {
	for _, tc := range []struct {
		name  string
		exact bool
	}{{"llama2", true}, {"llama2-metaspace", false}} {
		t.Run(tc.name, func(t *testing.T) {
			testdata := filepath.Join("..", "..", "tokenizer", "testdata")
			tok := writeTokenizerKV(t, filepath.Join(testdata, tc.name), 0)
			data, err := os.ReadFile(filepath.Join(testdata, "golden", tc.name+".json"))
			require.NoError(t, err)
			var g struct {
				Cases []struct {
					Text           string  `json:"text"`
					IDs            []int32 `json:"ids"`
					IDsWithSpecial []int32 `json:"ids_with_special"`
				} `json:"cases"`
			}
			require.NoError(t, json.Unmarshal(data, &g))
			require.NotEmpty(t, g.Cases)
			same := 0
			for _, c := range g.Cases {
				got, gotBOS := tok.Encode(c.Text, tokenizer.EncodeOptions{ParseSpecial: true}), tok.Encode(c.Text, tok.DefaultOptions())
				if slices.Equal(c.IDs, got) && slices.Equal(c.IDsWithSpecial, gotBOS) {
					same++
				} else if tc.exact {
					t.Errorf("%q: got %v and %v with BOS, want %v and %v", c.Text, got, gotBOS, c.IDs, c.IDsWithSpecial)
				}
			}
			t.Logf("%d of %d golden texts identical", same, len(g.Cases))
		})
	}
}

// TestTokenizerKVGemma3Metadata: Gemma 3's tokenizer.json for the 4B's 262 208 ids
// gets the metadata llama.cpp's converter writes: SentencePiece "llama" with no space
// prefix, control tokens (special, or looking special as <unusedN> does), user-defined
// ones with ▁ as spaces, byte tokens, <image_soft_token> at 262 144 and unused padding
// after it, scores from the merges, and the special ids tokenizer_config.json names.
func TestTokenizerKVGemma3Metadata(t *testing.T) {
	dir := sharedtest.Path(t, "tokenizers", "gemma3")
	kvs, err := TokenizerKV(dir, 262208)
	require.NoError(t, err)
	kv := map[string]any{}
	for _, e := range kvs {
		kv[e.Key] = e.Value.Any()
	}
	tokens, types := kv["tokenizer.ggml.tokens"].([]string), kv["tokenizer.ggml.token_type"].([]int32)
	scores := kv["tokenizer.ggml.scores"].([]float32)
	require.Len(t, tokens, 262208)
	require.Len(t, types, 262208)
	require.Len(t, scores, 262208)
	for _, tc := range []struct {
		id    int
		token string
		typ   int32
	}{
		{0, "<pad>", tokControl}, {1, "<eos>", tokControl}, {2, "<bos>", tokControl}, {3, "<unk>", tokControl},
		{4, "<mask>", tokControl}, {5, "[multimodal]", tokUserDefined}, {6, "<unused0>", tokControl},
		{106, "<end_of_turn>", tokControl}, {107, "\n", tokUserDefined}, {138, "  ", tokUserDefined},
		{238, "<0x00>", tokByte}, {262144, "<image_soft_token>", tokControl}, {262145, "[PAD262145]", tokUnused},
	} {
		assert.Equal(t, tc.token, tokens[tc.id], "token %d", tc.id)
		assert.Equal(t, tc.typ, types[tc.id], "type of %q", tc.token)
	}
	assert.Equal(t, "llama", kv["tokenizer.ggml.model"])
	assert.Equal(t, false, kv["tokenizer.ggml.add_space_prefix"])
	assert.Equal(t, true, kv["tokenizer.ggml.add_bos_token"])
	assert.Equal(t, false, kv["tokenizer.ggml.add_eos_token"])
	for key, id := range map[string]uint32{"bos": 2, "eos": 106, "unknown": 3, "padding": 0} {
		assert.Equal(t, id, kv["tokenizer.ggml."+key+"_token_id"], key)
	}
	assert.Contains(t, kv["tokenizer.chat_template"], "<start_of_turn>")
	// A token scores minus the rank of its first merge; the others below all merges.
	for id, score := range map[int]float32{1018: -2323, 236742: -514902, 262143: -514907, 238: -514907} {
		assert.Equal(t, score, scores[id], "score of %q", tokens[id])
	}
}

// TestTokenizerKind: which tokenizer.json files are SentencePiece-style (byte fallback,
// ▁ for spaces) and which of them put ▁ before the text; the token names the converter
// treats as control tokens or bytes.
func TestTokenizerKind(t *testing.T) {
	for _, tc := range []struct {
		name, json          string
		byteLevel, sp, pref bool
	}{
		{"gemma 3", `{"model": {"type": "BPE", "byte_fallback": true}, "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
			"pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious"}}`, false, true, false},
		{"llama 2", `{"model": {"type": "BPE", "byte_fallback": true}, "normalizer": {"type": "Sequence", "normalizers": [
			{"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}}`, false, true, true},
		{"metaspace", `{"model": {"type": "BPE", "byte_fallback": true}, "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first"}}`, false, true, true},
		{"metaspace never", `{"model": {"type": "BPE", "byte_fallback": true}, "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "never"}}`, false, true, false},
		{"no byte fallback", `{"model": {"type": "BPE"}, "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}}`, false, false, false},
		{"byte-level", `{"model": {"type": "BPE"}, "pre_tokenizer": {"type": "ByteLevel"}}`, true, false, false},
		{"wordpiece", `{"model": {"type": "WordPiece"}, "pre_tokenizer": {"type": "BertPreTokenizer"}}`, false, false, false},
	} {
		var tj hfTokenizer
		require.NoError(t, json.Unmarshal([]byte(tc.json), &tj), tc.name)
		assert.Equal(t, tc.byteLevel, tj.byteLevel(), "%s: byte-level", tc.name)
		assert.Equal(t, tc.sp, tj.sentencePiece(), "%s: SentencePiece-style", tc.name)
		assert.Equal(t, tc.pref, tj.spacePrefix(), "%s: space prefix", tc.name)
	}
	for s, want := range map[string]bool{"<unused12>": true, "<mask>": true, "<|im_start|>": true, "<table>": false, "[multimodal]": false} {
		assert.Equal(t, want, looksSpecial(s), s)
	}
	for s, want := range map[string]bool{"<0x0A>": true, "<0xff>": true, "<0xG0>": false, "<0x0A": false, "<0x0AB>": false} {
		assert.Equal(t, want, isByteToken(s), s)
	}
}

// TestTokenizerKVCorruptIDs: a tokenizer.json whose ids reach far past its tokens is
// refused rather than sizing a vocabulary of a billion entries.
func TestTokenizerKVCorruptIDs(t *testing.T) {
	dir := t.TempDir()
	tj := `{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1073741824}, "merges": []},
		"pre_tokenizer": {"type": "ByteLevel"}, "added_tokens": []}`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte(tj), 0o644))
	_, err := TokenizerKV(dir, 0)
	require.ErrorContains(t, err, "ids up to 1073741824 for 2 tokens")
}
