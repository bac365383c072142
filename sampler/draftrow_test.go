package sampler_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/batch"
	"github.com/specula/specula/internal/stattest"
	"github.com/specula/specula/sampler"
)

// verdict is what a rule decided about one draft: how many tokens (or which tree
// path) it kept, and the token after them.
type verdict struct {
	accepted int
	next     int32
}

// step is the verification of tokens drawn from the rows q and shaped by parents (nil:
// a chain), after history, against the given rows of target logits.
func step(t *testing.T, vocab int, history, tokens []int32, q [][]float32, parents []int32, logits [][]float32) sampler.Step {
	t.Helper()
	tree, err := batch.NewTree(parents)
	require.NoError(t, err)
	var d sampler.Draft
	require.NoError(t, d.Set(vocab, tokens, q, tree))
	return sampler.Step{History: history, Draft: d, Logits: logits}
}

// judge verifies the same step under seeds 0 to n-1; a verdict counts the tokens of
// the accepted path.
func judge(t *testing.T, st sampler.Step, vocab, n int) []verdict {
	t.Helper()
	out := make([]verdict, n)
	for seed := range n {
		s, err := sampler.New(sampler.Params{Temperature: 1, Seed: uint64(seed)}, vocab)
		require.NoError(t, err)
		path, next, err := s.Verify(st, nil)
		require.NoError(t, err)
		out[seed] = verdict{len(path), next}
	}
	return out
}

func countAccepted(vs []verdict) int {
	n := 0
	for _, v := range vs {
		n += v.accepted
	}
	return n
}

// TestNilRowIsOneHot: a nil Q, a nil row and an explicit one-hot row are one q, so a
// chain or a one-node tree holding any of them must be judged identically, seed by
// seed, and keep the token with probability p(token), here about 4.5e-5 — not every
// time, whatever the target thinks of it, as a nil row read as "no q" would.
func TestNilRowIsOneHot(t *testing.T) {
	const draws = 10_000
	logits := [][]float32{{0, -10}, {0, -10}}
	p1 := 1 / (1 + math.Exp(10)) // the target's p(1)
	forms := []struct {
		name string
		q    [][]float32
	}{
		{"nil Q", nil},
		{"nil row", [][]float32{nil}},
		{"one-hot row", [][]float32{{0, 1}}},
	}
	chain := func(q [][]float32) sampler.Step {
		return step(t, 2, []int32{0}, []int32{1}, q, nil, logits)
	}
	reference := forms[len(forms)-1] // the explicit one-hot row
	want := judge(t, chain(reference.q), 2, draws)
	for _, f := range forms {
		t.Run("chain/"+f.name, func(t *testing.T) {
			got := judge(t, chain(f.q), 2, draws)
			accepted := countAccepted(got)
			assert.Less(t, stattest.BinomialZ(accepted, draws, p1), 4.5, "token 1 kept %d times of %d, p = %.2g", accepted, draws, p1)
			if f.name != reference.name {
				assert.Equal(t, want, got, "judged differently from an explicit one-hot row")
			}
		})
		t.Run("tree/"+f.name, func(t *testing.T) {
			got := judge(t, step(t, 2, []int32{0}, []int32{1}, f.q, []int32{-1}, logits), 2, draws)
			assert.Equal(t, want, got, "the tree rule judged a one-node tree differently from the chain rule")
		})
	}
}

// TestShortRowReadsAsZero: a q row shorter than the vocabulary (a draft model whose
// vocabulary is the target's, padded) is the same q as the row padded with zeros.
func TestShortRowReadsAsZero(t *testing.T) {
	const draws = 2000
	logits := [][]float32{{0.3, 1, -0.5, 0.8}, {1, 0, 0, 0.2}, {0, 0.5, 1, 0}}
	short := []float32{0.2, 0.7, 0.1}
	padded := []float32{0.2, 0.7, 0.1, 0}
	for _, x := range []int32{0, 1, 2} {
		for _, second := range [][]float32{nil, short} {
			chain := func(q0 []float32) sampler.Step {
				return step(t, 4, []int32{3}, []int32{x, 1}, [][]float32{q0, second}, nil, logits)
			}
			assert.Equal(t, judge(t, chain(padded), 4, draws), judge(t, chain(short), 4, draws), "chain, token %d", x)
			tree := func(q0 []float32) sampler.Step {
				return step(t, 4, []int32{3}, []int32{x, 1}, [][]float32{q0, second}, []int32{-1, 0}, logits)
			}
			assert.Equal(t, judge(t, tree(padded), 4, draws), judge(t, tree(short), 4, draws), "tree, token %d", x)
		}
	}
}

// TestDraftRejectsImpossibleRows: a q row that is not a distribution the drafted
// token could have been drawn from would bias the output (a q(x) of 0 keeps x always),
// so a draft holding one, chain or tree, is refused when it is set, naming the
// position.
func TestDraftRejectsImpossibleRows(t *testing.T) {
	nan := float32(math.NaN())
	tests := []struct {
		name string
		row  []float32
		want string
	}{
		{"q = 0 at the token", []float32{0.5, 0, 0.5}, "q = 0"},
		{"row ends before the token", []float32{1}, "q = 0"},
		{"empty row", []float32{}, "q = 0"},
		{"longer than the vocabulary", []float32{0.25, 0.25, 0.25, 0.25}, "4 values for a vocabulary of 3"},
		{"negative entry", []float32{-0.5, 1, 0.5}, "holds -0.5 at token 0"},
		{"NaN entry", []float32{nan, 1, 0}, "holds NaN"},
		{"infinite entry", []float32{0, 1, float32(math.Inf(1))}, "sums to +Inf"},
		{"not normalised", []float32{0.2, 0.2, 0.2}, "sums to 0.6"},
	}
	chain, err := batch.NewTree(nil)
	require.NoError(t, err)
	tree, err := batch.NewTree([]int32{-1, 0, -1})
	require.NoError(t, err)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var d sampler.Draft
			// The bad row comes second, after a good one and a nil one.
			err := d.Set(3, []int32{1, 1, 1}, [][]float32{{0, 1, 0}, tt.row, nil}, chain)
			assert.ErrorContains(t, err, "draft position 1: ")
			assert.ErrorContains(t, err, tt.want)
			assert.Zero(t, d.Len(), "a refused draft is empty")
			err = d.Set(3, []int32{1, 1, 2}, [][]float32{nil, tt.row, {0, 0, 1}}, tree)
			assert.ErrorContains(t, err, "draft position 1: ")
			assert.ErrorContains(t, err, tt.want)
		})
	}
}

// TestSplitStreams: the streams split from a request's parameters draw numbers
// unrelated to the request's own and to each other, reproducibly, and keep every
// processing parameter.
func TestSplitStreams(t *testing.T) {
	root := sampler.Params{Temperature: 0.7, TopK: 5, TopP: 0.9, MinP: 0.01, RepetitionPenalty: 1.1, RepetitionWindow: 8, Seed: 0}
	draws := func(p sampler.Params) [4]float64 {
		s, err := sampler.New(p, 10)
		require.NoError(t, err)
		var u [4]float64
		for i := range u {
			u[i] = s.Float64()
		}
		return u
	}
	reset := root.Split(0)
	reset.Seed = root.Seed                                                                     // a drafter that puts the request's seed back
	copied := sampler.Params{Temperature: root.Split(1).Temperature, Seed: root.Split(1).Seed} // field by field
	streams := map[string]sampler.Params{
		"request":                root,
		"split 0":                root.Split(0),
		"split 1":                root.Split(1),
		"split 2":                root.Split(2),
		"split 0 of split 0":     root.Split(0).Split(0),
		"split 1 of split 0":     root.Split(0).Split(1),
		"split 0 of split 1":     root.Split(1).Split(0),
		"split 0, seed reset":    reset,
		"split 1, fields copied": copied,
	}
	seen := map[[4]float64]string{}
	for name, p := range streams {
		u := draws(p)
		assert.Equal(t, u, draws(p), "%s: not reproducible", name)
		if other, ok := seen[u]; ok {
			t.Errorf("%s draws the same numbers as %s", name, other)
		}
		seen[u] = name
		if name != "split 1, fields copied" {
			assert.Equal(t, processing(root), processing(p), "%s: processing changed", name)
		}
	}
	assert.NotEqual(t, root.Seed, root.Split(0).Seed, "a split has a seed of its own")
}

// processing is what a Params says about turning logits into a distribution.
func processing(p sampler.Params) [6]float64 {
	return [6]float64{p.Temperature, float64(p.TopK), p.TopP, p.MinP, p.RepetitionPenalty, float64(p.RepetitionWindow)}
}
