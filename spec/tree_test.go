package spec_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/draft"
	"github.com/specula/specula/internal/markov"
	"github.com/specula/specula/internal/reference"
	"github.com/specula/specula/model"
	"github.com/specula/specula/sampler"
	"github.com/specula/specula/spec"
)

func newTreeDrafter(t testing.TB, m model.Model, shape draft.TreeShape) *draft.SmallModel {
	t.Helper()
	d, err := draft.NewSmallModelTree(m, shape)
	require.NoError(t, err)
	return d
}

// fixedTree drafts the same deterministic tree shape every step: below the history,
// the chain's three most likely tokens, and below the first its own top two (cut to
// the first k of these five nodes).
type fixedTree struct{ c *markov.Chain }

func (f fixedTree) Start(context.Context, draft.Request) (draft.Session, error) {
	return &fixedTreeSession{c: f.c}, nil
}

type fixedTreeSession struct {
	c       *markov.Chain
	toks    [5]int32
	parents [5]int32
}

func topTokens(l []float32, n int) []int32 {
	var top []int32
	for len(top) < n {
		best := -1
		for i := range l {
			taken := false
			for _, t := range top {
				taken = taken || int(t) == i
			}
			if !taken && (best < 0 || l[i] > l[best]) {
				best = i
			}
		}
		top = append(top, int32(best))
	}
	return top
}

func (s *fixedTreeSession) Propose(_ context.Context, h []int32, k int, p *draft.Proposal) error {
	root := topTokens(s.c.Logits(h), 3)
	below := topTokens(s.c.Logits(append(h[len(h)-1:len(h):len(h)], root[0])), 2)
	s.toks = [5]int32{root[0], root[1], root[2], below[0], below[1]}
	s.parents = [5]int32{-1, -1, -1, 0, 0}
	n := min(k, 5) // any prefix of the node list is a tree
	p.Tokens, p.Parents, p.Dists = s.toks[:n], s.parents[:n], nil
	return nil
}

func (s *fixedTreeSession) Close() error { return nil }

// TestTreeSequenceDistribution: tree drafts — sampled siblings, and deterministic
// ones under sampling — leave the distribution of generated sequences exactly the
// target's.
func TestTreeSequenceDistribution(t *testing.T) {
	const draws = 50_000
	cases := []struct {
		name   string
		vocab  int
		k      int
		params sampler.Params
		make   func(tgt *markov.Chain) draft.Drafter
	}{
		{"width 2 depth 2", 6, 6, sampler.Params{Temperature: 1}, func(tgt *markov.Chain) draft.Drafter {
			return newTreeDrafter(t, tgt.Perturbed(1, 3), draft.TreeShape{Width: 2, Depth: 2, MaxNodes: 6})
		}},
		{"width 3 depth 3 top-p", 5, 8, sampler.Params{Temperature: 0.8, TopP: 0.9}, func(tgt *markov.Chain) draft.Drafter {
			return newTreeDrafter(t, tgt.Perturbed(1, 4), draft.TreeShape{Width: 3, Depth: 3, MaxNodes: 8})
		}},
		{"width 2 depth 4 penalty", 5, 10, sampler.Params{Temperature: 1, RepetitionPenalty: 1.5}, func(tgt *markov.Chain) draft.Drafter {
			return newTreeDrafter(t, tgt.Perturbed(0.8, 5), draft.TreeShape{Width: 2, Depth: 4, MaxNodes: 10})
		}},
		{"deterministic tree", 6, 5, sampler.Params{Temperature: 1}, func(tgt *markov.Chain) draft.Drafter {
			return fixedTree{tgt.Perturbed(0.7, 6)}
		}},
	}
	for ci, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tgt := newChain(t, markov.Config{Vocab: c.vocab, Order: 1, Seed: uint64(300 + ci), Scale: 1.5})
			dec := newDecoder(t, tgt, c.make(tgt), c.k)
			prompt := []int32{1}
			want := reference.Continuations(tgt, prompt, 3, c.params)
			fit, agg := fitDraws(t, dec, spec.Request{Prompt: prompt, MaxTokens: 3, Sampling: c.params}, draws, c.vocab, want, nil)
			assert.Zero(t, fit.Impossible)
			assert.Greater(t, fit.P, minP, "chi-square %.1f on %d df", fit.Stat, fit.DF)
			assert.Greater(t, agg.Total.DraftNodes, agg.Total.Drafted, "the drafts were trees")
			t.Logf("p=%.3f, %s, %.2f nodes per position", fit.P, agg.String(), float64(agg.Total.DraftNodes)/float64(agg.Total.Drafted))
		})
	}
}

// TestTreeGreedyIdentity: greedy speculative decoding with top-k tree drafts equals
// plain greedy decoding.
func TestTreeGreedyIdentity(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	var agg spec.Aggregate
	for i := range 80 {
		vocab := 5 + rng.IntN(40)
		tgt := newChain(t, markov.Config{Vocab: vocab, Order: 1 + rng.IntN(2), Seed: uint64(i), Scale: 1 + rng.Float64()})
		prompt := []int32{int32(rng.IntN(vocab)), int32(rng.IntN(vocab))}
		want := reference.Greedy(tgt, prompt, 40, sampler.Params{})
		shape := draft.TreeShape{Width: 1 + rng.IntN(3), Depth: 1 + rng.IntN(4), MaxNodes: 2 + rng.IntN(12)}
		d := newTreeDrafter(t, tgt.Perturbed(rng.Float64()*1.5, uint64(i)), shape)
		for _, k := range []int{1, 4, 16} {
			res, err := single(newDecoder(t, tgt, d, k).GenerateFunc(context.Background(), spec.Request{Prompt: prompt, MaxTokens: 40}, nil))
			require.NoError(t, err)
			require.Equal(t, want, res.Tokens, fmt.Sprintf("chain %d, tree %+v, K=%d", i, shape, k))
			agg.Add(res.Stats)
		}
	}
	rate := agg.Total.AcceptanceRate()
	assert.True(t, rate > 0.2 && rate < 0.95, "acceptance %.3f", rate)
	t.Log(agg.String())
}

func TestTreeZeroAllocationsPerToken(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates for channel and lock operations")
	}
	tgt := newChain(t, markov.Config{Vocab: 256, Order: 1, Seed: 1, ContextLength: 1024})
	for _, p := range []sampler.Params{{}, {Temperature: 0.9, TopP: 0.95}} {
		dec := newDecoder(t, tgt, newTreeDrafter(t, tgt.Perturbed(0.6, 1), draft.TreeShape{Width: 2, Depth: 3, MaxNodes: 8}), 8)
		emit := func(spec.Chunk) error { return nil }
		allocs := func(n int) float64 {
			return testing.AllocsPerRun(10, func() {
				if _, err := dec.GenerateFunc(context.Background(), spec.Request{Prompt: []int32{1, 2}, MaxTokens: n, Sampling: p}, emit); err != nil {
					t.Fatal(err)
				}
			})
		}
		assert.Equal(t, allocs(60), allocs(600), "params %+v", p)
	}
}

func TestBadTreeProposals(t *testing.T) {
	tgt := newChain(t, markov.Config{Vocab: 8, Order: 1})
	for _, c := range []struct {
		p    draft.Proposal
		want string
	}{
		{draft.Proposal{Tokens: []int32{1, 2}, Parents: []int32{-1}}, "a tree of 1 nodes for 2 tokens"},
		{draft.Proposal{Tokens: []int32{1, 2}, Parents: []int32{-1, 1}}, "parent 1 of node 1 must be -1 or an earlier node"},
		{draft.Proposal{Tokens: []int32{1, 2}, Parents: []int32{-2, 0}}, "parent -2 of node 0"},
	} {
		_, err := single(newDecoder(t, tgt, sessionDrafter{c.p}, 4).GenerateFunc(context.Background(), spec.Request{Prompt: []int32{1}, MaxTokens: 5}, nil))
		assert.ErrorContains(t, err, c.want)
	}
}
