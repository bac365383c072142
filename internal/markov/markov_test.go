package markov_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/batch"
	"github.com/specula/specula/internal/markov"
	"github.com/specula/specula/model"
)

func newChain(t *testing.T, cfg markov.Config) *markov.Chain {
	t.Helper()
	c, err := markov.New(cfg)
	require.NoError(t, err)
	return c
}

func TestNewRejectsBadConfig(t *testing.T) {
	tests := []struct {
		cfg  markov.Config
		want string
	}{
		{markov.Config{Vocab: 1, Order: 1}, "Vocab"},
		{markov.Config{Vocab: 4, Order: 0}, "Order"},
		{markov.Config{Vocab: 4, Order: 1, Scale: -1}, "Scale"},
		{markov.Config{Vocab: 4, Order: 1, ContextLength: -1}, "ContextLength"},
		{markov.Config{Vocab: 1000, Order: 3}, "exceeds"},
		{markov.Config{Vocab: 10000, Order: 1}, "exceeds"},
	}
	for _, tt := range tests {
		_, err := markov.New(tt.cfg)
		assert.ErrorContains(t, err, tt.want)
	}
}

func TestForwardChainMatchesLogits(t *testing.T) {
	ctx := context.Background()
	for _, order := range []int{1, 2, 3} {
		c := newChain(t, markov.Config{Vocab: 7, Order: order, Seed: uint64(order)})
		seq, err := c.NewSequence(ctx)
		require.NoError(t, err)
		toks := []int32{3, 1, 4, 1, 5, 6, 2, 6}
		// Forward in two batches, asking for every position of the second.
		require.NoError(t, seq.Forward(ctx, batch.Batch{Tokens: toks[:3]}, nil))
		out := []int32{0, 1, 2, 3, 4}
		logits := make([]float32, 5*7)
		require.NoError(t, seq.Forward(ctx, batch.Batch{Tokens: toks[3:], Outputs: out}, logits))
		assert.Equal(t, 8, seq.Len())
		for r := range out {
			assert.Equal(t, c.Logits(toks[:4+r]), logits[r*7:(r+1)*7], "order %d row %d", order, r)
		}
		// Short histories read as token 0.
		assert.Equal(t, c.Logits([]int32{0, 0, 0, 2}), c.Logits([]int32{2}))
	}
}

func TestTreeForwardAndRetain(t *testing.T) {
	ctx := context.Background()
	c := newChain(t, markov.Config{Vocab: 6, Order: 2, Seed: 9})
	seq, err := c.NewSequence(ctx)
	require.NoError(t, err)
	require.NoError(t, seq.Forward(ctx, batch.Batch{Tokens: []int32{1, 2}}, nil))
	// Tree: 3 → {4 → {5}, 0 → {1}}.
	tokens := []int32{3, 4, 0, 5, 1}
	parents := []int32{-1, 0, 0, 1, 2}
	out := []int32{0, 1, 2, 3, 4}
	logits := make([]float32, 5*6)
	require.NoError(t, seq.Forward(ctx, batch.Batch{Tokens: tokens, Tree: mustTree(parents), Outputs: out}, logits))
	paths := [][]int32{{1, 2, 3}, {1, 2, 3, 4}, {1, 2, 3, 0}, {1, 2, 3, 4, 5}, {1, 2, 3, 0, 1}}
	for r, h := range paths {
		assert.Equal(t, c.Logits(h), logits[r*6:(r+1)*6], "node %d", r)
	}
	// Keep the path 3 → 0 → 1 and check the sequence equals that chain.
	assert.ErrorContains(t, batch.PathOf([]int32{0, 1, 4}, parents), "not a child of 1")
	assert.ErrorContains(t, batch.PathOf([]int32{1}, parents), "not a child of -1")
	assert.ErrorContains(t, batch.PathOf([]int32{0, 9}, parents), "outside the tree")
	require.NoError(t, batch.PathOf([]int32{0, 2, 4}, parents))
	assert.ErrorContains(t, seq.Retain(2, []int32{0, 9}), "outside the 5 tokens")
	assert.ErrorContains(t, seq.Retain(2, []int32{2, 0}), "ascending")
	assert.ErrorContains(t, seq.Retain(8, nil), "outside [0, 7]")
	require.NoError(t, seq.Retain(2, []int32{0, 2, 4}))
	assert.Equal(t, []int32{1, 2, 3, 0, 1}, markov.Tokens(seq))

	tree, chain := mustTree(parents), batch.Tree{}
	for i, want := range []int{0, 1, 1, 2, 2} {
		assert.Equal(t, want, tree.Depth(i), "tree node %d", i)
		assert.Equal(t, i, chain.Depth(i), "chain node %d", i)
	}
	_, err = batch.NewTree([]int32{-1, 1})
	assert.ErrorContains(t, err, "parent 1 of node 1")
	_, err = batch.NewTree([]int32{-2})
	assert.ErrorContains(t, err, "parent -2 of node 0")
}

func TestSequenceErrorsLeaveStateAlone(t *testing.T) {
	ctx := context.Background()
	c := newChain(t, markov.Config{Vocab: 4, Order: 1, ContextLength: 6})
	seq, err := c.NewSequence(ctx)
	require.NoError(t, err)
	require.NoError(t, seq.Forward(ctx, batch.Batch{Tokens: []int32{1, 2, 3}}, nil))
	logits := make([]float32, 8)
	tests := []struct {
		name string
		b    batch.Batch
		buf  []float32
		want string
	}{
		{"token out of range", batch.Batch{Tokens: []int32{1, 4}}, nil, "token 4 at batch index 1"},
		{"negative token", batch.Batch{Tokens: []int32{-1}}, nil, "token -1"},
		{"tree length", batch.Batch{Tokens: []int32{1, 2}, Tree: mustTree([]int32{-1})}, nil, "tree of 1 nodes for 2 tokens"},
		{"output out of range", batch.Batch{Tokens: []int32{1}, Outputs: []int32{1}}, logits, "output 0"},
		{"small buffer", batch.Batch{Tokens: []int32{1, 2}, Outputs: []int32{0, 1}}, logits[:5], "logits buffer"},
		{"context full", batch.Batch{Tokens: []int32{1, 2, 3, 0}}, nil, "context length"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.ErrorContains(t, seq.Forward(ctx, tt.b, tt.buf), tt.want)
			assert.Equal(t, 3, seq.Len())
		})
	}
	err = seq.Forward(ctx, batch.Batch{Tokens: []int32{1, 2, 3, 0}}, nil)
	assert.True(t, errors.Is(err, model.ErrContextFull))
	assert.ErrorContains(t, seq.Truncate(4), "truncate to 4")
	assert.ErrorContains(t, seq.Truncate(-1), "truncate to -1")
	require.NoError(t, seq.Truncate(3))
	assert.ErrorContains(t, seq.Retain(3, []int32{0}), "outside the 0 tokens")
	assert.Equal(t, 3, seq.Len())
	require.NoError(t, seq.Forward(ctx, batch.Batch{Tokens: []int32{0, 1}}, nil))
	assert.ErrorContains(t, batch.PathOf([]int32{1}, nil), "not a child of -1", "a chain keeps a prefix")
	require.NoError(t, seq.Retain(3, []int32{0}))
	assert.Equal(t, 4, seq.Len())
	require.NoError(t, seq.Truncate(3))

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	assert.ErrorIs(t, seq.Forward(cancelled, batch.Batch{Tokens: []int32{1}}, nil), context.Canceled)
	_, err = c.NewSequence(cancelled)
	assert.ErrorIs(t, err, context.Canceled)

	require.NoError(t, seq.Close())
	assert.ErrorIs(t, seq.Forward(ctx, batch.Batch{Tokens: []int32{1}}, nil), model.ErrClosed)
	assert.ErrorIs(t, seq.Truncate(0), model.ErrClosed)
	assert.Error(t, seq.Close())
}

func TestPerturbedAgreesPartly(t *testing.T) {
	c := newChain(t, markov.Config{Vocab: 50, Order: 1, Seed: 5})
	same, total := 0, 0
	for _, sigma := range []float64{0, 0.5} {
		d := c.Perturbed(sigma, 3)
		for tok := range int32(50) {
			a, b := c.Logits([]int32{tok}), d.Logits([]int32{tok})
			if sigma == 0 {
				assert.Equal(t, a, b)
				continue
			}
			total++
			if argmax(a) == argmax(b) {
				same++
			}
		}
	}
	assert.Greater(t, same, total/2, "a small perturbation keeps most argmaxes")
	assert.Less(t, same, total, "but not all")
}

func argmax(x []float32) int {
	b := 0
	for i := range x {
		if x[i] > x[b] {
			b = i
		}
	}
	return b
}
