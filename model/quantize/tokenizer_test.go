package quantize

import (
	"io"
	"path/filepath"
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
