package llama_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/batch"
	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/gpu"
	"github.com/specula/specula/kvcache"
	"github.com/specula/specula/model"
	"github.com/specula/specula/model/llama"
)

// kvEnv is where the paged key/value checks run: a device, and how far logits may
// differ between a sequence and a fresh one that forwarded the same tokens in other
// batches (0 on the host device, whose products do not depend on the batch; on a GPU
// prompts of more than 32 tokens go through cuBLAS).
type kvEnv struct {
	dev func(t testing.TB) *gpu.Device
	tol float64
}

// hostEnv runs the checks on a fresh host device each.
var hostEnv = kvEnv{dev: hostDevice}

// gpuEnv runs the checks on the GPU.
var gpuEnv = kvEnv{dev: openGPU, tol: gpuTol}

// xs opens the repository's gocoder-xs on the environment's device with opts.
func (k kvEnv) xs(t *testing.T, opts llama.Options) *llama.Model {
	t.Helper()
	return openOn(t, k.dev(t), xsPath(t), nil, opts)
}

// near asserts that got is within the environment's tolerance of want.
func (k kvEnv) near(t *testing.T, want, got []float32, msgAndArgs ...any) {
	t.Helper()
	assert.LessOrEqual(t, maxAbsDiff(want, got), k.tol, msgAndArgs...)
}

// fresh returns the logits of the last token of toks forwarded into a new sequence.
func fresh(t *testing.T, m model.Model, toks []int32) []float32 {
	t.Helper()
	s, err := m.NewSequence(context.Background())
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	return forward(t, s, m.Info().VocabSize, batch.Batch{Tokens: toks, Outputs: []int32{int32(len(toks) - 1)}})
}

// last forwards toks into s and returns the logits of the last one.
func last(t *testing.T, s model.Sequence, vocab int, toks []int32) []float32 {
	t.Helper()
	return forward(t, s, vocab, batch.Batch{Tokens: toks, Outputs: []int32{int32(len(toks) - 1)}})
}

// kvChecks are the paged key/value checks, run on each device.
var kvChecks = []struct {
	name  string
	check func(*testing.T, kvEnv)
}{
	{"Truncate", checkTruncate},
	{"Fork", checkFork},
	{"RetainAfterTree", checkRetainAfterTree},
	{"KVBudget", checkKVBudget},
	{"Cancelled", checkCancelled},
	{"BadInputs", checkBadInputs},
}

// TestHostPagedKV runs the paged key/value checks (truncate, fork, retain after a
// tree, the budget, cancellation, bad inputs) on the host device.
func TestHostPagedKV(t *testing.T) {
	for _, c := range kvChecks {
		t.Run(c.name, func(t *testing.T) { c.check(t, hostEnv) })
	}
}

// TestGPUPagedKV runs the paged key/value checks on the GPU.
func TestGPUPagedKV(t *testing.T) {
	openGPU(t)
	for _, c := range kvChecks {
		t.Run(c.name, func(t *testing.T) { c.check(t, gpuEnv) })
	}
}

// checkTruncate rolls a sequence back to lengths inside and at the edges of blocks (of
// 16 positions) and checks that forwarding after the rollback gives the logits of a
// fresh sequence.
func checkTruncate(t *testing.T, k kvEnv) {
	m := k.xs(t, llama.Options{KVBudget: 4 << 20})
	require.Equal(t, kvcache.DefaultBlockSize, m.KVStats().BlockSize)
	v := m.Info().VocabSize
	s := newSeq(t, m)
	last(t, s, v, promptA)
	for _, n := range []int{39, 32, 31, 17, 16, 15, 1, 0} {
		require.NoError(t, s.Truncate(n))
		require.Equal(t, n, s.Len())
		next := cat(promptA[:n], promptB[:5])
		got := last(t, s, v, promptB[:5])
		k.near(t, fresh(t, m, next), got, "truncate to %d", n)
		require.NoError(t, s.Truncate(n))
	}
	require.Error(t, s.Truncate(1), "past the end")
	require.Error(t, s.Truncate(-1))
	st := m.KVStats()
	assert.Equal(t, st.Blocks, st.FreeBlocks, "an empty sequence holds no block")
}

// checkFork checks copy on write: forked sequences share blocks, diverge (inside a
// shared partial block, and after truncating into a shared full block) without
// affecting each other, and each matches a fresh sequence with its own tokens.
func checkFork(t *testing.T, k kvEnv) {
	m := k.xs(t, llama.Options{KVBudget: 4 << 20})
	v := m.Info().VocabSize
	a := newSeq(t, m)
	last(t, a, v, promptA) // 40 tokens: blocks 0, 1 full, block 2 half
	b, err := fork(t, a)
	require.NoError(t, err)
	defer b.Close()
	st := m.KVStats()
	assert.Equal(t, 3, st.SharedBlocks)
	assert.Equal(t, 3, st.Blocks-st.FreeBlocks)

	// Diverge inside the shared partial block.
	xa, xb := promptB[:3], promptB[10:14]
	la := last(t, a, v, xa)
	lb := last(t, b, v, xb)
	k.near(t, fresh(t, m, cat(promptA, xa)), la, "a after divergence")
	k.near(t, fresh(t, m, cat(promptA, xb)), lb, "b after divergence")
	assert.Equal(t, 2, m.KVStats().SharedBlocks)

	// b rolls back into the shared full block 1 and writes there; a must not see it.
	require.NoError(t, b.Truncate(20))
	yb := promptB[20:26]
	lb = last(t, b, v, yb)
	k.near(t, fresh(t, m, cat(promptA[:20], yb)), lb, "b after truncating into a shared block")
	la = last(t, a, v, promptB[3:5])
	k.near(t, fresh(t, m, cat(promptA, xa, promptB[3:5])), la, "a unaffected by b")

	// A fork of a fork, then everything closed: every block is free again.
	c, err := fork(t, b)
	require.NoError(t, err)
	assert.Equal(t, b.Len(), c.Len())
	lc := last(t, c, v, promptA[:2])
	k.near(t, fresh(t, m, cat(promptA[:20], yb, promptA[:2])), lc)
	require.NoError(t, c.Close())
	require.NoError(t, b.Close())
	require.NoError(t, a.Close())
	st = m.KVStats()
	assert.Equal(t, st.Blocks, st.FreeBlocks)
	assert.Zero(t, st.SharedBlocks)
	b, err = fork(t, a)
	assert.ErrorIs(t, err, model.ErrClosed)
	assert.Nil(t, b)
}

// checkRetainAfterTree forwards a tree, keeps one root-to-leaf path, and checks that
// the sequence then equals a fresh one that forwarded the path as a chain; also when
// the tree's blocks are shared with a fork (Retain copies them first) and for trees
// that straddle a block boundary, so that the moves cross it.
func checkRetainAfterTree(t *testing.T, k kvEnv) {
	tree := batch.Batch{
		Tokens:  []int32{295, 259, 46, 1067, 2114, 40, 311, 44, 2843},
		Tree:    mustTree([]int32{-1, 0, 0, 1, 2, 4, 5, 4, 7}),
		Outputs: seqs(9),
	}
	for _, c := range []struct {
		name string
		at   int // the sequence's length before the tree: 12 straddles the block boundary at 16
		keep []int32
		fork bool
	}{
		{"deep-across", 12, []int32{0, 2, 4, 7, 8}, false},
		{"deep-within", 21, []int32{0, 2, 4, 5, 6}, false},
		{"prefix-across", 14, []int32{0, 1, 3}, false},
		{"deep-across-forked", 12, []int32{0, 2, 4, 7, 8}, true},
		{"deep-within-forked", 21, []int32{0, 2, 4, 7, 8}, true},
		{"empty", 12, []int32{}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := k.xs(t, llama.Options{KVBudget: 4 << 20})
			v := m.Info().VocabSize
			s := newSeq(t, m)
			pre := promptB[:c.at]
			last(t, s, v, pre)
			all := forward(t, s, v, tree)
			// Each tree node's logits equal those of its path forwarded as a chain.
			for _, node := range []int{3, 8} {
				var path []int32
				for a := int32(node); a >= 0; a = tree.Tree.Parent(int(a)) {
					path = append([]int32{tree.Tokens[a]}, path...)
				}
				assert.LessOrEqual(t, maxAbsDiff(fresh(t, m, cat(pre, path)), all[node*v:(node+1)*v]), max(hostTol, k.tol), "node %d", node)
			}
			var f model.Sequence
			if c.fork {
				var err error
				f, err = fork(t, s)
				require.NoError(t, err)
				defer f.Close()
			}
			require.NoError(t, s.Retain(c.at, c.keep))
			require.Equal(t, c.at+len(c.keep), s.Len())
			path := make([]int32, len(c.keep))
			for i, k := range c.keep {
				path[i] = tree.Tokens[k]
			}
			got := last(t, s, v, promptA[:3])
			assert.LessOrEqual(t, maxAbsDiff(fresh(t, m, cat(pre, path, promptA[:3])), got), max(hostTol, k.tol))
			if f != nil {
				// The fork still holds the whole tree; rolled back, it continues as
				// if the tree had never been forwarded.
				require.Equal(t, c.at+len(tree.Tokens), f.Len())
				require.NoError(t, f.Truncate(c.at))
				got := last(t, f, v, promptA[5:8])
				k.near(t, fresh(t, m, cat(pre, promptA[5:8])), got)
			}
			require.Error(t, s.Retain(s.Len(), []int32{0}), "nothing after the end to keep")
		})
	}
}

// checkKVBudget checks that a forward beyond the pool fails with an error that wraps
// model.ErrOutOfMemory and kvcache.ErrOutOfMemory, leaves the sequence as it was, and
// succeeds once other sequences give their blocks back.
func checkKVBudget(t *testing.T, k kvEnv) {
	// gocoder-xs: 2 layers × K, V × 1 kv head × 64 dims × 4 bytes = 1 KiB a position;
	// blocks of 16 positions: 16 KiB; a budget of 64 KiB holds 4 blocks.
	m := k.xs(t, llama.Options{KVBudget: 64 << 10})
	v := m.Info().VocabSize
	st := m.KVStats()
	require.Equal(t, 4, st.Blocks)
	require.Equal(t, int64(16<<10), st.BlockBytes)

	a := newSeq(t, m)
	long := cat(promptA, promptB) // 70 positions: 5 blocks
	err := a.Forward(context.Background(), batch.Batch{Tokens: long, Outputs: []int32{0}}, make([]float32, v))
	require.Error(t, err)
	assert.ErrorIs(t, err, model.ErrOutOfMemory)
	assert.ErrorIs(t, err, kvcache.ErrOutOfMemory)
	assert.Equal(t, 0, a.Len())
	assert.Equal(t, 4, m.KVStats().FreeBlocks)

	last(t, a, v, promptA) // 3 blocks
	b := newSeq(t, m)
	err = b.Forward(context.Background(), batch.Batch{Tokens: promptB, Outputs: []int32{0}}, make([]float32, v))
	assert.ErrorIs(t, err, model.ErrOutOfMemory)
	assert.Equal(t, 0, b.Len())
	assert.Equal(t, 40, a.Len())

	// In one Model.Forward, all or nothing: a's batch fits, b's does not, neither
	// grows.
	work := []model.Work{
		{Seq: a, Batch: batch.Batch{Tokens: promptB[:2], Outputs: []int32{1}}, Logits: make([]float32, v)},
		{Seq: b, Batch: batch.Batch{Tokens: promptB, Outputs: []int32{0}}, Logits: make([]float32, v)},
	}
	assert.ErrorIs(t, m.Forward(context.Background(), work), model.ErrOutOfMemory)
	assert.Equal(t, 40, a.Len())
	assert.Equal(t, 0, b.Len())
	assert.Equal(t, 1, m.KVStats().FreeBlocks)

	require.NoError(t, a.Close())
	got := last(t, b, v, promptB)
	k.near(t, fresh(t, m, promptB), got)

	// A budget smaller than one block is refused at load.
	_, err = llama.Open(xsPath(t), gpu.Factory(k.dev(t), gpu.BackendOptions{}), llama.Options{KVBudget: 1000})
	assert.ErrorContains(t, err, "smaller than one block")
}

// cancelAfter is a context whose Err reports cancellation from its n-th call on.
type cancelAfter struct {
	context.Context
	calls, n atomic.Int32
}

// Err reports cancellation from the n-th call on.
func (c *cancelAfter) Err() error {
	if c.calls.Add(1) >= c.n.Load() {
		return context.Canceled
	}
	return nil
}

// Done returns nil: the context is only ever polled.
func (c *cancelAfter) Done() <-chan struct{} { return nil }

// Deadline reports none.
func (c *cancelAfter) Deadline() (time.Time, bool) { return time.Time{}, false }

// checkCancelled checks cancelled contexts: before a forward, in the middle of one (the
// sequence is left as it was and still computes correct logits), and at NewSequence.
func checkCancelled(t *testing.T, k kvEnv) {
	m := k.xs(t, llama.Options{})
	v := m.Info().VocabSize
	s := newSeq(t, m)
	last(t, s, v, promptA[:20])
	before := m.KVStats()

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := s.Forward(ctx, batch.Batch{Tokens: promptA[20:], Outputs: []int32{0}}, make([]float32, v))
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, 20, s.Len())

	// Cancelled between layers: the first check is the forward's, the second the
	// first layer's, the third the second layer's.
	mid := &cancelAfter{Context: context.Background()}
	mid.n.Store(3)
	err = s.Forward(mid, batch.Batch{Tokens: promptA[20:], Outputs: []int32{0}}, make([]float32, v))
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, int32(3), mid.calls.Load(), "cancelled inside the layers")
	assert.Equal(t, 20, s.Len())
	assert.Equal(t, before.FreeBlocks, m.KVStats().FreeBlocks)
	got := last(t, s, v, promptA[20:])
	k.near(t, fresh(t, m, promptA), got)

	_, err = m.NewSequence(ctx)
	assert.ErrorIs(t, err, context.Canceled)
}

// checkBadInputs checks that invalid batches and Retain arguments are errors that
// leave the sequence unchanged.
func checkBadInputs(t *testing.T, k kvEnv) {
	m := k.xs(t, llama.Options{KVBudget: 1 << 20, ContextLength: 64})
	v := m.Info().VocabSize
	ctx := context.Background()
	s := newSeq(t, m)
	last(t, s, v, promptA[:5])
	for _, c := range []struct {
		name   string
		b      batch.Batch
		logits int
	}{
		{"token = vocab", batch.Batch{Tokens: []int32{1, int32(v)}, Outputs: []int32{1}}, v},
		{"negative token", batch.Batch{Tokens: []int32{-1}, Outputs: []int32{0}}, v},
		{"huge token", batch.Batch{Tokens: []int32{1 << 30}}, 0},
		{"tree length", batch.Batch{Tokens: []int32{1, 2}, Tree: mustTree([]int32{-1})}, 0},
		{"output out of batch", batch.Batch{Tokens: []int32{1, 2}, Outputs: []int32{2}}, v},
		{"logits too short", batch.Batch{Tokens: []int32{1, 2}, Outputs: []int32{0, 1}}, v},
		{"past the context", batch.Batch{Tokens: make([]int32, 60), Outputs: []int32{0}}, v},
	} {
		err := s.Forward(ctx, c.b, make([]float32, c.logits))
		assert.Error(t, err, c.name)
		assert.Equal(t, 5, s.Len(), c.name)
	}
	err := s.Forward(ctx, batch.Batch{Tokens: make([]int32, 60), Outputs: []int32{0}}, make([]float32, v))
	assert.ErrorIs(t, err, model.ErrContextFull)
	// Nothing forwarded: no outputs and no error.
	require.NoError(t, s.Forward(ctx, batch.Batch{}, nil))

	// A sequence of another model, and one named twice.
	other := k.xs(t, llama.Options{KVBudget: 1 << 20})
	foreign := newSeq(t, other)
	one := batch.Batch{Tokens: []int32{1}, Outputs: []int32{0}}
	assert.ErrorContains(t, m.Forward(ctx, []model.Work{{Seq: foreign, Batch: one, Logits: make([]float32, v)}}), "not one of this model's")
	assert.Error(t, m.Forward(ctx, []model.Work{{Seq: s, Batch: one, Logits: make([]float32, v)}, {Seq: s, Batch: one, Logits: make([]float32, v)}}))
	assert.Equal(t, 5, s.Len())

	forward(t, s, v, batch.Batch{Tokens: []int32{1, 2, 3}, Tree: mustTree([]int32{-1, 0, 0}), Outputs: []int32{2}})
	assert.Error(t, s.Retain(5, []int32{1, 0}), "not ascending")
	assert.Error(t, s.Retain(5, []int32{0, 3}), "outside the batch")
	assert.Error(t, s.Retain(9, []int32{0}), "outside the sequence")
	assert.Equal(t, 8, s.Len())
	require.NoError(t, s.Retain(5, []int32{0, 2}))
	assert.Equal(t, 7, s.Len())
}

// TestHostClosed checks that closed sequences, models and devices report errors
// (wrapping model.ErrClosed for sequences) instead of panicking.
func TestHostClosed(t *testing.T) {
	dev := gpu.HostDevice()
	path := xsPath(t)
	m, err := llama.Open(path, gpu.Factory(dev, gpu.BackendOptions{}), llama.Options{KVBudget: deviceKV})
	require.NoError(t, err)
	v := m.Info().VocabSize
	ctx := context.Background()
	logits := make([]float32, v)
	b := batch.Batch{Tokens: promptA[:4], Outputs: []int32{3}}

	s, err := m.NewSequence(ctx)
	require.NoError(t, err)
	require.NoError(t, s.Forward(ctx, b, logits))
	require.NoError(t, s.Close())
	assert.Error(t, s.Close(), "closed twice")
	assert.ErrorIs(t, s.Forward(ctx, b, logits), model.ErrClosed)
	assert.ErrorIs(t, s.Truncate(0), model.ErrClosed)
	assert.ErrorIs(t, s.Retain(0, nil), model.ErrClosed)
	_, err = fork(t, s)
	assert.ErrorIs(t, err, model.ErrClosed)
	assert.Equal(t, 0, s.Len())

	// A sequence still open when its model closes fails cleanly, and can be closed.
	open, err := m.NewSequence(ctx)
	require.NoError(t, err)
	require.NoError(t, open.Forward(ctx, b, logits))
	forked, err := fork(t, open)
	require.NoError(t, err)
	require.NoError(t, m.Close())
	require.NoError(t, m.Close(), "closing twice is harmless")
	assert.ErrorContains(t, open.Forward(ctx, b, logits), "closed")
	assert.Equal(t, 4, open.Len(), "a failed forward leaves the sequence as it was")
	assert.ErrorContains(t, forked.Forward(ctx, b, logits), "closed")
	_, err = m.NewSequence(ctx)
	assert.ErrorIs(t, err, llama.ErrModelClosed)
	assert.NoError(t, open.Close())
	assert.NoError(t, forked.Close())

	// A closed device.
	m2, err := llama.Open(path, gpu.Factory(dev, gpu.BackendOptions{}), llama.Options{KVBudget: deviceKV})
	require.NoError(t, err)
	s2, err := m2.NewSequence(ctx)
	require.NoError(t, err)
	require.NoError(t, s2.Forward(ctx, b, logits))
	require.NoError(t, dev.Close())
	require.NoError(t, dev.Close())
	assert.ErrorContains(t, s2.Forward(ctx, b, logits), "device is closed")
	assert.Equal(t, 4, s2.Len())
	assert.NoError(t, s2.Close())
	assert.ErrorContains(t, m2.Close(), "device is closed")
	_, err = llama.Open(path, gpu.Factory(dev, gpu.BackendOptions{}), llama.Options{KVBudget: deviceKV})
	assert.ErrorContains(t, err, "device is closed")
	_, err = llama.NewRandom(randomConfig(llama.RopeHalf), dtype.F16, 1, gpu.Factory(dev, gpu.BackendOptions{}), llama.Options{KVBudget: deviceKV})
	assert.ErrorContains(t, err, "device is closed")
	assert.ErrorContains(t, dev.Synchronize(), "device is closed")
}
