package sampler_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/batch"
	"github.com/specula/specula/internal/stattest"
	"github.com/specula/specula/sampler"
)

const (
	oneStepVocab = 16
	oneStepDraws = 200_000
	minPValue    = 1e-3
)

// pair is one (p, q) case for a single verification step. A nil q means a
// deterministic drafter that always proposes token x.
type pair struct {
	name string
	p, q []float64
	x    int32
}

func normalize(w []float64) []float64 {
	var s float64
	for _, v := range w {
		s += v
	}
	for i := range w {
		w[i] /= s
	}
	return w
}

func randomDist(rng *rand.Rand, sharp float64) []float64 {
	w := make([]float64, oneStepVocab)
	for i := range w {
		w[i] = math.Exp(rng.NormFloat64() * sharp)
	}
	return normalize(w)
}

// masked zeroes the entries of d not selected by keep, then renormalises.
func masked(d []float64, keep func(i int) bool) []float64 {
	out := make([]float64, len(d))
	for i := range d {
		if keep(i) {
			out[i] = d[i]
		}
	}
	return normalize(out)
}

func oneStepPairs() []pair {
	rng := rand.New(rand.NewPCG(42, 7))
	var ps []pair
	for i := range 4 {
		ps = append(ps, pair{name: "random", p: randomDist(rng, 1+float64(i)), q: randomDist(rng, 1+float64(i))})
	}
	p := randomDist(rng, 2)
	ps = append(ps, pair{name: "p equals q", p: p, q: append([]float64(nil), p...)})
	mode := int32(0)
	for i := range p {
		if p[i] > p[mode] {
			mode = int32(i)
		}
	}
	ps = append(ps,
		pair{name: "q one-hot on p's mode", p: p, x: mode},
		pair{name: "q one-hot on a minor token", p: p, x: (mode + 3) % oneStepVocab},
	)
	even := masked(randomDist(rng, 1), func(i int) bool { return i%2 == 0 })
	ps = append(ps,
		pair{name: "p zero where q is not", p: even, q: randomDist(rng, 1)},
		pair{name: "q zero where p is not", p: randomDist(rng, 1), q: masked(randomDist(rng, 1), func(i int) bool { return i < 5 })},
		pair{name: "disjoint supports", p: even, q: masked(randomDist(rng, 1), func(i int) bool { return i%2 == 1 })},
		pair{name: "q one-hot where p is zero", p: even, x: 1},
	)
	near := make([]float64, oneStepVocab)
	for i := range near {
		near[i] = 1e-5
	}
	near[3] = 1
	nearQ := make([]float64, oneStepVocab)
	for i := range nearQ {
		nearQ[i] = 1e-4
	}
	nearQ[9] = 1
	ps = append(ps,
		pair{name: "near-degenerate p and q", p: normalize(near), q: normalize(nearQ)},
		pair{name: "near-degenerate p, broad q", p: normalize(append([]float64(nil), near...)), q: randomDist(rng, 0.5)},
		pair{name: "broad p, near-degenerate q", p: randomDist(rng, 0.5), q: normalize(append([]float64(nil), nearQ...))},
	)
	return ps
}

// runOneStep draws the first emitted token of a one-token draft n times with the given
// rule and returns the counts of each token and how many drafts were accepted.
func runOneStep(t *testing.T, c pair, rule sampler.Rule, n int, seed uint64) (counts []int, accepted int) {
	t.Helper()
	s, err := sampler.New(sampler.Params{Temperature: 1, Seed: seed, Rule: rule}, oneStepVocab)
	require.NoError(t, err)
	logits := make([]float32, oneStepVocab)
	for i, v := range c.p {
		logits[i] = float32(math.Log(v)) // log 0 = -Inf: masked
	}
	var q [][]float32
	var cdf []float64
	if c.q != nil {
		row := make([]float32, oneStepVocab)
		cdf = make([]float64, oneStepVocab)
		var cum float64
		for i, v := range c.q {
			row[i] = float32(v)
			cum += float64(row[i])
			cdf[i] = cum
		}
		q = [][]float32{row}
	}
	draftRNG := rand.New(rand.NewPCG(seed, 99))
	hist, tok := []int32{0}, []int32{0}
	rows := [][]float32{logits, logits}
	var d sampler.Draft
	var path []int32
	counts = make([]int, oneStepVocab)
	for range n {
		x := c.x
		if c.q != nil {
			u := draftRNG.Float64() * cdf[len(cdf)-1]
			x = 0
			for cdf[x] <= u {
				x++
			}
		}
		tok[0] = x
		require.NoError(t, d.Set(oneStepVocab, tok, q, batch.Tree{}))
		var next int32
		path, next, err = s.Verify(sampler.Step{History: hist, Draft: d, Logits: rows}, path[:0])
		require.NoError(t, err)
		if len(path) == 1 {
			accepted++
			counts[x]++
		} else {
			counts[next]++
		}
	}
	return counts, accepted
}

func overlap(c pair) float64 {
	if c.q == nil {
		return c.p[c.x]
	}
	var a float64
	for i := range c.p {
		a += math.Min(c.p[i], c.q[i])
	}
	return a
}

// TestExactOneStep shows that the first token emitted after a one-token draft is
// distributed as p, whatever q is, and that the acceptance rate is Σ min(p, q).
func TestExactOneStep(t *testing.T) {
	for i, c := range oneStepPairs() {
		t.Run(c.name, func(t *testing.T) {
			counts, accepted := runOneStep(t, c, nil, oneStepDraws, uint64(i))
			fit := stattest.ChiSquare(counts, c.p)
			assert.Zero(t, fit.Impossible, "emitted a token with p = 0")
			assert.Greater(t, fit.P, minPValue, "chi-square %.1f on %d df", fit.Stat, fit.DF)
			// Acceptance is Bernoulli(Σ min(p, q)) per draw; allow 4.5 standard errors.
			z := stattest.BinomialZ(accepted, oneStepDraws, overlap(c))
			assert.Less(t, math.Abs(z), 4.5, "acceptance %d/%d vs theory %.4f", accepted, oneStepDraws, overlap(c))
		})
	}
}

// residualFromP is a wrong rule: on rejection it draws from p instead of the residual.
type residualFromP struct{}

func (residualFromP) Verify(s *sampler.Sampler, st sampler.Step, path []int32) ([]int32, int32, error) {
	p := s.Scratch()
	if err := s.Process(st.Logits[0], st.History, p); err != nil {
		return path, 0, err
	}
	x := st.Draft.Tokens()[0]
	qx := st.Draft.Row(0)[x]
	if s.Float64()*float64(qx) < float64(p[x]) {
		return append(path, 0), 0, nil
	}
	return path, s.Sample(p), nil
}

// alwaysAccept is a wrong rule that trusts the drafter.
type alwaysAccept struct{}

func (alwaysAccept) Verify(_ *sampler.Sampler, _ sampler.Step, path []int32) ([]int32, int32, error) {
	return append(path, 0), 0, nil
}

// TestExactOneStepDetectsWrongRules shows that the test above can fail: the same
// harness, given a subtly wrong rule, rejects it decisively.
func TestExactOneStepDetectsWrongRules(t *testing.T) {
	c := oneStepPairs()[0]
	for _, rule := range []sampler.Rule{residualFromP{}, alwaysAccept{}} {
		counts, _ := runOneStep(t, c, rule, oneStepDraws, 1)
		fit := stattest.ChiSquare(counts, c.p)
		assert.Less(t, fit.P, 1e-9, "%T should be caught (chi-square %.1f)", rule, fit.Stat)
	}
}
