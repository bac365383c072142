package spec_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/spec"
)

// letters is a toy detokenizer: token i is the text pieces[i].
type letters struct{ pieces []string }

func (l letters) Push(id int32) string { return l.pieces[id] }
func (l letters) Flush() string        { return "" }

// TestStopStrings ends generation on text that spans tokens and draft boundaries, and
// never hands out a token past the stop.
func TestStopStrings(t *testing.T) {
	tgt, d, prompt, ref := greedyFixture(t)
	pieces := []string{"a", "bc", "d", "e ", "f", "gh", "i", " ", "jk", "l"}
	text := func(toks []int32) (string, []int) {
		var b strings.Builder
		var ends []int
		for _, tok := range toks {
			b.WriteString(pieces[tok])
			ends = append(ends, b.Len())
		}
		return b.String(), ends
	}
	full, ends := text(ref[:150])
	// Stop strings taken from the reference text: one spanning two tokens, one
	// starting inside a token, and one that never occurs.
	spanStart := ends[40]
	stopA := full[spanStart-1 : spanStart+2]
	stopB := full[ends[90]-1 : ends[92]]
	for _, c := range []struct {
		name  string
		stops []string
	}{
		{"spanning", []string{stopA}},
		{"inside a token", []string{stopB, "zzzz"}},
		{"absent", []string{"zzzz"}},
	} {
		for _, include := range []bool{false, true} {
			for _, k := range []int{0, 4, 7} {
				t.Run(fmt.Sprintf("%s/include=%v/K=%d", c.name, include, k), func(t *testing.T) {
					at := -1
					for _, s := range c.stops {
						if i := strings.Index(full, s); i >= 0 && (at < 0 || i < at) {
							at = i
						}
					}
					want := ref[:150]
					finish := spec.FinishLength
					if at >= 0 {
						finish = spec.FinishStop
						n := 0
						for n < len(ends) && ends[n] <= at {
							n++
						}
						if include {
							// Up to the token that completes the stop string.
							for _, s := range c.stops {
								if i := strings.Index(full, s); i == at {
									n = 0
									for ends[n] < at+len(s) {
										n++
									}
									n++
								}
							}
						}
						want = ref[:n]
					}
					var got []int32
					res, err := single(newDecoder(t, tgt, d, k).GenerateFunc(context.Background(), spec.Request{
						Prompt: prompt, MaxTokens: 150, StopStrings: c.stops, IncludeStop: include,
						Text: func() spec.TextStream { return letters{pieces} },
					}, func(ch spec.Chunk) error {
						got = append(got, ch.Tokens...)
						require.Equal(t, want[:len(got)], got, "a token past the stop was handed out")
						return nil
					}))
					require.NoError(t, err)
					assert.Equal(t, want, got)
					assert.Equal(t, finish, res.Finish)
				})
			}
		}
	}
	_, err := single(newDecoder(t, tgt, d, 2).GenerateFunc(context.Background(), spec.Request{Prompt: prompt, StopStrings: []string{"x"}}, nil))
	assert.ErrorContains(t, err, "Text: is nil: StopStrings need a detokenizer")
	_, err = single(newDecoder(t, tgt, d, 2).GenerateFunc(context.Background(), spec.Request{Prompt: prompt, StopStrings: []string{""},
		Text: func() spec.TextStream { return letters{pieces} }}, nil))
	assert.ErrorContains(t, err, "StopStrings[0]: is empty")
}
