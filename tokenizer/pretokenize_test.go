package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func pieces(k splitKind, s string) []string { return piecesOf(k, s, "") }

// piecesOf cuts s with scanner k and the String-pattern literal lit.
func piecesOf(k splitKind, s, lit string) []string {
	var out []string
	for i := 0; i < len(s); {
		j := nextPiece(k, s, i, lit)
		if j <= i {
			panic("no progress")
		}
		out = append(out, s[i:j])
		i = j
	}
	return out
}

func TestPreTokenizerSplits(t *testing.T) {
	tests := []struct {
		name string
		kind splitKind
		in   string
		want []string
	}{
		{"gpt2 words", splitGPT2, "Hello world", []string{"Hello", " world"}},
		{"gpt2 contractions", splitGPT2, "I'm they'll it's we've you'd they're don't", []string{"I", "'m", " they", "'ll", " it", "'s", " we", "'ve", " you", "'d", " they", "'re", " don", "'t"}},
		{"gpt2 contractions are case-sensitive", splitGPT2, "IT'S", []string{"IT", "'", "S"}},
		{"gpt2 contraction wins over letters", splitGPT2, "'sand", []string{"'s", "and"}},
		{"gpt2 two quotes", splitGPT2, "''s", []string{"''", "s"}},
		{"gpt2 space before word", splitGPT2, "a  b", []string{"a", " ", " b"}},
		{"gpt2 newlines before word", splitGPT2, "a\n\nb", []string{"a", "\n", "\n", "b"}},
		{"gpt2 spaces at end", splitGPT2, "x  \n", []string{"x", "  \n"}},
		{"gpt2 tab before word", splitGPT2, "\tfoo", []string{"\t", "foo"}},
		{"gpt2 numbers", splitGPT2, "123 4567", []string{"123", " 4567"}},
		{"gpt2 punctuation", splitGPT2, "foo!!!\n", []string{"foo", "!!!", "\n"}},
		{"gpt2 space punctuation", splitGPT2, "a .", []string{"a", " ."}},
		{"gpt2 han", splitGPT2, "日本語 です", []string{"日本語", " です"}},
		{"gpt2 combining mark", splitGPT2, "e\u0301x", []string{"e", "\u0301", "x"}},
		{"gpt2 emoji", splitGPT2, "a 😀b", []string{"a", " 😀", "b"}},
		{"gpt2 nbsp is whitespace", splitGPT2, "a\u00a0\u00a0b", []string{"a", "\u00a0", "\u00a0", "b"}},
		{"gpt2 invalid utf8", splitGPT2, "a\xffb", []string{"a", "\xff", "b"}},

		{"llama3 case-insensitive contractions", splitLlama3, "IT'S they'LL We'Re", []string{"IT", "'S", " they", "'LL", " We", "'Re"}},
		{"llama3 long s folds to s", splitLlama3, "x'ſt", []string{"x", "'ſ", "t"}},
		{"llama3 digits in threes", splitLlama3, "12345", []string{"123", "45"}},
		{"llama3 arabic-indic digits", splitLlama3, "٣٤٥٦", []string{"٣٤٥", "٦"}},
		{"llama3 space before word", splitLlama3, "x  y", []string{"x", " ", " y"}},
		{"llama3 tab joins word", splitLlama3, "\tfoo", []string{"\tfoo"}},
		{"llama3 punctuation joins word", splitLlama3, "(foo) $x", []string{"(foo", ")", " $", "x"}},
		{"llama3 space before number", splitLlama3, " 123", []string{" ", "123"}},
		{"llama3 crlf runs", splitLlama3, "a\r\n\r\nb", []string{"a", "\r\n\r\n", "b"}},
		{"llama3 punctuation takes newlines", splitLlama3, "foo.\n\n  bar", []string{"foo", ".\n\n", " ", " bar"}},
		{"llama3 whitespace up to last newline", splitLlama3, "  \n  x", []string{"  \n", " ", " x"}},
		{"llama3 trailing spaces", splitLlama3, "x   ", []string{"x", "   "}},
		{"llama3 newline not before word", splitLlama3, "\nfoo", []string{"\n", "foo"}},
		{"llama3 mark", splitLlama3, "a\u0301b", []string{"a", "\u0301b"}},

		{"qwen2 single digits", splitQwen2, "2024!", []string{"2", "0", "2", "4", "!"}},
		{"qwen2 contractions", splitQwen2, "I'M", []string{"I", "'M"}},

		{"metaspace", splitMetaspace, "ab▁c▁▁d", []string{"ab", "▁c", "▁", "▁d"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, pieces(tc.kind, tc.in))
		})
	}
}

// TestStringSplits: a Split on a String pattern, as the Hugging Face library cuts
// (Gemma 3's is " ", MergedWithPrevious).
func TestStringSplits(t *testing.T) {
	tests := []struct {
		name, lit string
		kind      splitKind
		in        string
		want      []string
	}{
		{"merged with previous", " ", splitMergedPrev, "a b  c ", []string{"a ", "b ", " ", "c "}},
		{"merged, none", " ", splitMergedPrev, "▁a▁b", []string{"▁a▁b"}},
		{"merged, leading", " ", splitMergedPrev, " a", []string{" ", "a"}},
		{"isolated", "--", splitIsolated, "a--b----c", []string{"a", "--", "b", "--", "--", "c"}},
		{"isolated, multibyte", "▁", splitIsolated, "▁x▁", []string{"▁", "x", "▁"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, piecesOf(tc.kind, tc.in, tc.lit))
		})
	}
}

// The scanners against the Hugging Face library's regexes (Split pre-tokenizer of
// Tokenizers.js, which rewrites \s to White_Space as Oniguruma has it): the corpus
// and 1000 random strings over an alphabet of awkward characters.
func TestPreTokenizerGolden(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "golden", "pretokenize.json"))
	require.NoError(t, err)
	var g struct {
		Patterns map[string]string `json:"patterns"`
		Cases    []struct {
			Text   string   `json:"text"`
			GPT2   []string `json:"gpt2"`
			Llama3 []string `json:"llama3"`
			Qwen2  []string `json:"qwen2"`
		} `json:"cases"`
	}
	require.NoError(t, json.Unmarshal(data, &g))
	assert.Equal(t, patternGPT2, g.Patterns["gpt2"])
	assert.Equal(t, patternLlama3, g.Patterns["llama3"])
	assert.Equal(t, patternQwen2, g.Patterns["qwen2"])
	same := 0
	for _, c := range g.Cases {
		for _, k := range []struct {
			kind splitKind
			want []string
		}{{splitGPT2, c.GPT2}, {splitLlama3, c.Llama3}, {splitQwen2, c.Qwen2}} {
			got := pieces(k.kind, c.Text)
			if slices.Equal(got, k.want) || len(got) == 0 && len(k.want) == 0 {
				same++
				continue
			}
			t.Errorf("kind %d %q:\n got  %q\n want %q", k.kind, c.Text, got, k.want)
		}
	}
	t.Logf("%d of %d splits identical", same, 3*len(g.Cases))
}

// Every scanner covers its input with pieces that make progress, whatever the input.
func FuzzPreTokenizers(f *testing.F) {
	for _, s := range []string{"", "a", "'s", "'ſ", " \n\r\t", "12345", "\xff\xfe", "a\u0301", "▁▁x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, k := range []splitKind{splitGPT2, splitLlama3, splitQwen2, splitMetaspace} {
			if got := strings.Join(pieces(k, s), ""); got != s {
				t.Fatalf("kind %d: pieces of %q join to %q", k, s, got)
			}
		}
	})
}
