package spec_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/draft"
	"github.com/specula/specula/draft/lookup"
	"github.com/specula/specula/internal/markov"
	"github.com/specula/specula/internal/reference"
	"github.com/specula/specula/internal/stattest"
	"github.com/specula/specula/sampler"
	"github.com/specula/specula/spec"
)

// TestLookupDrafters runs the deterministic lookup drafters — n-gram, suffix chain,
// suffix tree with a shared memory, and a combination falling back to a draft model —
// under greedy decoding: the output must be plain greedy's, and on chains that cycle
// the lookups must be accepted often.
func TestLookupDrafters(t *testing.T) {
	mem := lookup.NewSuffixMemory(1<<16, 32)
	rng := rand.New(rand.NewPCG(3, 3))
	var ngram spec.Aggregate
	for i := range 40 {
		vocab := 4 + rng.IntN(30)
		tgt := newChain(t, markov.Config{Vocab: vocab, Order: 1 + rng.IntN(2), Seed: uint64(500 + i), Scale: 2})
		prompt := []int32{int32(rng.IntN(vocab)), int32(rng.IntN(vocab)), int32(rng.IntN(vocab))}
		want := reference.Greedy(tgt, prompt, 60, sampler.Params{})
		drafters := map[string]draft.Drafter{
			"ngram":       lookup.NGram{Min: 1, Max: 4},
			"suffix":      lookup.Suffix{Depth: 24},
			"suffix tree": lookup.Suffix{Depth: 24, Width: 3, Memory: mem},
			"first":       draft.First(lookup.NGram{Min: 2, Max: 3}, newDrafter(t, tgt.Perturbed(1, uint64(i)))),
		}
		for name, d := range drafters {
			for _, k := range []int{1, 4, 8} {
				res, err := single(newDecoder(t, tgt, d, k).GenerateFunc(context.Background(), spec.Request{Prompt: prompt, MaxTokens: 60}, nil))
				require.NoError(t, err)
				require.Equal(t, want, res.Tokens, fmt.Sprintf("chain %d, %s, K=%d", i, name, k))
				if name == "ngram" && k == 8 {
					ngram.Add(res.Stats)
				}
			}
		}
	}
	assert.Positive(t, mem.Tokens(), "finished requests were learned")
	// Greedy Markov chains fall into cycles, where lookups hit, and a cycle shorter
	// than K goes on in the proposal: the proposal continues the cycle past the end of
	// the history.
	assert.Greater(t, ngram.Total.MeanAcceptedLength(), 2.4, ngram.String())
	t.Log("n-gram, K=8: ", ngram.String())
}

// TestSuffixTreeSampled: deterministic suffix-tree drafts under sampling keep the
// target's distribution.
func TestSuffixTreeSampled(t *testing.T) {
	const draws = 40_000
	tgt := newChain(t, markov.Config{Vocab: 4, Order: 1, Seed: 77, Scale: 2})
	dec := newDecoder(t, tgt, lookup.Suffix{Depth: 8, Width: 2, MinProb: 0.01}, 4)
	prompt := []int32{0, 1, 2, 3, 0, 1, 2, 0, 1, 3, 0, 1}
	params := sampler.Params{Temperature: 1}
	want := reference.Continuations(tgt, prompt, 4, params)
	counts := make([]int, len(want))
	var agg spec.Aggregate
	for i := range draws {
		params.Seed = uint64(i)
		res, err := single(dec.GenerateFunc(context.Background(), spec.Request{Prompt: prompt, MaxTokens: 4, Sampling: params}, nil))
		require.NoError(t, err)
		counts[reference.Index(res.Tokens, 4)]++
		agg.Add(res.Stats)
	}
	fit := stattest.ChiSquare(counts, want)
	assert.Zero(t, fit.Impossible)
	assert.Greater(t, fit.P, 1e-3, "chi-square %.1f on %d df", fit.Stat, fit.DF)
	assert.Greater(t, agg.Total.DraftNodes, agg.Total.Drafted)
	t.Logf("p=%.3f, %s", fit.P, agg.String())
}

// TestAdaptive: an adaptive decoder with several drafters stays exact — greedy output
// is plain greedy's, sampled sequences have the target's distribution — and reports
// what it chose.
func TestAdaptive(t *testing.T) {
	tgt := newChain(t, markov.Config{Vocab: 6, Order: 1, Seed: 31, Scale: 1.5})
	good := newDrafter(t, tgt.Perturbed(0.3, 1))
	bad := newDrafter(t, newChain(t, markov.Config{Vocab: 6, Order: 1, Seed: 999}))
	dec, err := spec.New(local(t, tgt), bad, spec.Options{K: 6, Adaptive: true, Alternatives: []draft.Drafter{lookup.NGram{}, good}})
	require.NoError(t, err)

	prompt := []int32{1, 2}
	want := reference.Greedy(tgt, prompt, 80, sampler.Params{})
	res, err := single(dec.GenerateFunc(context.Background(), spec.Request{Prompt: prompt, MaxTokens: 80}, nil))
	require.NoError(t, err)
	assert.Equal(t, want, res.Tokens)
	steps := 0
	for _, n := range res.Stats.StepsByK {
		steps += n
	}
	assert.Equal(t, res.Stats.Steps, steps)
	t.Logf("greedy: %s; steps by K %v", res.Stats, res.Stats.StepsByK)

	const draws = 30_000
	params := sampler.Params{Temperature: 1}
	wantDist := reference.Continuations(tgt, prompt, 3, params)
	counts := make([]int, len(wantDist))
	for i := range draws {
		params.Seed = uint64(i)
		res, err := single(dec.GenerateFunc(context.Background(), spec.Request{Prompt: prompt, MaxTokens: 3, Sampling: params}, nil))
		require.NoError(t, err)
		counts[reference.Index(res.Tokens, 6)]++
	}
	fit := stattest.ChiSquare(counts, wantDist)
	assert.Zero(t, fit.Impossible)
	assert.Greater(t, fit.P, 1e-3, "chi-square %.1f on %d df", fit.Stat, fit.DF)

	_, err = spec.New(local(t, tgt), good, spec.Options{K: 4, Alternatives: []draft.Drafter{bad}})
	assert.ErrorContains(t, err, "Alternatives need Adaptive")
	_, err = spec.New(local(t, tgt), good, spec.Options{K: 4, Adaptive: true, Alternatives: []draft.Drafter{nil}})
	assert.ErrorContains(t, err, "Alternatives[0] is nil")
}
