package tokenizer

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/format/gguf"
	"github.com/specula/specula/internal/sharedtest"
)

// Tests on the project's shared data (../shared); each skips when its file is absent.

func loadGGUF(t *testing.T, path string) *Tokenizer {
	t.Helper()
	f, err := gguf.Open(path)
	require.NoError(t, err)
	defer f.Close()
	tok, err := FromGGUF(f)
	require.NoError(t, err)
	return tok
}

// The GGUF file of gocoder carries the same vocabulary as its tokenizer.json; both
// must give the same ids for every text of the corpus, in every mode.
func TestGocoderGGUFMatchesJSON(t *testing.T) {
	fromJSON := loadTestdata(t, "gocoder")
	for _, name := range []string{"gocoder-m-f16.gguf", "gocoder-xs-q8_0.gguf"} {
		t.Run(name, func(t *testing.T) {
			fromGGUF := loadGGUF(t, sharedtest.Path(t, "models", name))
			require.NoError(t, Compatible(fromGGUF, fromJSON))
			assert.Equal(t, fromJSON.DefaultOptions(), fromGGUF.DefaultOptions())
			assert.Equal(t, fromJSON.EOS(), fromGGUF.EOS())
			same, total := 0, 0
			for _, c := range readGolden(t, "gocoder").Cases {
				for _, opts := range []EncodeOptions{{ParseSpecial: true}, {}, {AddBOS: true, AddEOS: true, ParseSpecial: true}} {
					total++
					want, got := fromJSON.Encode(c.Text, opts), fromGGUF.Encode(c.Text, opts)
					if slices.Equal(want, got) {
						same++
					} else {
						t.Errorf("%q %+v: gguf %v, tokenizer.json %v", c.Text, opts, got, want)
					}
					assert.Equal(t, fromJSON.Decode(want), fromGGUF.Decode(got))
				}
			}
			t.Logf("%d of %d encodings identical", same, total)
		})
	}
}

// The golden file beside the Llama 2 tokenizer.model was made by the sentencepiece
// library (encode without BOS/EOS; control tokens in the text are plain text there).
func TestLlama2SentencePiece(t *testing.T) {
	dir := sharedtest.Path(t, "tokenizers", "llama2")
	tok, err := Load(dir)
	require.NoError(t, err)
	data, err := os.ReadFile(sharedtest.Path(t, "tokenizers", "llama2", "golden.json"))
	require.NoError(t, err)
	var g struct {
		Reference string `json:"reference"`
		Cases     []struct {
			Text    string  `json:"text"`
			IDs     []int32 `json:"ids"`
			Decoded string  `json:"decoded"`
		} `json:"cases"`
	}
	require.NoError(t, json.Unmarshal(data, &g))
	assert.Equal(t, 32000, tok.VocabSize())
	bos, ok := tok.BOS()
	assert.True(t, ok)
	assert.Equal(t, int32(1), bos)
	assert.Equal(t, []int32{2}, tok.EOS())
	assert.True(t, tok.DefaultOptions().AddBOS)
	same := 0
	for _, c := range g.Cases {
		got := tok.Encode(c.Text, EncodeOptions{})
		if slices.Equal(c.IDs, got) || len(c.IDs) == 0 && len(got) == 0 {
			same++
		} else {
			t.Errorf("%q:\n got  %v\n want %v", c.Text, got, c.IDs)
		}
		assert.Equal(t, c.Decoded, tok.Decode(c.IDs), "decode of %q", c.Text)
	}
	t.Logf("%d of %d identical to %s", same, len(g.Cases), g.Reference)
	// With ParseSpecial, <s> written in the text is the BOS token, and a dummy
	// prefix space follows it, as in llama.cpp and Hugging Face's legacy Llama.
	assert.Equal(t, []int32{1, 15043}, tok.Encode("<s>Hello", EncodeOptions{ParseSpecial: true}))
	assert.Equal(t, []int32{1, 15043}, tok.Encode("Hello", tok.DefaultOptions()))
}

// The models README gives the prompt ids of stories260K and the text of a greedy
// continuation.
func TestStories260K(t *testing.T) {
	tok, err := Load(sharedtest.Path(t, "models", "stories260K.gguf"))
	require.NoError(t, err)
	assert.Equal(t, 512, tok.VocabSize())
	prompt := tok.Encode("Once upon a time", tok.DefaultOptions())
	assert.Equal(t, []int32{1, 403, 407, 261, 378}, prompt)
	cont := []int32{432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337, 410, 408, 419, 292, 411, 322, 265,
		282, 295, 433, 426, 385, 328, 432, 358, 394, 261, 370, 432, 352, 266, 268, 388, 426, 338, 391, 266, 267, 337, 335,
		312, 432, 398, 312, 286, 267, 414, 270, 333, 415, 426, 13, 438, 310, 439, 419, 357, 336}
	want := ", there was a little girl named Lily. She loved to play outside in the park. " +
		"One day, she saw a big, red ball. She wanted to play with it, but it was too high.\nLily's mom said"
	assert.Equal(t, want, tok.Decode(cont))
	all := append(slices.Clone(prompt), cont...)
	assert.Equal(t, "Once upon a time"+want, tok.DecodeWith(all, DecodeOptions{SkipSpecial: true}))
	// Rendered, the BOS is followed by the space of the first word's ▁: only the
	// very first byte of the output loses its space.
	assert.Equal(t, "<s> Once upon a time"+want, tok.Decode(all))
	assert.Equal(t, []int32{2}, tok.EOS())
}

// The known answers of the models list each prompt's token ids, made with the
// models' own (Hugging Face) tokenizer.
func TestModelGoldenPrompts(t *testing.T) {
	tok := loadTestdata(t, "gocoder")
	for _, name := range []string{"gocoder-m", "gocoder-s", "gocoder-xs", "tiny-qwen2-random"} {
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(sharedtest.Path(t, "models", name+".golden.json"))
			require.NoError(t, err)
			var g struct {
				Cases []struct {
					Prompt    string  `json:"prompt"`
					PromptIDs []int32 `json:"prompt_ids"`
				} `json:"cases"`
			}
			require.NoError(t, json.Unmarshal(data, &g))
			require.NotEmpty(t, g.Cases)
			for _, c := range g.Cases {
				assert.Equal(t, c.PromptIDs, tok.Encode(c.Prompt, tok.DefaultOptions()))
				assert.Equal(t, c.Prompt, tok.Decode(c.PromptIDs))
			}
		})
	}
}

// The held-out prompts of ../shared/prompts: the GGUF vocabulary and tokenizer.json
// agree on all of them, and decoding gives the prompt back.
func TestGoDevPromptsGGUF(t *testing.T) {
	path := sharedtest.Path(t, "prompts", "go-dev.jsonl")
	fromGGUF := loadGGUF(t, sharedtest.Path(t, "models", "gocoder-s-f16.gguf"))
	fromJSON := loadTestdata(t, "gocoder")
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	dec := json.NewDecoder(bytes.NewReader(data))
	n := 0
	for dec.More() {
		var p struct {
			Prompt string `json:"prompt"`
		}
		require.NoError(t, dec.Decode(&p))
		opts := fromJSON.DefaultOptions()
		ids := fromJSON.Encode(p.Prompt, opts)
		require.Equal(t, ids, fromGGUF.Encode(p.Prompt, opts))
		require.Equal(t, p.Prompt, fromGGUF.Decode(ids))
		n++
	}
	t.Logf("%d prompts", n)
}

// The tokenizers of ../shared/tokenizers (Qwen3, Llama 3, Gemma 3: the tokenizer.json
// and tokenizer_config.json the models ship) against golden.json beside each, made by
// the Hugging Face tokenizers' JavaScript port with special tokens in the text parsed:
// ids without and with the tokens the model adds, every row identical.
func TestSharedTokenizersGolden(t *testing.T) {
	for _, name := range []string{"qwen3", "llama3", "gemma3"} {
		t.Run(name, func(t *testing.T) {
			dir := sharedtest.Path(t, "tokenizers", name)
			tok, err := Load(dir)
			require.NoError(t, err)
			g := sharedtest.ReadTokenizerGolden(t, name)
			for _, r := range g.Rows {
				assert.Equal(t, r.IDs, tok.Encode(r.Text, EncodeOptions{ParseSpecial: true}), "%q", r.Text)
				assert.Equal(t, r.IDsWithSpecial, tok.Encode(r.Text, tok.DefaultOptions()), "%q with the added tokens", r.Text)
				assert.Equal(t, r.Text, tok.Decode(r.IDs), "decoded")
			}
			t.Logf("%d rows identical to %s", len(g.Rows), g.Source)
		})
	}
}
