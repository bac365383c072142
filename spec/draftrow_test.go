package spec_test

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/draft"
	"github.com/specula/specula/internal/markov"
	"github.com/specula/specula/internal/reference"
	"github.com/specula/specula/internal/stattest"
	"github.com/specula/specula/sampler"
	"github.com/specula/specula/spec"
)

// mixedDrafter drafts from a chain as a user's own drafter would: position i of the
// draft is the chain's argmax, reported with a nil row, where pattern[i] is 'F'
// (fixed), and a draw from the chain's processed distribution, reported with its row,
// where it is 'S' (sampled). Dists is never nil, so a fixed token is always a nil row
// inside a non-nil Dists. With tree set it proposes the same chain as a tree (each
// token the child of the one before), and with collide it takes its random numbers
// from the request's own stream instead of the one it is handed, as a drafter calling
// sampler.New with the request's seed would.
type mixedDrafter struct {
	c       *markov.Chain
	pattern string
	tree    bool
	collide *uint64 // the request's seed, or nil
}

func (d mixedDrafter) Start(_ context.Context, req draft.Request) (draft.Session, error) {
	p := req.Sampling
	if d.collide != nil {
		p = sampler.Params{Temperature: p.Temperature, TopP: p.TopP, Seed: *d.collide}
	}
	smp, err := sampler.New(p, d.c.Info().VocabSize)
	if err != nil {
		return nil, err
	}
	return &mixedSession{d: d, smp: smp}, nil
}

type mixedSession struct {
	d    mixedDrafter
	smp  *sampler.Sampler
	hist []int32
}

func (s *mixedSession) Propose(_ context.Context, history []int32, k int, p *draft.Proposal) error {
	s.hist = append(s.hist[:0], history...)
	v := s.d.c.Info().VocabSize
	p.Tokens, p.Dists, p.Parents = nil, make([][]float32, 0, k), nil
	for i := range min(k, len(s.d.pattern)) {
		logits := s.d.c.Logits(s.hist)
		var tok int32
		var row []float32
		if s.d.pattern[i] == 'F' {
			var err error
			if tok, err = s.smp.Argmax(logits, s.hist); err != nil {
				return err
			}
		} else {
			row = make([]float32, v)
			if err := s.smp.Process(logits, s.hist, row); err != nil {
				return err
			}
			tok = s.smp.Sample(row)
		}
		p.Tokens = append(p.Tokens, tok)
		p.Dists = append(p.Dists, row)
		if s.d.tree {
			p.Parents = append(p.Parents, int32(i-1))
		}
		s.hist = append(s.hist, tok)
	}
	return nil
}

func (s *mixedSession) Close() error { return nil }

// sampledFit draws length-token continuations of prompt from dec with seeds 0, 1, …
// and fits them to the target's enumerated distribution.
func sampledFit(t *testing.T, dec *spec.Decoder, tgt *markov.Chain, prompt []int32, length, draws int, params sampler.Params, seed *uint64) (stattest.Fit, spec.Aggregate) {
	t.Helper()
	want := reference.Continuations(tgt, prompt, length, params)
	counts := make([]int, len(want))
	var agg spec.Aggregate
	for i := range draws {
		req := spec.Request{Prompt: prompt, MaxTokens: length, Sampling: params}
		req.Sampling.Seed = uint64(i)
		if seed != nil {
			*seed = req.Sampling.Seed
		}
		res, err := single(dec.GenerateFunc(context.Background(), req, nil))
		require.NoError(t, err)
		require.Len(t, res.Tokens, length)
		counts[reference.Index(res.Tokens, tgt.Info().VocabSize)]++
		agg.Add(res.Stats)
	}
	return stattest.ChiSquare(counts, want), agg
}

// TestMixedDrafts: a draft that mixes fixed tokens (nil rows) and sampled ones, in
// any order, as a chain or as the same chain in tree form, leaves the output
// distributed exactly as the target's.
func TestMixedDrafts(t *testing.T) {
	const draws = 40_000
	patterns := []string{"F", "FS", "SF", "FSS", "SSF", "SFS", "FSSSS", "SSSSF", "FSFSF"}
	type config struct {
		pattern string
		temp    float64
		tree    bool
	}
	var configs []config
	for _, pat := range patterns {
		for _, temp := range []float64{1, 0.6} {
			configs = append(configs, config{pat, temp, false})
		}
	}
	configs = append(configs, config{"SF", 1, true}, config{"FSFSF", 0.6, true})
	for ci, cfg := range configs {
		name := fmt.Sprintf("K=%d/%s/T=%g", len(cfg.pattern), cfg.pattern, cfg.temp)
		if cfg.tree {
			name += "/tree"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			k := len(cfg.pattern)
			vocab, length := 5, k+1 // every position is reached, the last included
			if k == 5 {
				vocab = 4
			}
			tgt := newChain(t, markov.Config{Vocab: vocab, Order: 1, Seed: uint64(300 + ci), Scale: 1.5})
			d := mixedDrafter{c: tgt.Perturbed(1, uint64(ci)), pattern: cfg.pattern, tree: cfg.tree}
			params := sampler.Params{Temperature: cfg.temp}
			fit, agg := sampledFit(t, newDecoder(t, tgt, d, k), tgt, []int32{1}, length, draws, params, nil)
			assert.Zero(t, fit.Impossible, "generated a sequence the target never would")
			assert.Greater(t, fit.P, 1e-3, "chi-square %.1f on %d df", fit.Stat, fit.DF)
			// Meaningful only if fixed and sampled positions were both judged, and
			// drafts both accepted and rejected, at every position.
			for i := range k {
				at := agg.Total.AcceptedAt[i]
				assert.True(t, at > 0 && at < agg.Total.DraftedAt[i], "position %d (%c): accepted %d of %d", i, cfg.pattern[i], at, agg.Total.DraftedAt[i])
			}
			t.Logf("p=%.3f, %s", fit.P, agg.String())
		})
	}
}

// TestNilRowThroughTheDecoder: a drafter that always proposes the target's least
// likely token with Dists = [][]float32{nil} (one-hot) must not get it emitted every
// time: the first output token is distributed as the target's p.
func TestNilRowThroughTheDecoder(t *testing.T) {
	const draws = 20_000
	tgt := newChain(t, markov.Config{Vocab: 6, Order: 1, Seed: 8, Scale: 2})
	prompt := []int32{2}
	params := sampler.Params{Temperature: 1}
	p := reference.Process(tgt.Logits(prompt), prompt, params)
	rare := 0
	for i := range p {
		if p[i] < p[rare] {
			rare = i
		}
	}
	require.Less(t, p[rare], 0.02, "the test needs a token the target seldom picks")
	d := sessionDrafter{draft.Proposal{Tokens: []int32{int32(rare)}, Dists: [][]float32{nil}}}
	dec := newDecoder(t, tgt, d, 1)
	counts := make([]int, len(p))
	for i := range draws {
		params.Seed = uint64(i)
		res, err := single(dec.GenerateFunc(context.Background(), spec.Request{Prompt: prompt, MaxTokens: 1, Sampling: params}, nil))
		require.NoError(t, err)
		counts[res.Tokens[0]]++
	}
	fit := stattest.ChiSquare(counts, p)
	assert.Greater(t, fit.P, 1e-3, "first tokens %v against p %.4f (chi-square %.1f)", counts, p, fit.Stat)
	z := stattest.BinomialZ(counts[rare], draws, p[rare])
	assert.Less(t, math.Abs(z), 4.5, "the drafted token came first %d times of %d, p = %.4f", counts[rare], draws, p[rare])
}

// TestDrafterRandomSource: a drafter that samples with the random source it is handed
// (sampler.New(req.Sampling, …)) keeps the output exact; the same drafter drawing on
// the request's own stream, as a drafter calling sampler.New with the request's seed
// would, is caught by the same test with the same draws.
func TestDrafterRandomSource(t *testing.T) {
	const draws = 40_000
	tgt := newChain(t, markov.Config{Vocab: 5, Order: 1, Seed: 41, Scale: 1.5})
	params := sampler.Params{Temperature: 1}
	var seed uint64
	for _, tc := range []struct {
		name    string
		collide *uint64
	}{{"own stream", nil}, {"request's stream", &seed}} {
		t.Run(tc.name, func(t *testing.T) {
			d := mixedDrafter{c: tgt.Perturbed(0.8, 3), pattern: "SSS", collide: tc.collide}
			fit, agg := sampledFit(t, newDecoder(t, tgt, d, 3), tgt, []int32{1}, 4, draws, params, &seed)
			if tc.collide == nil {
				assert.Greater(t, fit.P, 1e-3, "chi-square %.1f on %d df", fit.Stat, fit.DF)
			} else {
				assert.Less(t, fit.P, 1e-9, "a drafter sharing the acceptance stream should be caught (chi-square %.1f on %d df)", fit.Stat, fit.DF)
			}
			t.Logf("p=%.3g, chi-square %.1f on %d df, %s", fit.P, fit.Stat, fit.DF, agg.String())
		})
	}
}

// seedRecorder records the sampling parameters each session it starts is handed.
type seedRecorder struct{ seen *[]sampler.Params }

func (r seedRecorder) Start(_ context.Context, req draft.Request) (draft.Session, error) {
	*r.seen = append(*r.seen, req.Sampling)
	return sessionDrafter{}, nil
}

// TestSessionsHaveTheirOwnStreams: every drafting session of a request, those that
// First starts and the alternatives of an adaptive decoder included, is handed a random
// stream unrelated to the request's and to every other session's.
func TestSessionsHaveTheirOwnStreams(t *testing.T) {
	tgt := newChain(t, markov.Config{Vocab: 6, Order: 1})
	var seen []sampler.Params
	rec := seedRecorder{&seen}
	dec, err := spec.New(local(t, tgt), draft.First(rec, rec), spec.Options{K: 2, Adaptive: true, Alternatives: []draft.Drafter{rec, draft.First(rec)}})
	require.NoError(t, err)
	req := spec.Request{Prompt: []int32{1}, MaxTokens: 4, Sampling: sampler.Params{Temperature: 0.8, Seed: 12}}
	_, err = single(dec.GenerateFunc(context.Background(), req, nil))
	require.NoError(t, err)
	require.Len(t, seen, 4)
	first := map[float64]int{}
	for i, p := range append([]sampler.Params{req.Sampling}, seen...) {
		assert.Equal(t, req.Sampling.Temperature, p.Temperature, "session %d", i)
		s, err := sampler.New(p, 6)
		require.NoError(t, err)
		u := s.Float64()
		if j, ok := first[u]; ok {
			t.Errorf("streams %d and %d draw the same numbers (0 is the request's)", j, i)
		}
		first[u] = i
	}
}
