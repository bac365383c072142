package sampler_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/batch"
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
	tree, err := batch.NewTree(parents)
	require.NoError(t, err)
	qc := cdf(c.q)
	rng := rand.New(rand.NewPCG(seed, 7))
	counts := make([]int, oneStepVocab)
	var d sampler.Draft
	var path []int32
	for range n {
		for _, i := range sampledNodes {
			nodes[i] = draw(rng, qc)
		}
		require.NoError(t, d.Set(oneStepVocab, nodes, q, tree))
		var next int32
		path, next, err = s.Verify(sampler.Step{History: []int32{0}, Draft: d, Logits: rows}, path[:0])
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
type unnormalised struct{}

func (unnormalised) Verify(s *sampler.Sampler, st sampler.Step, path []int32) ([]int32, int32, error) {
	p := s.Scratch()
	if err := s.Process(st.Logits[0], st.History, p); err != nil {
		return path, 0, err
	}
	for c, x := range st.Draft.Tokens() {
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
	// Root's argmax is 2; below node "2" (index 1) the argmax is 0, which is node 3.
	rows := [][]float32{
		{0, 1, 5, 0}, // root
		{9, 0, 0, 0}, // after node 0 (token 1)
		{5, 0, 0, 1}, // after node 1 (token 2)
		{0, 0, 0, 0}, // after node 2
		{0, 0, 0, 7}, // after node 3 (token 0 below 2)
	}
	st := step(t, 4, []int32{3}, []int32{1, 2, 3, 0}, nil, []int32{-1, -1, 1, 1}, rows)
	for _, p := range []sampler.Params{{}, {Temperature: 2, Rule: sampler.Greedy{}}} {
		// Exact with greedy parameters is Greedy.
		s, err := sampler.New(p, 4)
		require.NoError(t, err)
		path, next, err := s.Verify(st, nil)
		require.NoError(t, err)
		assert.Equal(t, []int32{1, 3}, path, "%+v", p)
		assert.Equal(t, int32(3), next, "%+v", p)
	}
}

// chainRule is the rejection-sampling rule for chains as Leviathan et al. and Chen et
// al. state it, position by position: the rule that the tree rule, restricted to
// chains, must be.
type chainRule struct{}

func (chainRule) Verify(s *sampler.Sampler, st sampler.Step, path []int32) ([]int32, int32, error) {
	hist, p := st.History, s.Scratch()
	for i, x := range st.Draft.Tokens() {
		if err := s.Process(st.Logits[i], hist, p); err != nil {
			return path, 0, err
		}
		q, qx := st.Draft.Row(i), float32(1)
		if q != nil {
			qx = 0
			if int(x) < len(q) {
				qx = q[x]
			}
		}
		if p[x] >= qx || s.Float64()*float64(qx) < float64(p[x]) {
			path, hist = append(path, int32(i)), append(hist, x)
			continue
		}
		if q == nil {
			p[x] = 0 // the residual of a one-hot q: p without x
			return path, s.Sample(p), nil
		}
		return path, s.SampleResidual(p, q), nil
	}
	if err := s.Process(st.Logits[st.Draft.Len()], hist, p); err != nil {
		return path, 0, err
	}
	return path, s.Sample(p), nil
}

// TestTreeRuleOnChainsIsTheChainRule: a chain is the tree with one child per token, and
// on it the one rule judges exactly as the chain rule does, seed by seed, whether the
// chain comes as the zero Tree or as its parent list written out.
func TestTreeRuleOnChainsIsTheChainRule(t *testing.T) {
	const vocab, seeds = 8, 3000
	rng := rand.New(rand.NewPCG(17, 18))
	params := []sampler.Params{
		{Temperature: 1},
		{Temperature: 0.7, TopP: 0.9},
		{Temperature: 1.3, TopK: 4, RepetitionPenalty: 1.4},
		{}, // greedy
	}
	for ci, pattern := range []string{"S", "F", "SS", "SF", "FSS", "SSSS", "FSFSF"} {
		p := params[ci%len(params)]
		k := len(pattern)
		// The drafter's logits are the target's, perturbed: drafts are often
		// accepted, and often rejected, at every position.
		logits := make([][]float32, k+1)
		for i := range logits {
			logits[i] = make([]float32, vocab)
			for x := range logits[i] {
				logits[i][x] = float32(rng.NormFloat64() * 1.5)
			}
		}
		history := []int32{3, 1}
		dp := p // the drafter processes its logits as the request asks (sampling, when greedy)
		dp.Seed = uint64(ci)
		if p.Greedy() {
			dp.Temperature = 1
		}
		draftSampler, err := sampler.New(dp, vocab)
		require.NoError(t, err)
		tokens, q := make([]int32, k), make([][]float32, k)
		parents := make([]int32, k)
		target := make([]float32, vocab)
		for i := range k {
			parents[i] = int32(i - 1)
			h := append(append([]int32(nil), history...), tokens[:i]...)
			require.NoError(t, draftSampler.Process(logits[i], h, target))
			if pattern[i] == 'F' {
				tokens[i] = draftSampler.Sample(target) // a fixed token the target may emit
				continue
			}
			near := make([]float32, vocab)
			for x := range near {
				near[x] = logits[i][x] + float32(rng.NormFloat64()*0.7)
			}
			q[i] = make([]float32, vocab)
			require.NoError(t, draftSampler.Process(near, h, q[i]))
			for tokens[i] = draftSampler.Sample(q[i]); target[tokens[i]] == 0; {
				tokens[i] = draftSampler.Sample(q[i]) // one the target may emit
			}
		}
		chain := step(t, vocab, history, tokens, q, nil, logits)
		explicit := step(t, vocab, history, tokens, q, parents, logits)
		var some, short int // verdicts that accepted something, and that stopped short
		for seed := range seeds {
			judge := func(rule sampler.Rule, st sampler.Step) verdict {
				rp := p
				rp.Seed, rp.Rule = uint64(seed), rule
				s, err := sampler.New(rp, vocab)
				require.NoError(t, err)
				path, next, err := s.Verify(st, nil)
				require.NoError(t, err)
				for i, c := range path {
					require.Equal(t, int32(i), c, "a chain's path is a prefix")
				}
				return verdict{len(path), next}
			}
			want := judge(chainRule{}, chain)
			if p.Greedy() {
				want = judge(sampler.Greedy{}, chain)
			}
			require.Equal(t, want, judge(nil, chain), "%s, %+v, seed %d: the zero Tree", pattern, p, seed)
			require.Equal(t, want, judge(nil, explicit), "%s, %+v, seed %d: the parent list", pattern, p, seed)
			if want.accepted > 0 {
				some++
			}
			if want.accepted < k {
				short++
			}
		}
		if !p.Greedy() {
			assert.True(t, some > 0 && short > 0, "%s: drafts both accepted (%d) and rejected (%d)", pattern, some, short)
		}
	}
}
