package draft_test

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/draft"
	"github.com/specula/specula/internal/markov"
	"github.com/specula/specula/internal/reference"
	"github.com/specula/specula/sampler"
)

// TestModelDrafterConfidenceStop: a draft model reports each chain token's
// confidence — q(token) when sampled, the softmax probability of the argmax when
// greedy — and, told a threshold, ends its chain after the first token below it and
// nowhere else; lookup in front of it passes the stop on.
func TestModelDrafterConfidenceStop(t *testing.T) {
	ctx := context.Background()
	c := chain(t, markov.Config{Vocab: 10, Order: 1, Seed: 8, Scale: 1})
	cases := []struct {
		name   string
		params sampler.Params
		tau    float32
	}{
		{"greedy, no stop", sampler.Params{}, 0},
		{"greedy, 0.6", sampler.Params{}, 0.6},
		{"sampled, 0.5", sampler.Params{Temperature: 0.8, TopP: 0.95, Seed: 3}, 0.5},
		{"sampled, 0.9", sampler.Params{Temperature: 1, Seed: 4}, 0.9},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := draft.First(draft.Func(func(h, dst []int32) int { return 0 }), newModel(t, c)).Start(ctx, draft.Request{Sampling: tc.params, VocabSize: 10, MaxK: 6})
			require.NoError(t, err)
			defer s.Close()
			parts := draft.ConfidentParts(s, nil)
			require.Len(t, parts, 1, "the draft model inside First")
			parts[0].StopBelow(tc.tau)
			var p draft.Proposal
			hist := []int32{4}
			short := 0
			for range 40 {
				require.NoError(t, s.Propose(ctx, hist, 6, &p))
				require.Len(t, p.Confidence, len(p.Tokens))
				h := append([]int32(nil), hist...)
				for i, tok := range p.Tokens {
					conf := p.Confidence[i]
					if tc.params.Greedy() {
						l := c.Logits(h)
						lse, _ := sampler.LogSumExp(l, nil)
						assert.InDelta(t, math.Exp(float64(l[tok])-lse), conf, 1e-5)
					} else {
						assert.Equal(t, p.Dists[i][tok], conf)
						want := reference.Process(c.Logits(h), h, tc.params)
						assert.InDelta(t, want[tok], conf, 1e-5)
					}
					assert.True(t, conf > 0 && conf <= 1, "confidence %v", conf)
					if i < len(p.Tokens)-1 {
						assert.GreaterOrEqual(t, conf, tc.tau, "a token below the threshold ends the chain")
					}
					h = append(h, tok)
				}
				if n := len(p.Tokens); n < 6 {
					short++
					assert.Less(t, p.Confidence[n-1], tc.tau, "a chain ends short only at its stop")
				}
				hist = append(append(hist, p.Tokens[:1]...), p.Tokens[len(p.Tokens)-1])
			}
			if tc.tau > 0 {
				assert.Positive(t, short, "the stop fired")
			}
		})
	}
}
