package target_test

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/model/markov"
	"github.com/specula/specula/target"
)

func setup(t *testing.T, maxDraft int) (*markov.Chain, *target.Target, func() []int32) {
	t.Helper()
	c, err := markov.New(markov.Config{Vocab: 9, Order: 2, Seed: 11})
	require.NoError(t, err)
	seq, err := c.NewSequence(context.Background())
	require.NoError(t, err)
	tg, err := target.New(seq, 9, maxDraft)
	require.NoError(t, err)
	return c, tg, func() []int32 { return markov.Tokens(seq) }
}

func TestVerifyChainAndAccept(t *testing.T) {
	ctx := context.Background()
	c, tg, held := setup(t, 4)
	tg.PrefillChunk = 2 // exercise chunking
	prompt := []int32{1, 2, 3, 4, 5}
	require.NoError(t, tg.Prefill(ctx, prompt[:4]))
	assert.Equal(t, 4, tg.Len())

	draft := []int32{6, 7, 8}
	rows, err := tg.Verify(ctx, prompt[4], draft)
	require.NoError(t, err)
	require.Len(t, rows, 4)
	hist := append([]int32(nil), prompt...)
	for i, row := range rows {
		assert.Equal(t, c.Logits(hist), row, "row %d", i)
		if i < len(draft) {
			hist = append(hist, draft[i])
		}
	}
	require.NoError(t, tg.Accept(1))
	assert.Equal(t, []int32{1, 2, 3, 4, 5, 6}, held())
	assert.ErrorContains(t, tg.Accept(0), "accept 0", "one Accept per verification")

	// A step without a draft is plain decoding.
	rows, err = tg.Verify(ctx, 0, nil)
	require.NoError(t, err)
	require.Len(t, rows, 1)
	assert.Equal(t, c.Logits([]int32{1, 2, 3, 4, 5, 6, 0}), rows[0])
	require.NoError(t, tg.Accept(0))
	assert.Equal(t, 7, tg.Len())

	_, err = tg.Verify(ctx, 0, []int32{1, 2, 3, 4, 5})
	assert.ErrorContains(t, err, "exceeds the maximum of 4")
	_, err = tg.Verify(ctx, 0, []int32{1, 99})
	assert.ErrorContains(t, err, "token 99")
	assert.Equal(t, 7, tg.Len(), "a failed verification changes nothing")
	require.NoError(t, tg.Rewind(3))
	assert.Equal(t, []int32{1, 2, 3}, held())
}

func TestVerifyTreeAndAcceptPath(t *testing.T) {
	ctx := context.Background()
	c, tg, held := setup(t, 6)
	require.NoError(t, tg.Prefill(ctx, []int32{1, 2}))
	// Tree below pending token 3: 4 → {5, 6}, 7 → {8}.
	nodes := []int32{4, 7, 5, 6, 8}
	parents := []int32{-1, -1, 0, 0, 1}
	rows, err := tg.VerifyTree(ctx, 3, nodes, parents)
	require.NoError(t, err)
	require.Len(t, rows, 6)
	want := [][]int32{{1, 2, 3}, {1, 2, 3, 4}, {1, 2, 3, 7}, {1, 2, 3, 4, 5}, {1, 2, 3, 4, 6}, {1, 2, 3, 7, 8}}
	for i, h := range want {
		assert.Equal(t, c.Logits(h), rows[i], "row %d", i)
	}
	assert.ErrorContains(t, tg.AcceptPath([]int32{0, 4}), "not a child")
	assert.ErrorContains(t, tg.AcceptPath([]int32{2}), "not a child")
	assert.ErrorContains(t, tg.AcceptPath([]int32{math.MaxInt32}), "outside the tree")
	assert.ErrorContains(t, tg.AcceptPath([]int32{-1}), "outside the tree")
	assert.ErrorContains(t, tg.Accept(1), "use AcceptPath")
	require.NoError(t, tg.AcceptPath([]int32{1, 4}))
	assert.Equal(t, []int32{1, 2, 3, 7, 8}, held())

	// The sequence continues as if the path had been a chain.
	rows, err = tg.Verify(ctx, 0, nil)
	require.NoError(t, err)
	assert.Equal(t, c.Logits([]int32{7, 8, 0}), rows[0])

	_, err = tg.VerifyTree(ctx, 0, []int32{1}, nil)
	assert.ErrorContains(t, err, "0 parents for 1")
	_, err = tg.VerifyTree(ctx, 0, []int32{1, 2}, []int32{-2, 0})
	assert.ErrorContains(t, err, "parent -2 of tree node 0")
	_, err = tg.VerifyTree(ctx, 0, []int32{1, 2}, []int32{-1, 1})
	assert.ErrorContains(t, err, "parent 1 of tree node 1")
}

func TestNewRejectsBadSizes(t *testing.T) {
	_, err := target.New(nil, 0, 1)
	assert.ErrorContains(t, err, "vocabulary size")
	_, err = target.New(nil, 5, -1)
	assert.ErrorContains(t, err, "maximum draft size")
}
