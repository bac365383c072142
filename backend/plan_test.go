package backend

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/batch"
	"github.com/specula/specula/kvcache"
)

// slotStore is a storage that copies nothing: the plan tests only read the books.
type slotStore struct{}

func (slotStore) Copy([]int32) error { return nil }

// TestPlanAdd checks what a plan says of each row: token, slot, rotation, what it sees
// (a chain up to itself; a tree what was held before, then its ancestors and itself)
// and where its logits go, for a chain and a tree of two sequences in one pass, cut
// at a row.
func TestPlanAdd(t *testing.T) {
	pool, err := kvcache.NewPool(kvcache.Config{BlockSize: 4, BlockBytes: 1, Budget: 16}, slotStore{})
	require.NoError(t, err)
	a, b := pool.NewSeq(), pool.NewSeq()
	require.NoError(t, a.Grow([]int32{9, 9, 9}))
	require.NoError(t, b.Grow([]int32{8, 8, 8, 8, 8}))
	chain := batch.Batch{Tokens: []int32{1, 2, 3}, Outputs: []int32{2, 0}}
	tree, err := batch.NewTree([]int32{-1, 0, 0, 2})
	require.NoError(t, err)
	branch := batch.Batch{Tokens: []int32{4, 5, 6, 7}, Tree: tree, Outputs: []int32{3}}
	require.NoError(t, a.Grow(chain.Tokens))
	require.NoError(t, b.Grow(branch.Tokens))
	la, lb := make([]float32, 2*10), make([]float32, 10)
	inv := []float64{1, 0.5}

	var p Plan
	p.Reset()
	p.Dim, p.InvFreq = 2, inv
	p.Add(a, nil, 3, chain, 0, 3, la)
	p.Add(b, nil, 5, branch, 0, 2, lb) // the tree cut after its second node
	p.Add(b, nil, 5, branch, 2, 4, lb)

	assert.Equal(t, []int32{1, 2, 3, 4, 5, 6, 7}, p.Tokens)
	want := []int32{a.Slot(3), a.Slot(4), a.Slot(5), b.Slot(5), b.Slot(6), b.Slot(7), b.Slot(8)}
	assert.Equal(t, want, p.Slots)
	assert.Equal(t, []int32{4, 5, 6, 5, 5, 5, 5}, p.Prefix)
	assert.Equal(t, []int32{0, 0, 0, 0, 1, 3, 5, 8}, p.ExtraOff)
	assert.Equal(t, []int32{5, 5, 6, 5, 7, 5, 7, 8}, p.Extra)
	require.Len(t, p.Spans, 3)
	assert.Equal(t, Span{Lo: 0, Hi: 3, Table: a.Table(), Chain: true}, p.Spans[0])
	assert.Equal(t, 3, p.Spans[1].Lo)
	assert.False(t, p.Spans[1].Chain)
	require.Len(t, p.Outputs, 3)
	assert.Equal(t, []int{2, 0, 6}, []int{p.Outputs[0].Row, p.Outputs[1].Row, p.Outputs[2].Row})
	assert.Equal(t, []int{0, 1, 0}, []int{p.Outputs[0].Index, p.Outputs[1].Index, p.Outputs[2].Index})
	// Rows at depth d of a batch appended at base rotate for position base+d.
	for r, pos := range []int{3, 4, 5, 5, 6, 6, 7} {
		for j, f := range inv {
			s, c := math.Sincos(float64(pos) * f)
			assert.Equal(t, float32(c), p.Rope[r*4+j], "row %d cos %d", r, j)
			assert.Equal(t, float32(s), p.Rope[r*4+2+j], "row %d sin %d", r, j)
		}
	}
	p.Reset()
	assert.Zero(t, p.Rows())
	assert.Equal(t, []int32{0}, p.ExtraOff)

	// A rope scale (longrope's attention factor) multiplies the cosines and sines.
	p.RopeScale = 1.25
	p.Add(a, nil, 3, chain, 0, 1, la)
	for j, f := range inv {
		s, c := math.Sincos(3 * f)
		assert.Equal(t, float32(c*1.25), p.Rope[j], "scaled cos %d", j)
		assert.Equal(t, float32(s*1.25), p.Rope[2+j], "scaled sin %d", j)
	}
}

// TestShapeWidth checks the widths of the activation buffers.
func TestShapeWidth(t *testing.T) {
	s := Shape{Dim: 8, Heads: 4, KVHeads: 2, HeadDim: 2, FFN: 12}
	for a, want := range map[Act]int{X: 8, XN: 8, QKV: 16, Att: 8, GateUp: 24, Hidden: 12} {
		assert.Equal(t, want, s.Width(a), "act %d", a)
	}
}

// TestRope checks both layouts on a quarter turn.
func TestRope(t *testing.T) {
	cos, sin := []float32{0, 1}, []float32{1, 0}
	x := []float32{1, 2, 3, 4}
	Rope(x, cos, sin, RopeInterleaved)
	assert.Equal(t, []float32{-2, 1, 3, 4}, x)
	x = []float32{1, 2, 3, 4}
	Rope(x, cos, sin, RopeHalf)
	assert.Equal(t, []float32{-3, 2, 1, 4}, x)
}
