package specula_test

import (
	"context"
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula"
	"github.com/specula/specula/tokenizer"
)

// language describes a Format's language for the test: whether a text can still
// become a sentence of it (a prefix), and whether it is one (complete).
type language func(s string) (prefix, complete bool)

// oneOf is the language of a few words.
func oneOf(words ...string) language {
	return func(s string) (bool, bool) {
		prefix := false
		for _, w := range words {
			prefix = prefix || strings.HasPrefix(w, s)
		}
		return prefix, slices.Contains(words, s)
	}
}

// digits is the language of 1 to n decimal digits.
func digits(n int) language {
	return func(s string) (bool, bool) {
		ok := len(s) <= n && strings.Trim(s, "0123456789") == ""
		return ok, ok && len(s) > 0
	}
}

// allowedAfter is every token the language allows after text s: the tokens whose
// bytes keep it a prefix, and the end-of-sequence tokens where it is complete — a
// superset of what the grammar allows (it may refuse, say, a special token).
func allowedAfter(tok *tokenizer.Tokenizer, lang language, s string) map[int32]bool {
	out := map[int32]bool{}
	for id := range int32(tok.VocabSize()) {
		if p, _ := tok.Piece(id); p != "" && !tok.IsSpecial(id) {
			if ok, _ := lang(s + p); ok {
				out[id] = true
			}
		}
	}
	if _, complete := lang(s); complete {
		for _, id := range tok.EOS() {
			out[id] = true
		}
	}
	return out
}

// finiteLogprob fails the test unless x is a log-probability JSON can carry.
func finiteLogprob(t *testing.T, x float32, what string, args ...any) {
	t.Helper()
	if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) || x > 1e-6 {
		t.Errorf("%s %v: logprob %v", what, args, x)
	}
}

// TestEventsMarshal: with plain logprobs, an echoed prompt scored, and Formats that
// allow fewer tokens than TopLogprobs asks for, every event and the completion
// marshal with encoding/json and come back equal; every value is finite; the echoed
// prompt's first token is Unscored (0, no alternatives); and under a Format each
// token's alternatives are tokens the language allows there — as many as asked where
// that many are allowed, fewer where fewer are, never one it rules out.
func TestEventsMarshal(t *testing.T) {
	ctx := context.Background()
	e, err := specula.Open(specula.Config{Model: demoTarget, Draft: demoDraft})
	require.NoError(t, err)
	defer e.Close()
	tok := e.Tokenizer()
	for _, c := range []struct {
		name  string
		req   specula.Request
		lang  language // with a Format
		fewer bool     // some place allows fewer tokens than TopLogprobs
	}{
		{name: "plain logprobs", req: specula.Request{Prompt: "func main() {\n", Logprobs: true, TopLogprobs: 5,
			Params: specula.Params{MaxTokens: 16, Temperature: 0.8, Seed: 2, IgnoreEOS: true}}},
		{name: "echo with logprobs", req: specula.Request{Prompt: "func (s *Server) Close() error {\n", Echo: true, Logprobs: true, TopLogprobs: 5,
			Params: specula.Params{MaxTokens: 8, IgnoreEOS: true}}},
		{name: "echo, prompt only", req: specula.Request{Prompt: "package main\n\nimport \"fmt\"\n", Echo: true, PromptOnly: true, Logprobs: true}},
		{name: "choice", req: specula.Request{Prompt: "// Answer yes or no: is Go compiled?\n", Logprobs: true, TopLogprobs: 5, N: 2,
			Params: specula.Params{MaxTokens: 8, Temperature: 1, Seed: 4, Format: specula.Format{Regex: "(yes|no)"}}},
			lang: oneOf("yes", "no"), fewer: true},
		// The most alternatives: after three digits only ten digits and the end remain.
		{name: "digits", req: specula.Request{Prompt: "const port = ", Logprobs: true, TopLogprobs: specula.MaxTopLogprobs,
			Params: specula.Params{MaxTokens: 8, Format: specula.Format{Regex: "[0-9]{1,4}"}}},
			lang: digits(4), fewer: true},
		{name: "schema enum", req: specula.Request{Prompt: "// The answer, as JSON:\n", Logprobs: true, TopLogprobs: 5,
			Params: specula.Params{MaxTokens: 8, Temperature: 1, Seed: 1, Format: specula.Format{JSONSchema: `{"enum": ["yes", "no"]}`}}},
			lang: oneOf(`"yes"`, `"no"`), fewer: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			top := c.req.TopLogprobs
			var events []specula.Event
			got, err := e.GenerateFunc(ctx, c.req, func(ev specula.Event) error {
				b, err := json.Marshal(ev)
				require.NoError(t, err, "event %d", len(events))
				var back specula.Event
				require.NoError(t, json.Unmarshal(b, &back))
				assert.Equal(t, ev, back, "event %d comes back from JSON", len(events))
				events = append(events, ev)
				return nil
			})
			require.NoError(t, err)
			b, err := json.Marshal(got)
			require.NoError(t, err, "the completion")
			var back specula.Completion
			require.NoError(t, json.Unmarshal(b, &back))
			assert.Equal(t, got, back, "the completion comes back from JSON")

			if c.req.Echo {
				require.Len(t, got.PromptLogprobs, len(got.PromptTokens))
				first := got.PromptLogprobs[0]
				assert.True(t, first.Unscored, "the prompt's first token")
				assert.Zero(t, first.Logprob)
				assert.Empty(t, first.Top)
				assert.Contains(t, string(b), `"Unscored":true`)
				for i, lp := range got.PromptLogprobs[1:] {
					assert.False(t, lp.Unscored, "prompt token %d", i+1)
					finiteLogprob(t, lp.Logprob, "prompt token", i+1)
					assert.Len(t, lp.Top, c.req.TopLogprobs, "prompt token %d", i+1)
				}
			}
			sawFewer := false
			for _, ch := range got.Choices {
				require.Len(t, ch.Logprobs, len(ch.Tokens), "choice %d", ch.Index)
				var text []byte
				for i, lp := range ch.Logprobs {
					assert.False(t, lp.Unscored)
					finiteLogprob(t, lp.Logprob, "token", ch.Index, i)
					for k, alt := range lp.Top {
						finiteLogprob(t, alt.Logprob, "alternative", ch.Index, i, k)
						if k > 0 {
							assert.LessOrEqual(t, alt.Logprob, lp.Top[k-1].Logprob, "likeliest first")
						}
					}
					if c.lang == nil {
						assert.Len(t, lp.Top, top, "choice %d token %d", ch.Index, i)
					} else {
						allowed := allowedAfter(tok, c.lang, string(text))
						assert.True(t, allowed[lp.Token], "choice %d token %d %q is allowed", ch.Index, i, lp.Text)
						assert.LessOrEqual(t, len(lp.Top), min(top, len(allowed)), "choice %d token %d: %d allowed", ch.Index, i, len(allowed))
						assert.NotEmpty(t, lp.Top, "the chosen token is allowed, so one is")
						for k, alt := range lp.Top {
							assert.True(t, allowed[alt.Token], "choice %d token %d: alternative %d %q (%v) is ruled out", ch.Index, i, k, alt.Text, alt.Logprob)
						}
						sawFewer = sawFewer || len(lp.Top) < top
					}
					text = append(text, lp.Bytes...)
				}
			}
			if c.fewer {
				assert.True(t, sawFewer, "some place allows fewer than %d tokens", top)
			}
		})
	}
}
