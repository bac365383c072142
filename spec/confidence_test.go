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

// stopCounter wraps a drafter and counts its chains that ended short of the k asked,
// to show that the confidence stop fired. Its sessions are composites, so the
// decoder finds the wrapped session's confidence stop through them.
type stopCounter struct {
	d              draft.Drafter
	chains, shortN *int
}

func (c stopCounter) Start(ctx context.Context, req draft.Request) (draft.Session, error) {
	s, err := c.d.Start(ctx, req)
	if err != nil {
		return nil, err
	}
	return &stopCounting{s, c}, nil
}

type stopCounting struct {
	s draft.Session
	c stopCounter
}

func (s *stopCounting) Sessions() []draft.Session { return []draft.Session{s.s} }

func (s *stopCounting) Propose(ctx context.Context, h []int32, k int, p *draft.Proposal) error {
	if err := s.s.Propose(ctx, h, k, p); err != nil {
		return err
	}
	*s.c.chains++
	if len(p.Tokens) < k {
		*s.c.shortN++
	}
	return nil
}

func (s *stopCounting) Close() error { return s.s.Close() }

// TestSequenceDistributionConfidenceStop is TestSequenceDistribution's chi-square
// test of continuations against the target's enumerated distribution, with draft
// models whose chains end by confidence: fixed thresholds, and the threshold the
// adaptive controller learns and moves as it goes (its probes under a lower one
// included).
func TestSequenceDistributionConfidenceStop(t *testing.T) {
	const draws = 60_000
	cases := []struct {
		name          string
		vocab, order  int
		k, length     int
		pmin          float64
		adaptive      bool
		params        sampler.Params
		short, judged bool // the stop must end chains short; the last position judged
	}{
		{"fixed 0.6, length 6, K=5", 4, 1, 5, 6, 0.6, false, sampler.Params{Temperature: 1}, true, true},
		{"fixed 0.9, K=3, top-p", 6, 2, 3, 3, 0.9, false, sampler.Params{Temperature: 0.7, TopP: 0.9}, true, false},
		{"fixed 0.5, penalty, top-k", 6, 1, 4, 4, 0.5, false, sampler.Params{Temperature: 0.9, TopK: 4, RepetitionPenalty: 1.5}, true, false},
		{"learned, adaptive, length 6, K=5", 4, 2, 5, 6, spec.PMinLearned, true, sampler.Params{Temperature: 1}, true, false},
	}
	for ci, cfg := range cases {
		t.Run(cfg.name, func(t *testing.T) {
			t.Parallel()
			tgt := newChain(t, markov.Config{Vocab: cfg.vocab, Order: cfg.order, Seed: uint64(300 + ci), Scale: 1.5})
			var chains, short int
			d := stopCounter{newDrafter(t, tgt.Perturbed(1.2, uint64(ci))), &chains, &short}
			dec, err := spec.New(local(t, tgt), d, spec.Options{K: cfg.k, Adaptive: cfg.adaptive, DraftPMin: cfg.pmin})
			require.NoError(t, err)
			prompt := []int32{1, 2}
			want := reference.Continuations(tgt, prompt, cfg.length, cfg.params)
			fit, agg := fitDraws(t, dec, spec.Request{Prompt: prompt, MaxTokens: cfg.length, Sampling: cfg.params}, draws, cfg.vocab, want,
				func(res spec.Result) { require.Len(t, res.Tokens, cfg.length) })
			assert.Zero(t, fit.Impossible, "generated a sequence the target never would")
			assert.Greater(t, fit.P, minP, "chi-square %.1f on %d df", fit.Stat, fit.DF)
			rate := agg.Total.AcceptanceRate()
			assert.True(t, rate > 0.05 && rate < 0.98, "acceptance %.3f", rate)
			switch {
			case cfg.short && cfg.adaptive:
				// Where the learned threshold settles depends on the machine's timing.
				assert.Positive(t, short, "%d of %d chains ended short", short, chains)
			case cfg.short:
				assert.Greater(t, float64(short), 0.1*float64(chains), "%d of %d chains ended short", short, chains)
			}
			if cfg.judged {
				assert.Positive(t, agg.Total.AcceptedAt[cfg.k-1], "the last draft position was judged and passed")
			}
			t.Logf("p=%.3f, %d of %d chains short, %s", fit.P, short, chains, agg.String())
		})
	}
}

// TestGreedyIdentityConfidenceStop: with the confidence stop — fixed, learned by the
// adaptive controller, with prompt lookup in front of the draft model, with a
// repetition penalty — greedy speculative output is plain greedy decoding's, token
// for token.
func TestGreedyIdentityConfidenceStop(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	ctx := context.Background()
	var agg spec.Aggregate
	var chains, short int
	for chainIdx := range 60 {
		vocab := 5 + rng.IntN(60)
		order := 1 + rng.IntN(2)
		tgt := newChain(t, markov.Config{Vocab: vocab, Order: order, Seed: uint64(chainIdx), Scale: 0.5 + 2*rng.Float64()})
		m := stopCounter{newDrafter(t, tgt.Perturbed(rng.Float64()*2, uint64(chainIdx))), &chains, &short}
		drafters := map[string]draft.Drafter{"model": m, "lookup, model": draft.First(lookup.NGram{Min: 2, Max: 4}, m)}
		params := sampler.Params{}
		if chainIdx%3 == 0 {
			params = sampler.Params{RepetitionPenalty: 1.3, RepetitionWindow: 16}
		}
		prompt := []int32{int32(rng.IntN(vocab)), int32(rng.IntN(vocab)), int32(rng.IntN(vocab))}
		want := reference.Greedy(tgt, prompt, 40, params)
		for name, d := range drafters {
			for _, opts := range []spec.Options{{K: 4, DraftPMin: 0.5}, {K: 8, DraftPMin: 0.9}, {K: 6, Adaptive: true, DraftPMin: spec.PMinLearned}, {K: 6, Adaptive: true, DraftPMin: 0.7}, {K: 4, DraftPMin: spec.PMinLearned}} {
				dec, err := spec.New(local(t, tgt), d, opts)
				require.NoError(t, err)
				for range 3 { // the adaptive decoder learns from request to request
					res, err := single(dec.GenerateFunc(ctx, spec.Request{Prompt: prompt, MaxTokens: 40, Sampling: params}, nil))
					require.NoError(t, err)
					require.Equal(t, want, res.Tokens, "chain %d (vocab %d, order %d), drafter %s, %+v", chainIdx, vocab, order, name, opts)
					agg.Add(res.Stats)
				}
			}
		}
	}
	rate := agg.Total.AcceptanceRate()
	assert.True(t, rate > 0.1 && rate < 0.95, "acceptance %.3f", rate)
	assert.Greater(t, float64(short), 0.1*float64(chains), "%d of %d chains ended short", short, chains)
	t.Log(agg.String())
}

// TestDraftPMinOption: a threshold above 1, or negative but PMinLearned, is refused;
// an adaptive request reports the threshold in force per drafter (the fixed one, or 0
// with the stop off, the default).
func TestDraftPMinOption(t *testing.T) {
	tgt := newChain(t, markov.Config{Vocab: 16, Order: 1, Seed: 2})
	d := newDrafter(t, tgt.Perturbed(0.8, 1))
	for _, bad := range []float64{1.5, 2, -0.5, -2} {
		_, err := spec.New(local(t, tgt), d, spec.Options{K: 4, DraftPMin: bad})
		assert.Error(t, err, "DraftPMin %v", bad)
	}
	cases := []struct {
		pmin float64
		want []float64
	}{{0.8, []float64{0.8, 0.8}}, {0, []float64{0, 0}}}
	for _, c := range cases {
		t.Run(fmt.Sprint(c.pmin), func(t *testing.T) {
			dec, err := spec.New(local(t, tgt), d, spec.Options{K: 4, Adaptive: true, DraftPMin: c.pmin, Alternatives: []draft.Drafter{lookup.NGram{}}})
			require.NoError(t, err)
			res, err := single(dec.GenerateFunc(context.Background(), spec.Request{Prompt: []int32{1, 2}, MaxTokens: 30}, nil))
			require.NoError(t, err)
			assert.Equal(t, c.want, res.Stats.DraftPMin)
		})
	}
}

// TestZeroAllocationsConfidenceStop: with the confidence stop, learned or fixed, the
// decoding loop still allocates nothing per token (600 tokens allocate what 60 do).
func TestZeroAllocationsConfidenceStop(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates for channel and lock operations")
	}
	tgt := newChain(t, markov.Config{Vocab: 512, Order: 1, Seed: 1, ContextLength: 1024})
	d := newDrafter(t, tgt.Perturbed(0.8, 1))
	cases := []struct {
		name string
		opts spec.Options
		p    sampler.Params
	}{
		{"learned, greedy", spec.Options{K: 6, Adaptive: true, DraftPMin: spec.PMinLearned}, sampler.Params{}},
		{"learned, sampled", spec.Options{K: 6, Adaptive: true, DraftPMin: spec.PMinLearned}, sampler.Params{Temperature: 0.8}},
		{"fixed, fixed K, sampled", spec.Options{K: 5, DraftPMin: 0.6}, sampler.Params{Temperature: 0.8}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dec, err := spec.New(local(t, tgt), d, c.opts)
			require.NoError(t, err)
			allocs := func(n int) float64 {
				return testing.AllocsPerRun(20, func() {
					req := spec.Request{Prompt: []int32{1, 2, 3}, MaxTokens: n, Sampling: c.p}
					if _, err := dec.GenerateFunc(context.Background(), req, nil); err != nil {
						t.Fatal(err)
					}
				})
			}
			short, long := allocs(60), allocs(600)
			t.Logf("allocations per request: %v (60 tokens), %v (600 tokens)", short, long)
			assert.Equal(t, short, long)
		})
	}
}

// dropBelow is a wrong confidence stop, on purpose: it ends the chain before its
// first token whose confidence is below tau, so whether a drawn token is kept
// depends on the token itself, and the kept tokens are not distributed as the q
// they report.
type dropBelow struct {
	d   draft.Drafter
	tau float32
}

func (b dropBelow) Start(ctx context.Context, req draft.Request) (draft.Session, error) {
	s, err := b.d.Start(ctx, req)
	if err != nil {
		return nil, err
	}
	return &dropping{s, b.tau}, nil
}

type dropping struct {
	s   draft.Session
	tau float32
}

func (s *dropping) Propose(ctx context.Context, h []int32, k int, p *draft.Proposal) error {
	if err := s.s.Propose(ctx, h, k, p); err != nil {
		return err
	}
	for i, c := range p.Confidence {
		if c < s.tau {
			p.Tokens, p.Dists, p.Confidence = p.Tokens[:i], p.Dists[:i], p.Confidence[:i]
			break
		}
	}
	return nil
}

func (s *dropping) Close() error { return s.s.Close() }

// TestConfidenceStopDetectsBias runs TestSequenceDistributionConfidenceStop's check
// on a stop that drops the token that falls below the threshold after drawing it, to
// show that the check catches a stop that reads the token it keeps.
func TestConfidenceStopDetectsBias(t *testing.T) {
	const draws = 20_000
	tgt := newChain(t, markov.Config{Vocab: 6, Order: 1, Seed: 3, Scale: 1.5})
	params := sampler.Params{Temperature: 1}
	dec := newDecoder(t, tgt, dropBelow{newDrafter(t, tgt.Perturbed(1.2, 1)), 0.4}, 3)
	prompt := []int32{1}
	counts := make([]int, 6*6*6)
	for i := range draws {
		params.Seed = uint64(i)
		res, err := single(dec.GenerateFunc(context.Background(), spec.Request{Prompt: prompt, MaxTokens: 3, Sampling: params}, nil))
		require.NoError(t, err)
		counts[reference.Index(res.Tokens, 6)]++
	}
	fit := stattest.ChiSquare(counts, reference.Continuations(tgt, prompt, 3, params))
	assert.Less(t, fit.P, minP, "the biased stop went unnoticed: chi-square %.1f on %d df", fit.Stat, fit.DF)
	t.Logf("biased stop: p=%.3g (chi-square %.1f on %d df)", fit.P, fit.Stat, fit.DF)
}
