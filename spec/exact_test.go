package spec_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/batch"
	"github.com/specula/specula/draft"
	"github.com/specula/specula/internal/markov"
	"github.com/specula/specula/internal/reference"
	"github.com/specula/specula/internal/stattest"
	"github.com/specula/specula/model"
	"github.com/specula/specula/sampler"
	"github.com/specula/specula/spec"
	"github.com/specula/specula/target"
)

func newChain(t testing.TB, cfg markov.Config) *markov.Chain {
	t.Helper()
	c, err := markov.New(cfg)
	require.NoError(t, err)
	return c
}

func newDrafter(t testing.TB, m model.Model) *draft.SmallModel {
	t.Helper()
	d, err := draft.NewSmallModel(m)
	require.NoError(t, err)
	return d
}

// local is the target on m.
func local(t testing.TB, m model.Model) target.Target {
	t.Helper()
	tgt, err := target.NewLocal(m)
	require.NoError(t, err)
	return tgt
}

// fitDraws tests dec's continuations of req against want, the enumerated
// distribution over sequences of req.MaxTokens tokens of vocab (chi-square): it runs
// req draws times, the i-th with seed i, counting each continuation as
// reference.Index reads it, and a first p-value at or below minP is checked again on
// the next draws seeds (stattest.Retest). each, when set, checks every result first.
// The aggregate covers every draw.
func fitDraws(t *testing.T, dec *spec.Decoder, req spec.Request, draws, vocab int, want []float64, each func(spec.Result)) (stattest.Fit, spec.Aggregate) {
	t.Helper()
	var agg spec.Aggregate
	fit := stattest.Retest(minP, func(round int) stattest.Fit {
		counts := make([]int, len(want))
		for i := range draws {
			req.Sampling.Seed = uint64(round*draws + i)
			res, err := single(dec.GenerateFunc(context.Background(), req, nil))
			require.NoError(t, err)
			if each != nil {
				each(res)
			}
			counts[reference.Index(res.Tokens, vocab)]++
			agg.Add(res.Stats)
		}
		fit := stattest.ChiSquare(counts, want)
		if fit.P <= minP {
			t.Logf("round %d: p=%.3g (chi-square %.1f on %d df)", round, fit.P, fit.Stat, fit.DF)
		}
		return fit
	})
	return fit, agg
}

// minP is the p-value at or below which a distribution test fails (after its retest).
const minP = 1e-3

func newDecoder(t testing.TB, m model.Model, d draft.Drafter, k int) *spec.Decoder {
	t.Helper()
	dec, err := spec.New(local(t, m), d, spec.Options{K: k})
	require.NoError(t, err)
	return dec
}

// single is the result of a request of one choice, from GenerateFunc's.
func single(res []spec.Result, err error) (spec.Result, error) {
	return res[0], err
}

// chainDrafter drafts deterministically with the argmax of a chain (ignoring any
// penalty): a drafter whose q is one-hot.
func chainDrafter(c *markov.Chain) draft.Func {
	return func(h, dst []int32) int {
		// The chain only looks at the last Order tokens: slide a window over them.
		var buf [8]int32
		w := buf[:copy(buf[:], h[max(0, len(h)-c.Order()):])]
		for i := range dst {
			l := c.Logits(w)
			best := 0
			for j := range l {
				if l[j] > l[best] {
					best = j
				}
			}
			dst[i] = int32(best)
			if len(w) == c.Order() {
				w = w[:copy(w, w[1:])]
			}
			w = append(w, dst[i])
		}
		return len(dst)
	}
}

// TestSequenceDistribution draws many length-3 continuations with speculative decoding
// and checks them against the enumerated distribution of the target alone.
func TestSequenceDistribution(t *testing.T) {
	const draws = 60_000
	samplings := map[string]sampler.Params{
		"T=1":             {Temperature: 1},
		"T=0.7 top-p=0.9": {Temperature: 0.7, TopP: 0.9},
	}
	type config struct {
		name    string
		vocab   int
		order   int
		k       int
		length  int
		params  sampler.Params
		drafter string
	}
	var configs []config
	for _, order := range []int{1, 2} {
		for _, k := range []int{1, 2, 4, 7} {
			for name, p := range samplings {
				vocab := 5 + (k+order)%4 // 5 to 8
				configs = append(configs, config{fmt.Sprintf("order=%d/K=%d/%s", order, k, name), vocab, order, k, 3, p, "model"})
			}
		}
	}
	configs = append(configs,
		config{"independent draft chain", 6, 1, 3, 3, samplings["T=1"], "independent"},
		config{"deterministic drafter", 6, 2, 3, 3, samplings["T=0.7 top-p=0.9"], "func"},
		config{"deterministic drafter, T=1", 7, 1, 5, 3, samplings["T=1"], "func"},
		config{"repetition penalty", 6, 1, 4, 3, sampler.Params{Temperature: 1, RepetitionPenalty: 1.8}, "model"},
		config{"penalty window, top-k, min-p", 7, 2, 3, 3, sampler.Params{Temperature: 0.9, TopK: 4, MinP: 0.05, RepetitionPenalty: 0.6, RepetitionWindow: 2}, "model"},
		// Longer sequences over a small vocabulary, so that every draft position
		// up to K = 5 and 7 is reached and judged.
		config{"length 6, K=5", 4, 1, 5, 6, samplings["T=1"], "model"},
		config{"length 6, K=7, top-p", 4, 2, 7, 6, samplings["T=0.7 top-p=0.9"], "model"},
		config{"length 6, K=5, deterministic", 4, 1, 5, 6, samplings["T=1"], "func"},
	)
	for ci, cfg := range configs {
		t.Run(cfg.name, func(t *testing.T) {
			t.Parallel()
			tgt := newChain(t, markov.Config{Vocab: cfg.vocab, Order: cfg.order, Seed: uint64(100 + ci), Scale: 1.5})
			var d draft.Drafter
			switch cfg.drafter {
			case "model":
				d = newDrafter(t, tgt.Perturbed(1.2, uint64(ci)))
			case "independent":
				d = newDrafter(t, newChain(t, markov.Config{Vocab: cfg.vocab, Order: cfg.order, Seed: 999, Scale: 1.5}))
			case "func":
				d = chainDrafter(tgt.Perturbed(1, uint64(ci)))
			}
			dec := newDecoder(t, tgt, d, cfg.k)
			prompt := []int32{1, 2}
			want := reference.Continuations(tgt, prompt, cfg.length, cfg.params)
			fit, agg := fitDraws(t, dec, spec.Request{Prompt: prompt, MaxTokens: cfg.length, Sampling: cfg.params}, draws, cfg.vocab, want,
				func(res spec.Result) { require.Len(t, res.Tokens, cfg.length) })
			assert.Zero(t, fit.Impossible, "generated a sequence the target never would")
			assert.Greater(t, fit.P, minP, "chi-square %.1f on %d df", fit.Stat, fit.DF)
			// The test means something only if drafts were both accepted and rejected.
			rate := agg.Total.AcceptanceRate()
			assert.True(t, rate > 0.05 && rate < 0.98, "acceptance %.3f", rate)
			if cfg.length > cfg.k {
				assert.Positive(t, agg.Total.AcceptedAt[cfg.k-1], "the last draft position was judged and passed")
			}
			t.Logf("p=%.3f, %s", fit.P, agg.String())
		})
	}
}

// TestSequenceDistributionDetectsBias runs the same check on a decoder that is wrong on
// purpose (it trusts the drafter's first token), to show the check can fail.
func TestSequenceDistributionDetectsBias(t *testing.T) {
	const draws = 20_000
	tgt := newChain(t, markov.Config{Vocab: 6, Order: 1, Seed: 3, Scale: 1.5})
	params := sampler.Params{Temperature: 1, Rule: trustFirst{}}
	dec := newDecoder(t, tgt, newDrafter(t, tgt.Perturbed(1.2, 1)), 2)
	counts := make([]int, 6*6*6)
	for i := range draws {
		params.Seed = uint64(i)
		res, err := single(dec.GenerateFunc(context.Background(), spec.Request{Prompt: []int32{1}, MaxTokens: 3, Sampling: params}, nil))
		require.NoError(t, err)
		counts[reference.Index(res.Tokens, 6)]++
	}
	params.Rule = nil
	fit := stattest.ChiSquare(counts, reference.Continuations(tgt, []int32{1}, 3, params))
	assert.Less(t, fit.P, 1e-9, "chi-square %.1f", fit.Stat)
}

// trustFirst accepts the first drafted token unconditionally, then behaves exactly.
type trustFirst struct{}

func (trustFirst) Verify(s *sampler.Sampler, st sampler.Step, path []int32) ([]int32, int32, error) {
	d := st.Draft
	if d.Len() == 0 {
		return sampler.Exact{}.Verify(s, st, path)
	}
	// The rest of the chain, judged exactly after its first token.
	q := d.Dists()
	if q != nil {
		q = q[1:]
	}
	var rest sampler.Draft
	if err := rest.Set(s.VocabSize(), d.Tokens()[1:], q, batch.Tree{}); err != nil {
		return path, 0, err
	}
	start := len(path)
	hist := append(st.History, d.Tokens()[0])
	path, next, err := sampler.Exact{}.Verify(s, sampler.Step{History: hist, Draft: rest, Logits: st.Logits[1:]}, append(path, 0))
	for i := start + 1; i < len(path); i++ {
		path[i]++ // rest's token i is the draft's i+1
	}
	return path, next, err
}

// TestGreedyIdentity checks that speculative greedy decoding reproduces plain greedy
// decoding of the target exactly, for many random chains and every K from 1 to 8.
func TestGreedyIdentity(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	ctx := context.Background()
	var agg spec.Aggregate
	for chainIdx := range 300 {
		vocab := 5 + rng.IntN(60)
		order := 1 + rng.IntN(2)
		tgt := newChain(t, markov.Config{Vocab: vocab, Order: order, Seed: uint64(chainIdx), Scale: 0.5 + 2*rng.Float64()})
		drafters := map[string]draft.Drafter{
			"model": newDrafter(t, tgt.Perturbed(rng.Float64()*2, uint64(chainIdx))),
			"func":  chainDrafter(tgt.Perturbed(rng.Float64(), uint64(chainIdx)+1)),
		}
		params := sampler.Params{}
		if chainIdx%3 == 0 {
			params = sampler.Params{RepetitionPenalty: 1.3, RepetitionWindow: 16}
		}
		prompt := []int32{int32(rng.IntN(vocab)), int32(rng.IntN(vocab)), int32(rng.IntN(vocab))}
		want := reference.Greedy(tgt, prompt, 40, params)
		for name, d := range drafters {
			for k := 0; k <= 8; k++ {
				res, err := single(newDecoder(t, tgt, d, k).GenerateFunc(ctx, spec.Request{Prompt: prompt, MaxTokens: 40, Sampling: params}, nil))
				require.NoError(t, err)
				require.Equal(t, want, res.Tokens, "chain %d (vocab %d, order %d), drafter %s, K=%d", chainIdx, vocab, order, name, k)
				assert.Equal(t, spec.FinishLength, res.Finish)
				agg.Add(res.Stats)
			}
		}
	}
	// Meaningful only if drafts were often accepted and often rejected.
	rate := agg.Total.AcceptanceRate()
	assert.True(t, rate > 0.1 && rate < 0.9, "acceptance %.3f", rate)
	t.Log(agg.String())
}

// judgement is one drafted position the rule judged: the history before the drafted
// token, and whether the token was accepted.
type judgement struct {
	hist     []int32
	accepted bool
}

// recordingRule is the exact rule, recording every position it judges.
type recordingRule struct{ seen [][]judgement }

func (r *recordingRule) Verify(s *sampler.Sampler, st sampler.Step, path []int32) ([]int32, int32, error) {
	start := len(path)
	path, next, err := sampler.Exact{}.Verify(s, st, path)
	n, k := len(path)-start, st.Draft.Len()
	for i := 0; i < k && i <= n; i++ {
		for len(r.seen) <= i {
			r.seen = append(r.seen, nil)
		}
		hist := append(append([]int32(nil), st.History...), st.Draft.Tokens()[:i]...)
		r.seen[i] = append(r.seen[i], judgement{hist, i < n})
	}
	return path, next, err
}

// TestAcceptanceMatchesTheory checks, position by position, that a drafted token is
// accepted with probability Σ min(p, q) for the distributions at that point (given
// that the tokens before it were accepted): the number accepted lies within 4.5
// standard errors of the sum of those probabilities.
func TestAcceptanceMatchesTheory(t *testing.T) {
	for name, params := range map[string]sampler.Params{
		"T=1":                       {Temperature: 1},
		"T=0.7 top-p=0.9":           {Temperature: 0.7, TopP: 0.9},
		"T=1.2 top-k=5 penalty=1.2": {Temperature: 1.2, TopK: 5, RepetitionPenalty: 1.2},
	} {
		t.Run(name, func(t *testing.T) {
			tgt := newChain(t, markov.Config{Vocab: 12, Order: 1, Seed: 77})
			dm := tgt.Perturbed(1, 78)
			rule := &recordingRule{}
			params.Rule = rule
			dec := newDecoder(t, tgt, newDrafter(t, dm), 4)
			var agg spec.Aggregate
			for i := range 1500 {
				params.Seed = uint64(i)
				res, err := single(dec.GenerateFunc(context.Background(), spec.Request{Prompt: []int32{int32(i % 12)}, MaxTokens: 48, Sampling: params}, nil))
				require.NoError(t, err)
				agg.Add(res.Stats)
			}
			params.Rule = nil
			require.Len(t, rule.seen, 4)
			for pos, js := range rule.seen {
				var mean, variance float64
				accepted := 0
				for _, j := range js {
					p := reference.Process(tgt.Logits(j.hist), j.hist, params)
					q := reference.Process(dm.Logits(j.hist), j.hist, params)
					var a float64
					for x := range p {
						a += math.Min(p[x], q[x])
					}
					mean += a
					variance += a * (1 - a)
					if j.accepted {
						accepted++
					}
				}
				if pos == 0 {
					require.Equal(t, len(js), agg.Total.DraftedAt[0], "every first drafted token is judged")
				}
				require.LessOrEqual(t, len(js), agg.Total.DraftedAt[pos])
				require.Equal(t, accepted, agg.Total.AcceptedAt[pos])
				z := (float64(accepted) - mean) / math.Sqrt(variance)
				t.Logf("position %d: accepted %d/%d, theory %.1f (z = %.2f)", pos, accepted, len(js), mean, z)
				assert.Less(t, math.Abs(z), 4.5, "position %d", pos)
			}
			t.Log(agg.String())
		})
	}
}
