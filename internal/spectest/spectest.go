// Package spectest holds the statistical check that speculative sampling from a real
// model draws from the target's own distribution, shared by the tests of the model
// packages (test support, so internal).
package spectest

import (
	"context"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/internal/reference"
	"github.com/specula/specula/internal/stattest"
	"github.com/specula/specula/sampler"
	"github.com/specula/specula/spec"
)

// TwoTokens draws two-token continuations of prompt from dec — the first token
// through the acceptance rule, the second after it — and checks them by a chi-square
// test over draws seeded draws (re-drawn once at α = 1e-3) against the target's own
// distribution under params, which logits (the target's last-position logits after a
// history) gives; vocab is the target's vocabulary size. It also asserts that drafts
// were both accepted and rejected, so that the acceptance rule was exercised, and
// returns the fit.
func TwoTokens(t *testing.T, dec *spec.Decoder, logits func([]int32) []float32, vocab int, prompt []int32, params sampler.Params, draws int) stattest.Fit {
	t.Helper()
	// The first token's support, each with the second token's distribution after it
	// (the rest of vocab² is zero).
	var support []int32
	var want []float64
	for a, pa := range reference.ContinuationsOf(logits, vocab, prompt, 1, params) {
		if pa > 0 {
			h := append(slices.Clone(prompt), int32(a))
			for _, pb := range reference.ContinuationsOf(logits, vocab, h, 1, params) {
				want = append(want, pa*pb)
			}
			support = append(support, int32(a))
		}
	}
	var accepted, drafted int
	fit := stattest.Retest(1e-3, func(round int) stattest.Fit {
		counts := make([]int, len(want))
		for i := range draws {
			req := spec.Request{Prompt: prompt, MaxTokens: 2, Sampling: params}
			req.Sampling.Seed = uint64(round*draws + i)
			rs, err := dec.GenerateFunc(context.Background(), req, nil)
			require.NoError(t, err)
			res := rs[0]
			require.Len(t, res.Tokens, 2)
			a := slices.Index(support, res.Tokens[0])
			require.GreaterOrEqual(t, a, 0, "a first token outside the target's support")
			counts[a*vocab+int(res.Tokens[1])]++
			accepted += res.Stats.Accepted
			drafted += res.Stats.Drafted
		}
		return stattest.ChiSquare(counts, want)
	})
	assert.Zero(t, fit.Impossible, "a token the target never draws")
	assert.Greater(t, fit.P, 1e-3, "chi-square %.1f on %d df", fit.Stat, fit.DF)
	assert.Positive(t, accepted, "drafts accepted")
	assert.Less(t, accepted, drafted, "drafts rejected")
	t.Logf("p=%.3f, drafted %d, accepted %d", fit.P, drafted, accepted)
	return fit
}
