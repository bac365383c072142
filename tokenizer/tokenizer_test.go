package tokenizer

import (
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/internal/sharedtest"
)

// One Tokenizer encodes from many goroutines at once (run with -race): the word
// cache and the scratch pool are shared.
func TestConcurrentEncode(t *testing.T) {
	for _, name := range []string{"gocoder", "llama2"} {
		tok := loadTestdata(t, name)
		cases := readGolden(t, name).Cases
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range cases {
					c := cases[(i+g*7)%len(cases)]
					if got := tok.Encode(c.Text, EncodeOptions{ParseSpecial: true}); !slices.Equal(got, c.IDs) {
						t.Errorf("%s %q: %v, want %v", name, c.Text, got, c.IDs)
					}
				}
			}()
		}
		wg.Wait()
	}
}

// Encoding into a slice with room does not allocate once the word cache is warm,
// however long the text.
func TestEncodeAllocs(t *testing.T) {
	for _, name := range []string{"gocoder", "llama3"} {
		tok := loadTestdata(t, name)
		text := strings.Repeat("func (b *Builder) WriteString(s string) (int, error) {\n\treturn len(s), nil // 日本\n}\n", 50)
		opts := EncodeOptions{ParseSpecial: true, AddBOS: true}
		dst := tok.Encode(text, opts)
		allocs := testing.AllocsPerRun(20, func() { dst = tok.AppendEncode(dst[:0], text, opts) })
		assert.Zero(t, allocs, name)
	}
}

// A word longer than the linear-scan limit goes through the heap; both must agree.
func TestLongWords(t *testing.T) {
	tok := loadTestdata(t, "gocoder")
	st := new(encState)
	for _, w := range []string{strings.Repeat(" ", 1000), strings.Repeat("ab", 300), strings.Repeat("\t", 257), strings.Repeat("the", 100)} {
		syms := slices.Clone(tok.initialSymbols(w, st))
		long := tok.bpeLong(nil, syms, st)
		small := tok.bpeScan(nil, syms, st) // the linear scan, forced on a long word
		require.Equal(t, small, long, "%q", w[:10])
		assert.Equal(t, w, tok.Decode(tok.Encode(w, EncodeOptions{})))
	}
}

func TestAccessors(t *testing.T) {
	tok := loadTestdata(t, "gocoder")
	assert.Equal(t, 8192, tok.VocabSize())
	id, ok := tok.ID("<|endoftext|>")
	assert.True(t, ok)
	assert.Equal(t, int32(8191), id)
	text, ok := tok.Token(8191)
	assert.True(t, ok)
	assert.Equal(t, "<|endoftext|>", text)
	_, ok = tok.Token(8192)
	assert.False(t, ok)
	_, ok = tok.Token(-1)
	assert.False(t, ok)
	bos, ok := tok.BOS()
	assert.True(t, ok)
	assert.Equal(t, int32(8191), bos)
	assert.Equal(t, []int32{8191}, tok.EOS())
	assert.True(t, tok.IsSpecial(8191))
	assert.False(t, tok.IsSpecial(100))
	assert.Equal(t, EncodeOptions{ParseSpecial: true}, tok.DefaultOptions())

	l3 := loadTestdata(t, "llama3")
	assert.Equal(t, EncodeOptions{AddBOS: true, ParseSpecial: true}, l3.DefaultOptions())
	eot, _ := l3.ID("<|eot_id|>")
	eot2, _ := l3.ID("<|end_of_text|>")
	assert.Equal(t, []int32{eot, eot2}, l3.EOS())

	q := loadTestdata(t, "qwen2")
	_, ok = q.BOS()
	assert.False(t, ok)
	imEnd, _ := q.ID("<|im_end|>")
	eot3, _ := q.ID("<|endoftext|>")
	assert.Equal(t, []int32{imEnd, eot3}, q.EOS())
	assert.Equal(t, EncodeOptions{ParseSpecial: true}, q.DefaultOptions())
	// AddBOS does nothing without a BOS token; AddEOS appends the EOS token.
	assert.Equal(t, q.Encode("x", EncodeOptions{}), q.Encode("x", EncodeOptions{AddBOS: true}))
	assert.Equal(t, append(q.Encode("x", EncodeOptions{}), imEnd), q.Encode("x", EncodeOptions{AddEOS: true}))
}

// Added tokens with lstrip/rstrip swallow the whitespace next to them; single_word
// ones match only between non-word characters.
func TestAddedTokenOptions(t *testing.T) {
	j := strings.Replace(miniJSON, `[{"id": 7, "content": "<|end|>", "special": true}]`,
		`[{"id": 7, "content": "<|end|>", "special": true, "lstrip": true, "rstrip": true},
		  {"id": 6, "content": "cc", "special": false, "single_word": true}]`, 1)
	tok := mustJSON(t, j, "")
	sp, _ := tok.ID("Ġ")
	assert.Equal(t, []int32{4, 7, 4}, tok.Encode("ab  <|end|> \t ab", EncodeOptions{ParseSpecial: true}))
	assert.Equal(t, []int32{4, sp, 6, sp, 4}, tok.Encode("ab cc ab", EncodeOptions{}))
	// Inside a word "cc" is not the added token.
	assert.Equal(t, []int32{5, 2}, tok.Encode("abcc", EncodeOptions{}))
	// Non-special added tokens are recognised even without ParseSpecial.
	assert.Equal(t, []int32{6}, tok.Encode("cc", EncodeOptions{}))
}

// Cutting SentencePiece-style text into chunks before ▁ (see nextMetaChunk) gives
// the same ids as BPE over whole sections.
func TestMetaChunksSameIDs(t *testing.T) {
	type pair struct{ chunked, whole *Tokenizer }
	var pairs []pair
	for _, name := range []string{"llama2", "llama2-metaspace"} {
		a, b := loadTestdata(t, name), loadTestdata(t, name)
		pairs = append(pairs, pair{a, b})
	}
	if p := sharedtest.Root(); p != "" {
		if a, err := Load(filepath.Join(p, "tokenizers", "llama2")); err == nil {
			b, _ := Load(filepath.Join(p, "tokenizers", "llama2"))
			pairs = append(pairs, pair{a, b})
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	alphabet := []string{"a", "e", "t", "h", "in", " ", " ", "  ", "\t", "\n", "▁", ".", "é", "中", "🚀", "<s>", "x", "1"}
	var texts []string
	for _, c := range readGolden(t, "llama2").Cases {
		texts = append(texts, c.Text)
	}
	for range 300 {
		var b strings.Builder
		for range rng.IntN(30) {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		texts = append(texts, b.String())
	}
	for _, p := range pairs {
		require.True(t, p.chunked.metaChunks)
		p.whole.metaChunks = false
		for _, s := range texts {
			for _, opts := range []EncodeOptions{{}, {ParseSpecial: true}} {
				require.Equal(t, p.whole.Encode(s, opts), p.chunked.Encode(s, opts), "%q", s)
			}
		}
	}
}
