package heads_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/draft"
	"github.com/specula/specula/draft/heads"
	"github.com/specula/specula/internal/sharedtest"
	"github.com/specula/specula/sampler"
	"github.com/specula/specula/spec"
	"github.com/specula/specula/target"
)

// TestHeadsConfidenceStop: every shared head's chains (as deep as the head drafts,
// up to 5) report each token's confidence
// (q of the token when sampled; the softmax probability of the argmax when greedy)
// and, told a threshold, end after the first token below it and nowhere else; the
// tokens drafted are the same as without the stop, cut (the stop reads only numbers
// of tokens already drawn). Then greedy decoding with a fixed threshold and with the
// learned one is plain greedy decoding, token for token.
func TestHeadsConfidenceStop(t *testing.T) {
	m, path := gocoderM(t)
	toks := append(append([]int32(nil), promptA...), promptB...)
	st := states(t, m, toks)
	tgt, err := target.NewLocal(m)
	require.NoError(t, err)
	plain, err := spec.New(tgt, nil, spec.Options{})
	require.NoError(t, err)
	for _, dir := range []string{"gocoder-m-mlp-speculator", "gocoder-m-medusa", "gocoder-m-eagle"} {
		t.Run(dir, func(t *testing.T) {
			d, closer, err := heads.Open(sharedtest.Path(t, "models", dir), m.Info(), onTarget(m, path, draft.TreeShape{}))
			require.NoError(t, err)
			defer closer.Close()
			for _, temp := range []float64{0, 0.8} {
				var short int
				for _, pos := range []int{12, 19, 27, 33, 41, 48, 56, 63} {
					whole := proposeStopped(t, d, toks[:pos], st, temp, 0)
					p := proposeStopped(t, d, toks[:pos], st, temp, 0.9)
					require.NotEmpty(t, whole.Tokens)
					require.Len(t, whole.Confidence, len(whole.Tokens))
					require.Len(t, p.Confidence, len(p.Tokens))
					assert.Equal(t, whole.Tokens[:len(p.Tokens)], p.Tokens, "T=%v position %d: the stop cuts, never changes", temp, pos)
					for i, c := range p.Confidence {
						assert.True(t, c > 0 && c <= 1, "confidence %v", c)
						if temp > 0 {
							assert.Equal(t, p.Dists[i][p.Tokens[i]], c, "q of the token drawn")
						}
						if i < len(p.Tokens)-1 {
							assert.GreaterOrEqual(t, c, float32(0.9))
						}
					}
					if n := len(p.Tokens); n < len(whole.Tokens) {
						short++
						assert.Less(t, p.Confidence[n-1], float32(0.9), "T=%v position %d: a chain ends short only at its stop", temp, pos)
					}
				}
				assert.Positive(t, short, "T=%v: the stop fired", temp)
			}
			for _, opts := range []spec.Options{{K: 4, DraftPMin: 0.7}, {K: 6, Adaptive: true, DraftPMin: spec.PMinLearned}} {
				dec, err := spec.New(tgt, d, opts)
				require.NoError(t, err)
				for _, prompt := range [][]int32{promptA, promptB} {
					req := spec.Request{Prompt: prompt, MaxTokens: 32}
					want, err := plain.GenerateFunc(context.Background(), req, nil)
					require.NoError(t, err)
					got, err := dec.GenerateFunc(context.Background(), req, nil)
					require.NoError(t, err)
					assert.Equal(t, want[0].Tokens, got[0].Tokens, "%+v", opts)
				}
			}
		})
	}
}

// proposeStopped asks d for 5 tokens after history under confidence threshold tau at
// temperature temp (seed 1), and returns a copy of the proposal.
func proposeStopped(t *testing.T, d draft.Drafter, history []int32, st [][]float32, temp float64, tau float32) draft.Proposal {
	t.Helper()
	s, err := d.Start(context.Background(), draft.Request{Prompt: history[:1], VocabSize: 8192, MaxK: 5, MaxLen: 80,
		Sampling: sampler.Params{Temperature: temp, Seed: 1}})
	require.NoError(t, err)
	defer s.Close()
	c, ok := s.(draft.Confident)
	require.True(t, ok, fmt.Sprintf("%T ends chains by confidence", s))
	c.StopBelow(tau)
	require.NoError(t, s.(draft.StateSession).Observe(history[1:], st[:len(history)-1]))
	var p draft.Proposal
	require.NoError(t, s.Propose(context.Background(), history, 5, &p))
	out := draft.Proposal{Tokens: append([]int32(nil), p.Tokens...), Confidence: append([]float32(nil), p.Confidence...)}
	for _, q := range p.Dists {
		out.Dists = append(out.Dists, append([]float32(nil), q...))
	}
	return out
}
