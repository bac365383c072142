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

// TestTokenizerKVMatchesJSON: the GGUF tokenizer written from a byte-level BPE
// tokenizer.json (Qwen3's, Llama 3's, from ../shared/tokenizers) encodes the texts of
// golden.json to the ids the tokenizer.json gives — its pre-tokenizer named so that
// the GGUF reader splits the text as the JSON's regex does — decodes them back, and
// has the same special tokens and defaults (from tokenizer_config.json where there is
// no config.json, as here).
func TestTokenizerKVMatchesJSON(t *testing.T) {
	for _, name := range []string{"qwen3", "llama3"} {
		t.Run(name, func(t *testing.T) {
			dir := sharedtest.Path(t, "tokenizers", name)
			fromJSON, err := tokenizer.Load(dir)
			require.NoError(t, err)
			kv, err := TokenizerKV(dir, fromJSON.VocabSize())
			require.NoError(t, err)
			path := filepath.Join(t.TempDir(), name+".gguf")
			require.NoError(t, gguf.WriteFile(path, func(w io.Writer) error { return gguf.Write(w, kv, nil, 32) }))
			fromGGUF, err := tokenizer.Load(path)
			require.NoError(t, err)
			g := sharedtest.ReadTokenizerGolden(t, name)
			same := 0
			for _, r := range g.Rows {
				opts := tokenizer.EncodeOptions{ParseSpecial: true}
				want, got := fromJSON.Encode(r.Text, opts), fromGGUF.Encode(r.Text, opts)
				if assert.Equal(t, want, got, "%q", r.Text) {
					same++
				}
				assert.Equal(t, fromJSON.Decode(want), fromGGUF.Decode(got))
			}
			t.Logf("%d of %d texts encode to the same ids", same, len(g.Rows))
			bj, okj := fromJSON.BOS()
			bg, okg := fromGGUF.BOS()
			assert.Equal(t, []any{bj, okj}, []any{bg, okg}, "BOS")
			assert.ElementsMatch(t, fromJSON.EOS(), fromGGUF.EOS(), "EOS")
			assert.Equal(t, fromJSON.DefaultOptions(), fromGGUF.DefaultOptions())
		})
	}
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
