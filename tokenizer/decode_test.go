package tokenizer

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lossy must agree with Rust's String::from_utf8_lossy (and the WHATWG decoder): one
// U+FFFD per maximal subpart of an invalid sequence.
func TestLossy(t *testing.T) {
	const r = "\uFFFD"
	tests := []struct {
		name, in, want string
	}{
		{"valid", "héllo 🚀", "héllo 🚀"},
		{"empty", "", ""},
		{"cut short at end", "a\xE6\x8A", "a" + r},
		{"cut short then ascii", "\xE6\x8AA", r + "A"},
		{"four-byte cut short", "\xF0\x9F\x98", r},
		{"stray continuation", "\x80\x80", r + r},
		{"never a lead byte", "\xC0\xAF\xFF", r + r + r},
		{"overlong E0", "\xE0\x80\x80", r + r + r},
		{"surrogate", "\xED\xA0\x80", r + r + r},
		{"above U+10FFFF", "\xF4\x90\x80\x80", r + r + r + r},
		{"lead then lead", "\xE6\xE6\x8A\x9F", r + "\u629F"},
		{"two-byte cut by space", "\xC3 ", r + " "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, lossy([]byte(tc.in)))
		})
	}
}

// randomIDs draws n ids, many of them byte tokens so that characters are split.
func randomIDs(rng *rand.Rand, tok *Tokenizer, n int) []int32 {
	var byteIDs []int32
	for _, id := range tok.byteIDs {
		if id >= 0 {
			byteIDs = append(byteIDs, id)
		}
	}
	ids := make([]int32, n)
	for i := range ids {
		switch k := rng.IntN(10); {
		case k < 5 && len(byteIDs) > 0:
			ids[i] = byteIDs[rng.IntN(len(byteIDs))]
		case k == 5:
			ids[i] = int32(rng.IntN(tok.VocabSize()+4)) - 2 // includes invalid ids
		default:
			ids[i] = int32(rng.IntN(tok.VocabSize()))
		}
	}
	return ids
}

// What a Stream returns, joined, equals Decode of all ids, and no piece is invalid
// UTF-8 except where Decode also has U+FFFD.
func TestStreamMatchesDecode(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, name := range []string{"gocoder", "qwen2", "llama3", "llama2", "llama2-metaspace"} {
		tok := loadTestdata(t, name)
		for _, opts := range []DecodeOptions{{}, {SkipSpecial: true}} {
			s := tok.NewStream(opts)
			for trial := range 300 {
				ids := randomIDs(rng, tok, rng.IntN(40))
				var b strings.Builder
				for _, id := range ids {
					out := s.Push(id)
					require.True(t, utf8.ValidString(out))
					b.WriteString(out)
				}
				b.WriteString(s.Flush()) // also resets the stream for the next trial
				require.Equal(t, tok.DecodeWith(ids, opts), b.String(), "%s trial %d ids %v", name, trial, ids)
			}
		}
	}
}

// A stream of encoded text gives the text back, each Push a whole number of
// characters.
func TestStreamText(t *testing.T) {
	for _, name := range []string{"gocoder", "llama3", "llama2"} {
		tok := loadTestdata(t, name)
		for _, c := range readGolden(t, name).Cases {
			s := tok.NewStream(DecodeOptions{})
			var b strings.Builder
			for _, id := range c.IDs {
				out := s.Push(id)
				require.True(t, utf8.ValidString(out))
				require.NotContains(t, out, "\uFFFD")
				b.WriteString(out)
			}
			assert.Empty(t, s.Flush())
			assert.Equal(t, c.Decoded, b.String())
		}
	}
}

func TestDecodeSkipSpecial(t *testing.T) {
	tok := loadTestdata(t, "qwen2")
	text := "<|im_start|>user\nHi!<|im_end|>"
	ids := tok.Encode(text, EncodeOptions{ParseSpecial: true})
	assert.Equal(t, text, tok.Decode(ids))
	assert.Equal(t, "user\nHi!", tok.DecodeWith(ids, DecodeOptions{SkipSpecial: true}))

	l2 := loadTestdata(t, "llama2")
	ids = l2.Encode("Hello", l2.DefaultOptions())
	assert.Equal(t, int32(1), ids[0])
	assert.Equal(t, "<s> Hello", l2.Decode(ids))
	assert.Equal(t, "Hello", l2.DecodeWith(ids, DecodeOptions{SkipSpecial: true}))
	// Ids outside the vocabulary are skipped.
	assert.Equal(t, "Hello", l2.DecodeWith(append([]int32{-1, 1 << 30}, ids...), DecodeOptions{SkipSpecial: true}))
}
