package sampler_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/internal/stattest"
	"github.com/specula/specula/sampler"
)

// siblingCase is a one-level tree: candidates for the first token, each drawn from q
// (independently) or chosen deterministically.
type siblingCase struct {
	name       string
	p, q       []float64
	sampled    int     // candidates drawn from q
	fixed      []int32 // deterministic candidates, tried after the sampled ones
	fixedFirst bool    // try the deterministic candidates first instead
}

func cdf(d []float64) []float64 {
	out := make([]float64, len(d))
	var c float64
	for i, v := range d {
		c += v
		out[i] = c
	}
	return out
}

func draw(rng *rand.Rand, c []float64) int32 {
	u := rng.Float64() * c[len(c)-1]
	i := 0
	for c[i] <= u {
		i++
	}
	return int32(i)
}

// runSiblings returns the counts of the first emitted token over n draws.
func runSiblings(t *testing.T, c siblingCase, rule sampler.Rule, n int, seed uint64) []int {
	t.Helper()
	s, err := sampler.New(sampler.Params{Temperature: 1, Seed: seed, Rule: rule}, oneStepVocab)
	require.NoError(t, err)
	logits := make([]float32, oneStepVocab)
	for i, v := range c.p {
		logits[i] = float32(math.Log(v))
	}
	qrow := make([]float32, oneStepVocab)
	for i, v := range c.q {
		qrow[i] = float32(v)
	}
	m := c.sampled + len(c.fixed)
	nodes := make([]int32, m)
	parents := make([]int32, m)
	q := make([][]float32, m)
	rows := make([][]float32, m+1)
	for i := range rows {
		rows[i] = logits
	}
	sampledAt := 0 // the first sampled candidate
	if c.fixedFirst {
		sampledAt = len(c.fixed)
	}
	var sampledNodes []int
	fixed := c.fixed
	for i := range m {
		parents[i] = -1
		if i >= sampledAt && i < sampledAt+c.sampled {
			q[i] = qrow
			sampledNodes = append(sampledNodes, i)
		} else {
			nodes[i], fixed = fixed[0], fixed[1:]
		}
	}
	qc := cdf(c.q)
	rng := rand.New(rand.NewPCG(seed, 7))
	counts := make([]int, oneStepVocab)
	var path []int32
	for range n {
		for _, i := range sampledNodes {
			nodes[i] = draw(rng, qc)
		}
		var next int32
		path, next, err = s.VerifyTree(sampler.TreeStep{Tokens: []int32{0}, Nodes: nodes, Parents: parents, Q: q, Logits: rows}, path[:0])
		require.NoError(t, err)
		if len(path) > 0 {
			counts[nodes[path[0]]]++
		} else {
			counts[next]++
		}
	}
	return counts
}

// TestExactTreeOneStep: whatever the siblings — several independent draws from q,
// deterministic candidates (also ones the target would never emit), or both — the first
// emitted token is distributed as p.
func TestExactTreeOneStep(t *testing.T) {
	pairs := oneStepPairs()
	var cases []siblingCase
	for i, pr := range pairs {
		if pr.q == nil {
			continue
		}
		cases = append(cases, siblingCase{name: pr.name + "/2 sampled", p: pr.p, q: pr.q, sampled: 2})
		if i%2 == 0 {
			cases = append(cases, siblingCase{name: pr.name + "/4 sampled", p: pr.p, q: pr.q, sampled: 4})
		}
	}
	p := pairs[0].p
	cases = append(cases,
		siblingCase{name: "3 fixed", p: p, q: pairs[0].q, fixed: []int32{3, 7, 11}},
		siblingCase{name: "fixed duplicates", p: p, q: pairs[0].q, fixed: []int32{3, 3, 5}},
		siblingCase{name: "fixed where p is zero", p: pairs[7].p, q: pairs[7].q, fixed: []int32{1, 3, 2}},
		siblingCase{name: "2 sampled then 2 fixed", p: p, q: pairs[1].q, sampled: 2, fixed: []int32{0, 9}},
		siblingCase{name: "1 fixed then 2 sampled", p: p, q: pairs[1].q, sampled: 2, fixed: []int32{9}, fixedFirst: true},
		siblingCase{name: "fixed mode then 3 sampled", p: pairs[5].p, q: pairs[2].q, sampled: 3, fixed: []int32{pairs[5].x}, fixedFirst: true},
	)
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			counts := runSiblings(t, c, nil, oneStepDraws, uint64(100+i))
			fit := stattest.ChiSquare(counts, c.p)
			assert.Zero(t, fit.Impossible)
			assert.Greater(t, fit.P, minPValue, "chi-square %.1f on %d df", fit.Stat, fit.DF)
		})
	}
}

// unnormalised is a wrong tree rule: after rejecting a deterministic candidate it
// forgets to renormalise what is left of p.
type unnormalised struct{ sampler.Exact }

func (unnormalised) VerifyTree(s *sampler.Sampler, st sampler.TreeStep, path []int32) ([]int32, int32, error) {
	p := s.Scratch()
	if err := s.Process(st.Logits[0], st.Tokens, p); err != nil {
		return path, 0, err
	}
	for c, x := range st.Nodes {
		if s.Float64() < float64(p[x]) {
			return append(path, int32(c)), 0, nil
		}
		p[x] = 0
	}
	return path, s.Sample(p), nil
}

func TestExactTreeDetectsWrongRule(t *testing.T) {
	// The three most likely tokens as candidates: rejecting the first leaves much of
	// p unnormalised.
	p := oneStepPairs()[0].p
	var top []int32
	for len(top) < 3 {
		best := int32(-1)
		for i := range p {
			if !slices.Contains(top, int32(i)) && (best < 0 || p[i] > p[best]) {
				best = int32(i)
			}
		}
		top = append(top, best)
	}
	c := siblingCase{p: p, q: oneStepPairs()[0].q, fixed: top}
	counts := runSiblings(t, c, unnormalised{}, oneStepDraws, 1)
	fit := stattest.ChiSquare(counts, c.p)
	assert.Less(t, fit.P, 1e-9, "chi-square %.1f", fit.Stat)
}

func TestGreedyTree(t *testing.T) {
	s, err := sampler.New(sampler.Params{}, 4)
	require.NoError(t, err)
	// Root's argmax is 2; below node "2" (index 1) the argmax is 0, which is node 3.
	rows := [][]float32{
		{0, 1, 5, 0}, // root
		{9, 0, 0, 0}, // after node 0 (token 1)
		{5, 0, 0, 1}, // after node 1 (token 2)
		{0, 0, 0, 0}, // after node 2
		{0, 0, 0, 7}, // after node 3 (token 0 below 2)
	}
	st := sampler.TreeStep{Tokens: []int32{3}, Nodes: []int32{1, 2, 3, 0}, Parents: []int32{-1, -1, 1, 1}, Logits: rows}
	path, next, err := s.VerifyTree(st, nil)
	require.NoError(t, err)
	assert.Equal(t, []int32{1, 3}, path)
	assert.Equal(t, int32(3), next)
	// Exact with greedy parameters does the same.
	path, next, err = s.VerifyTree(st, nil)
	require.NoError(t, err)
	assert.Equal(t, []int32{1, 3}, path)
	assert.Equal(t, int32(3), next)
}

func TestVerifyTreeRejectsMalformed(t *testing.T) {
	s, err := sampler.New(sampler.Params{Temperature: 1}, 4)
	require.NoError(t, err)
	row := []float32{0, 0, 0, 0}
	for _, st := range []sampler.TreeStep{
		{Nodes: []int32{1}, Parents: []int32{}, Logits: [][]float32{row, row}},
		{Nodes: []int32{1}, Parents: []int32{0}, Logits: [][]float32{row, row}},
		{Nodes: []int32{9}, Parents: []int32{-1}, Logits: [][]float32{row, row}},
		{Nodes: []int32{1, 2}, Parents: []int32{-1, 0}, Logits: [][]float32{row, row}},
	} {
		_, _, err := s.VerifyTree(st, nil)
		assert.Error(t, err)
	}
	chainOnly, err := sampler.New(sampler.Params{Temperature: 1, Rule: residualFromP{}}, 4)
	require.NoError(t, err)
	_, _, err = chainOnly.VerifyTree(sampler.TreeStep{Logits: [][]float32{row}}, nil)
	assert.ErrorContains(t, err, "cannot verify tree drafts")
}
