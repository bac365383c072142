package kvcache

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// filler hands out fresh write ids and records what each sequence should hold.
type filler struct{ next uint32 }

// grow grows s by n positions and writes fresh ids to them, returning ids with them
// appended (in a new array, so that forks may extend one prefix independently).
func (f *filler) grow(t testing.TB, s *Seq, ids []uint32, n int) []uint32 {
	t.Helper()
	ids = slices.Clip(ids)
	require.NoError(t, s.Grow(n))
	for range n {
		f.next++
		write(s, len(ids), f.next)
		ids = append(ids, f.next)
	}
	return ids
}

func TestNewPool(t *testing.T) {
	// One block of 2 layers × 2 × 3 heads × 16 positions × 8 floats × 4 bytes = 6144 bytes.
	const block = 2 * 2 * 3 * 16 * 8 * 4
	for _, c := range []struct {
		name       string
		cfg        Config
		blocks     int
		blockBytes int64
		err        []string // substrings of the error, nil for success
	}{
		{"default block size", Config{Layers: 2, KVHeads: 3, HeadDim: 8, Budget: 10 * block}, 10, block, nil},
		{"budget rounds down", Config{Layers: 2, KVHeads: 3, HeadDim: 8, Budget: 10*block + block - 1}, 10, block, nil},
		{"exactly one block", Config{Layers: 2, KVHeads: 3, HeadDim: 8, Budget: block}, 1, block, nil},
		{"explicit block size", Config{Layers: 1, KVHeads: 1, HeadDim: 4, BlockSize: 3, Budget: 1000}, 1000 / 96, 96, nil},
		{"budget below one block", Config{Layers: 2, KVHeads: 3, HeadDim: 8, Budget: block - 1},
			0, block, []string{"budget of 6143 bytes", "one block of 6144 bytes"}},
		{"zero budget", Config{Layers: 2, KVHeads: 3, HeadDim: 8}, 0, block, []string{"Budget", "0"}},
		{"negative budget", Config{Layers: 2, KVHeads: 3, HeadDim: 8, Budget: -5}, 0, block, []string{"Budget", "-5"}},
		{"no layers", Config{KVHeads: 3, HeadDim: 8, Budget: 1 << 20}, 0, 0, []string{"Layers"}},
		{"negative heads", Config{Layers: 2, KVHeads: -1, HeadDim: 8, Budget: 1 << 20}, 0, 0, []string{"KVHeads", "-1"}},
		{"no head dim", Config{Layers: 2, KVHeads: 3, Budget: 1 << 20}, 0, 0, []string{"HeadDim"}},
		{"negative block size", Config{Layers: 2, KVHeads: 3, HeadDim: 8, BlockSize: -16, Budget: 1 << 20}, 0, 0, []string{"BlockSize", "-16"}},
		{"block overflows", Config{Layers: 1 << 30, KVHeads: 1 << 30, HeadDim: 1 << 30, Budget: 1 << 20}, 0, 0, []string{"does not fit"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.blockBytes, c.cfg.BlockBytes())
			p, err := NewPool(c.cfg)
			if c.err != nil {
				require.Error(t, err)
				assert.Nil(t, p)
				for _, s := range c.err {
					assert.Contains(t, err.Error(), s)
				}
				return
			}
			require.NoError(t, err)
			st := p.Stats()
			bs := c.cfg.BlockSize
			if bs == 0 {
				bs = DefaultBlockSize
			}
			assert.Equal(t, Stats{Blocks: c.blocks, FreeBlocks: c.blocks, BlockSize: bs, BlockBytes: c.blockBytes, Budget: c.cfg.Budget}, st)
			assert.LessOrEqual(t, int64(st.Blocks)*st.BlockBytes, c.cfg.Budget)
			assert.Equal(t, bs, p.Config().BlockSize)
			require.NoError(t, p.check())
		})
	}
}

func TestStats(t *testing.T) {
	p := newPool(t, 2, 2, 4, 4, 10)
	bb := p.Stats().BlockBytes
	a := p.NewSeq()
	defer a.Close()
	var fork *Seq
	for _, step := range []struct {
		op     string
		n      int
		blocks int // blocks in use after the step
		shared int
	}{
		{"grow", 1, 1, 0},
		{"grow", 3, 1, 0},
		{"grow", 1, 2, 0},
		{"grow", 10, 4, 0}, // 15 positions
		{"fork", 0, 4, 4},
		{"truncate", 8, 4, 2}, // a keeps blocks 0, 1; the fork still holds all four
		{"grow", 1, 5, 2},     // position 8 starts a new block of a's own
		{"closefork", 0, 3, 0},
		{"truncate", 0, 0, 0},
	} {
		switch step.op {
		case "grow":
			require.NoError(t, a.Grow(step.n))
		case "truncate":
			require.NoError(t, a.Truncate(step.n))
		case "fork":
			var err error
			fork, err = a.Fork()
			require.NoError(t, err)
		case "closefork":
			fork.Close()
		}
		require.NoError(t, p.check(a, fork))
		st := p.Stats()
		assert.Equal(t, step.blocks, st.Blocks-st.FreeBlocks, "after %s %d", step.op, step.n)
		assert.Equal(t, int64(step.blocks)*bb, st.InUseBytes, "after %s %d", step.op, step.n)
		assert.Equal(t, step.shared, st.SharedBlocks, "after %s %d", step.op, step.n)
	}
}

func TestStatsFork(t *testing.T) {
	p := newPool(t, 2, 2, 4, 4, 10)
	a := p.NewSeq()
	require.NoError(t, a.Grow(15)) // 4 blocks
	b, err := a.Fork()
	require.NoError(t, err)
	st := p.Stats()
	assert.Equal(t, 6, st.FreeBlocks, "fork copies nothing")
	assert.Equal(t, 4, st.SharedBlocks)
	require.NoError(t, a.Truncate(8))
	st = p.Stats()
	assert.Equal(t, 6, st.FreeBlocks, "b still holds every block")
	assert.Equal(t, 2, st.SharedBlocks)
	b.Close()
	st = p.Stats()
	assert.Equal(t, 8, st.FreeBlocks)
	assert.Equal(t, 0, st.SharedBlocks)
	assert.Equal(t, 2*st.BlockBytes, st.InUseBytes)
	require.NoError(t, p.check(a, b))
	a.Close()
	assert.Equal(t, 10, p.Stats().FreeBlocks)
	require.NoError(t, p.check(a, b))
}

func TestRoundTrip(t *testing.T) {
	for _, bs := range []int{1, 4, 5, 16} {
		t.Run(fmt.Sprintf("block=%d", bs), func(t *testing.T) {
			p := newPool(t, 3, 2, 5, bs, 64)
			s := p.NewSeq()
			defer s.Close()
			var f filler
			var ids []uint32
			for _, n := range []int{1, 3, 4, 7, 9, 1, 1, 16} {
				ids = f.grow(t, s, ids, n)
				verify(t, s, ids)
				require.NoError(t, p.check(s))
			}
			require.Equal(t, 42, s.Len())
			used := func() int { st := p.Stats(); return st.Blocks - st.FreeBlocks }
			assert.Equal(t, (42+bs-1)/bs, used())

			require.NoError(t, s.Truncate(13))
			ids = ids[:13]
			verify(t, s, ids)
			assert.Equal(t, (13+bs-1)/bs, used())
			ids = f.grow(t, s, ids, 10)
			verify(t, s, ids)
			require.NoError(t, s.Truncate(0))
			assert.Equal(t, 0, used())
			assert.Equal(t, 0, s.Blocks())
			ids = f.grow(t, s, ids[:0], 5)
			verify(t, s, ids)
			require.NoError(t, p.check(s))
		})
	}
}

// TestBlockLayout pins the documented layout: a block's (layer, kind, head) runs lie in
// the block in that order, slot-major, and Block of a layer and head is the key run.
func TestBlockLayout(t *testing.T) {
	p := newPool(t, 2, 3, 4, 5, 3)
	s := p.NewSeq()
	defer s.Close()
	require.NoError(t, s.Grow(7))
	for l := range 2 {
		for h := range 3 {
			for pos := range 7 {
				k, v := s.Row(l, h, pos)
				for d := range 4 {
					k[d] = float32(1000*l + 100*h + 10*pos + d)
					v[d] = -k[d]
				}
			}
		}
	}
	// Logical block 1 holds positions 5 and 6 in slots 0 and 1.
	b := int(s.table[1])
	blk := p.blocks[b]
	for l := range 2 {
		for kind := range 2 {
			for h := range 3 {
				run := blk[((l*2+kind)*3+h)*5*4:][:5*4]
				for slot := range 2 {
					for d := range 4 {
						want := float32(1000*l + 100*h + 10*(5+slot) + d)
						if kind == 1 {
							want = -want
						}
						require.Equal(t, want, run[slot*4+d], "layer %d kind %d head %d slot %d dim %d", l, kind, h, slot, d)
					}
				}
				if kind == 0 {
					k, v := s.Block(l, h, 1)
					require.Equal(t, run, k)
					require.Equal(t, &run[0], &k[0], "Block aliases the block memory")
					require.Equal(t, float32(-(1000*l + 100*h + 50)), v[0])
				}
			}
		}
	}
}

func TestOutOfMemory(t *testing.T) {
	p := newPool(t, 2, 1, 3, 4, 5)
	var f filler
	a, b := p.NewSeq(), p.NewSeq()
	defer a.Close()
	ida := f.grow(t, a, nil, 10) // 3 blocks
	idb := f.grow(t, b, nil, 6)  // 2 blocks: the pool is full
	before := p.Stats()
	require.Equal(t, 0, before.FreeBlocks)

	err := a.Grow(3) // 10 → 13 needs one more block
	require.ErrorIs(t, err, ErrOutOfMemory)
	assert.Contains(t, err.Error(), "needs 1 blocks, 0 of 5 are free")
	assert.Contains(t, err.Error(), fmt.Sprintf("budget %d bytes", p.Config().Budget))
	assert.Equal(t, 10, a.Len())
	assert.Equal(t, before, p.Stats())
	verify(t, a, ida)

	// Growing within the last block needs nothing.
	ida = f.grow(t, a, ida, 2)
	verify(t, a, ida)

	// A fork whose shared last block would have to be copied also fails cleanly.
	c, err := b.Fork()
	require.NoError(t, err)
	require.NoError(t, c.Truncate(5))
	err = c.Grow(1)
	require.ErrorIs(t, err, ErrOutOfMemory)
	assert.Equal(t, 5, c.Len())
	verify(t, c, idb[:5])
	require.NoError(t, p.check(a, b, c))
	err = c.Move(4, 0)
	require.ErrorIs(t, err, ErrOutOfMemory)
	err = c.Retain(4, []int32{})
	require.NoError(t, err, "retaining nothing moves nothing")
	require.Equal(t, 4, c.Len())
	err = c.Retain(0, []int32{1})
	require.ErrorIs(t, err, ErrOutOfMemory)
	assert.Equal(t, 4, c.Len(), "a failed Retain does not truncate")
	verify(t, c, idb[:4])
	verify(t, b, idb)
	c.Close()

	b.Close()
	after := p.Stats()
	assert.Equal(t, 2, after.FreeBlocks)
	ida = f.grow(t, a, ida, 8) // 12 → 20: two more blocks
	verify(t, a, ida)
	assert.Equal(t, 0, p.Stats().FreeBlocks)
	require.NoError(t, p.check(a, b, c))

	// Asking for more than the whole pool names the numbers.
	err = a.Grow(1000)
	require.ErrorIs(t, err, ErrOutOfMemory)
	assert.Contains(t, err.Error(), "needs 250 blocks")
}

func TestForkCopyOnWrite(t *testing.T) {
	p := newPool(t, 2, 2, 3, 4, 20)
	var f filler
	a := p.NewSeq()
	prefix := f.grow(t, a, nil, 10) // blocks 0, 1 full; block 2 holds 2 of 4
	b, err := a.Fork()
	require.NoError(t, err)
	assert.Equal(t, 17, p.Stats().FreeBlocks, "fork copies nothing")
	assert.Equal(t, 3, p.Stats().SharedBlocks)
	verify(t, b, prefix)

	// Both write into the shared, partly filled last block: each gets its own copy.
	ida := f.grow(t, a, prefix, 1)
	assert.Equal(t, 16, p.Stats().FreeBlocks, "a copied the last block")
	assert.Equal(t, 2, p.Stats().SharedBlocks)
	idb := f.grow(t, b, prefix, 3)
	assert.Equal(t, 15, p.Stats().FreeBlocks, "b copied the last block too")
	assert.Equal(t, 2, p.Stats().SharedBlocks)
	verify(t, a, ida)
	verify(t, b, idb)
	require.NoError(t, p.check(a, b))
	assert.Equal(t, a.table[:2], b.table[:2], "the full blocks of the prefix are still shared")

	// Growing across block boundaries after the copy allocates fresh blocks only.
	ida = f.grow(t, a, ida, 9)
	idb = f.grow(t, b, idb, 2)
	verify(t, a, ida)
	verify(t, b, idb)
	require.NoError(t, p.check(a, b))

	// Truncating one back into the shared prefix and growing again copies again; the
	// other does not notice.
	require.NoError(t, b.Truncate(6))
	idb = f.grow(t, b, idb[:6], 5)
	verify(t, a, ida)
	verify(t, b, idb)
	require.NoError(t, p.check(a, b))

	// A fork of a fork, then closing the original.
	c, err := b.Fork()
	require.NoError(t, err)
	a.Close()
	verify(t, b, idb)
	verify(t, c, idb)
	require.NoError(t, p.check(a, b, c))
	idc := f.grow(t, c, idb, 4)
	verify(t, b, idb)
	verify(t, c, idc)
	b.Close()
	verify(t, c, idc)
	require.NoError(t, p.check(a, b, c))
	st := p.Stats()
	assert.Equal(t, 0, st.SharedBlocks)
	assert.Equal(t, st.Blocks-c.Blocks(), st.FreeBlocks)
	c.Close()
	assert.Equal(t, 20, p.Stats().FreeBlocks, "every block is free once the last user closes")
	require.NoError(t, p.check())
}

// TestForkFullBlock: when the shared last block is full, growing needs no copy.
func TestForkFullBlock(t *testing.T) {
	p := newPool(t, 1, 1, 2, 4, 6)
	var f filler
	a := p.NewSeq()
	defer a.Close()
	ids := f.grow(t, a, nil, 8)
	b, err := a.Fork()
	require.NoError(t, err)
	defer b.Close()
	ida := f.grow(t, a, ids, 1)
	idb := f.grow(t, b, ids, 1)
	assert.Equal(t, 2, p.Stats().SharedBlocks)
	assert.Equal(t, 2, p.Stats().FreeBlocks)
	verify(t, a, ida)
	verify(t, b, idb)
	require.NoError(t, p.check(a, b))
}

// TestForkAfterOtherCloses: when the other holder of a shared block closes first, the
// block is no longer shared and Grow writes into it without copying.
func TestForkAfterOtherCloses(t *testing.T) {
	p := newPool(t, 1, 1, 2, 4, 4)
	var f filler
	a := p.NewSeq()
	defer a.Close()
	ids := f.grow(t, a, nil, 6)
	b, err := a.Fork()
	require.NoError(t, err)
	b.Close()
	free := p.Stats().FreeBlocks
	ids = f.grow(t, a, ids, 1)
	assert.Equal(t, free, p.Stats().FreeBlocks, "no copy")
	verify(t, a, ids)
	require.NoError(t, p.check(a, b))
}

func TestMove(t *testing.T) {
	p := newPool(t, 2, 2, 3, 4, 10)
	var f filler
	a := p.NewSeq()
	defer a.Close()
	ids := f.grow(t, a, nil, 10)
	require.NoError(t, a.Move(1, 9))
	ids[1] = ids[9]
	require.NoError(t, a.Move(2, 2))
	verify(t, a, ids)

	b, err := a.Fork()
	require.NoError(t, err)
	defer b.Close()
	free := p.Stats().FreeBlocks
	require.NoError(t, b.Move(5, 0)) // copies block 1 of b
	idb := append([]uint32(nil), ids...)
	idb[5] = idb[0]
	assert.Equal(t, free-1, p.Stats().FreeBlocks)
	require.NoError(t, b.Move(6, 1)) // block 1 is b's now: no copy
	idb[6] = idb[1]
	assert.Equal(t, free-1, p.Stats().FreeBlocks)
	verify(t, a, ids)
	verify(t, b, idb)
	require.NoError(t, p.check(a, b))
}

func TestRetain(t *testing.T) {
	for _, c := range []struct {
		name    string
		bs      int
		prefix  int     // positions before the tree
		tree    int     // positions of the tree draft
		keep    []int32 // offsets into the tree to keep
		forkAt  int     // fork the sequence after this many prefix positions; -1 for no fork
		forkAll bool    // fork after the tree was grown (the tree itself is shared)
	}{
		{"chain prefix", 4, 5, 6, []int32{0, 1, 2}, -1, false},
		{"nothing", 4, 5, 6, nil, -1, false},
		{"everything", 4, 5, 6, []int32{0, 1, 2, 3, 4, 5}, -1, false},
		{"one jump", 4, 5, 6, []int32{0, 3, 5}, -1, false},
		{"skip root", 4, 5, 6, []int32{2}, -1, false},
		{"across blocks", 4, 3, 13, []int32{1, 4, 8, 12}, -1, false},
		{"from zero", 4, 0, 9, []int32{0, 5, 7, 8}, -1, false},
		{"block size 1", 1, 3, 7, []int32{0, 2, 6}, -1, false},
		{"block size 16", 16, 30, 20, []int32{0, 4, 9, 19}, -1, false},
		{"forked prefix", 4, 6, 10, []int32{0, 3, 7, 9}, 6, false},
		{"forked mid-block", 4, 6, 10, []int32{1, 2, 7}, 5, false},
		{"forked tree", 4, 6, 10, []int32{0, 3, 7, 9}, 16, true},
		{"forked tree, keep prefix", 4, 6, 10, []int32{0, 1}, 16, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newPool(t, 2, 2, 3, c.bs, 64)
			var f filler
			a := p.NewSeq()
			defer a.Close()
			var other *Seq
			var otherIDs []uint32
			ids := f.grow(t, a, nil, c.prefix)
			if c.forkAt >= 0 && !c.forkAll {
				// Another sequence shares the first forkAt positions and writes its own tail.
				var err error
				other, err = a.Fork()
				require.NoError(t, err)
				require.NoError(t, other.Truncate(c.forkAt))
				otherIDs = f.grow(t, other, append([]uint32(nil), ids[:c.forkAt]...), 3)
			}
			ids = f.grow(t, a, ids, c.tree)
			if c.forkAll {
				var err error
				other, err = a.Fork()
				require.NoError(t, err)
				otherIDs = append([]uint32(nil), ids...)
			}
			if other != nil {
				defer other.Close()
			}
			require.NoError(t, a.Retain(c.prefix, c.keep))
			want := append([]uint32(nil), ids[:c.prefix]...)
			for _, k := range c.keep {
				want = append(want, ids[c.prefix+int(k)])
			}
			verify(t, a, want)
			if other != nil {
				verify(t, other, otherIDs)
			}
			require.NoError(t, p.check(a, other))
			// The sequence grows on normally afterwards.
			want = f.grow(t, a, want, 5)
			verify(t, a, want)
			if other != nil {
				verify(t, other, otherIDs)
			}
			require.NoError(t, p.check(a, other))
		})
	}
}

func TestBadArguments(t *testing.T) {
	p := newPool(t, 2, 2, 3, 4, 10)
	var f filler
	s := p.NewSeq()
	defer s.Close()
	ids := f.grow(t, s, nil, 6)
	for _, c := range []struct {
		name string
		op   func() error
		msg  string
	}{
		{"Grow negative", func() error { return s.Grow(-1) }, "Grow(-1)"},
		{"Grow overflow", func() error { return s.Grow(int(^uint(0) >> 1)) }, "overflows"},
		{"Truncate negative", func() error { return s.Truncate(-1) }, "Truncate(-1)"},
		{"Truncate beyond", func() error { return s.Truncate(7) }, "Truncate(7): n must be in [0, 6]"},
		{"Move dst", func() error { return s.Move(6, 0) }, "dst must be in [0, 6)"},
		{"Move src", func() error { return s.Move(0, -1) }, "src must be in [0, 6)"},
		{"Retain from negative", func() error { return s.Retain(-1, nil) }, "from=-1"},
		{"Retain from beyond", func() error { return s.Retain(7, nil) }, "from must be in [0, 6]"},
		{"Retain offset beyond", func() error { return s.Retain(4, []int32{0, 2}) }, "keep[1] = 2, must be in [0, 2)"},
		{"Retain offset negative", func() error { return s.Retain(4, []int32{-1}) }, "keep[0] = -1"},
		{"Retain not ascending", func() error { return s.Retain(2, []int32{0, 2, 2}) }, "keep[2] = 2 does not follow"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := p.Stats()
			err := c.op()
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.msg)
			assert.Equal(t, before, p.Stats())
			verify(t, s, ids)
		})
	}
	require.NoError(t, s.Grow(0))
	assert.Equal(t, 6, s.Len())
	require.NoError(t, s.Truncate(6))
	verify(t, s, ids)

	// Row and Block document their preconditions; breaking them panics with a message.
	for _, c := range []struct {
		name string
		f    func()
	}{
		{"Row pos", func() { s.Row(0, 0, 6) }},
		{"Row negative pos", func() { s.Row(0, 0, -1) }},
		{"Row layer", func() { s.Row(2, 0, 0) }},
		{"Row head", func() { s.Row(0, 2, 0) }},
		{"Block index", func() { s.Block(0, 0, 2) }},
		{"Block layer", func() { s.Block(-1, 0, 0) }},
	} {
		assert.PanicsWithValue(t, panicMessage(c.f), c.f, c.name)
		assert.Contains(t, panicMessage(c.f), "out of range", c.name)
	}
}

func panicMessage(f func()) (msg string) {
	defer func() { msg, _ = recover().(string) }()
	f()
	return ""
}

func TestClosed(t *testing.T) {
	p := newPool(t, 1, 1, 2, 4, 4)
	s := p.NewSeq()
	require.NoError(t, s.Grow(5))
	s.Close()
	s.Close() // idempotent
	assert.Equal(t, 4, p.Stats().FreeBlocks)
	assert.Equal(t, 0, s.Len())
	assert.Equal(t, 0, s.Blocks())
	for name, err := range map[string]error{
		"Grow":     s.Grow(1),
		"Truncate": s.Truncate(0),
		"Move":     s.Move(0, 0),
		"Retain":   s.Retain(0, nil),
	} {
		assert.ErrorIs(t, err, ErrClosed, name)
	}
	f, err := s.Fork()
	assert.ErrorIs(t, err, ErrClosed)
	assert.Nil(t, f)
	assert.Contains(t, panicMessage(func() { s.Row(0, 0, 0) }), "closed sequence")

	var zero Seq
	assert.ErrorIs(t, zero.Grow(1), ErrClosed, "the zero Seq is closed")
	zero.Close()
	require.NoError(t, p.check(s, &zero))
}

// TestGrowAllocs: growing by one token and writing it does not allocate in the steady
// state, including when a new block is taken from the pool.
func TestGrowAllocs(t *testing.T) {
	p := newPool(t, 4, 2, 8, 16, 64)
	s := p.NewSeq()
	defer s.Close()
	const max = 1000
	require.NoError(t, s.Grow(max)) // size the block table once
	require.NoError(t, s.Truncate(0))
	var id uint32
	allocs := testing.AllocsPerRun(5000, func() {
		if s.Len() == max {
			if err := s.Truncate(0); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Grow(1); err != nil {
			t.Fatal(err)
		}
		id++
		write(s, s.Len()-1, id)
	})
	assert.Zero(t, allocs)

	// Retain of a short chain after a Grow does not allocate either.
	keep := []int32{0, 2, 3}
	require.NoError(t, s.Truncate(0))
	allocs = testing.AllocsPerRun(100, func() {
		n := s.Len()
		if err := s.Grow(5); err != nil {
			t.Fatal(err)
		}
		if err := s.Retain(n, keep); err != nil {
			t.Fatal(err)
		}
		if s.Len() > max-5 {
			if err := s.Truncate(0); err != nil {
				t.Fatal(err)
			}
		}
	})
	assert.Zero(t, allocs)
}

func TestErrorsWrap(t *testing.T) {
	p := newPool(t, 1, 1, 1, 1, 1)
	s := p.NewSeq()
	defer s.Close()
	err := s.Grow(2)
	assert.True(t, errors.Is(err, ErrOutOfMemory))
	assert.False(t, errors.Is(err, ErrClosed))
}

// TestTransposedKeys runs the same writes, forks, growth, moves and retains on a pool
// with slot-major keys and one with dimension-major keys: every key and value must
// read back the same, and the transposed keys must sit where Block's doc says.
func TestTransposedKeys(t *testing.T) {
	const layers, heads, hd = 2, 3, 8
	pools := [2]*Pool{}
	for i, tr := range []bool{false, true} {
		p, err := NewPool(Config{Layers: layers, KVHeads: heads, HeadDim: hd, BlockSize: 4, Budget: 1 << 20, KeysTransposed: tr})
		require.NoError(t, err)
		pools[i] = p
	}
	val := func(pos, l, h, d int, key bool) float32 {
		x := float32(pos*1000 + l*100 + h*10 + d)
		if key {
			return -x
		}
		return x
	}
	write := func(s *Seq, from, to int) {
		for pos := from; pos < to; pos++ {
			for l := range layers {
				for h := range heads {
					k := make([]float32, hd)
					for d := range k {
						k[d] = val(pos, l, h, d, true)
					}
					s.SetKey(l, h, pos, k)
					_, v := s.Row(l, h, pos)
					for d := range v {
						v[d] = val(pos, l, h, d, false)
					}
				}
			}
		}
	}
	var seqs [2][2]*Seq
	for i, p := range pools {
		a := p.NewSeq()
		require.NoError(t, a.Grow(10))
		write(a, 0, 10)
		b, err := a.Fork()
		require.NoError(t, err)
		require.NoError(t, b.Grow(5)) // copies the shared, partly filled last block
		write(b, 10, 15)
		require.NoError(t, a.Retain(3, []int32{0, 2, 5, 6}))
		require.NoError(t, b.Move(1, 13))
		seqs[i] = [2]*Seq{a, b}
	}
	for j := range 2 {
		slot, tr := seqs[0][j], seqs[1][j]
		require.Equal(t, slot.Len(), tr.Len())
		for pos := range slot.Len() {
			for l := range layers {
				for h := range heads {
					k0, k1 := make([]float32, hd), make([]float32, hd)
					slot.Key(l, h, pos, k0)
					tr.Key(l, h, pos, k1)
					require.Equal(t, k0, k1, "seq %d key of position %d, layer %d, head %d", j, pos, l, h)
					krow, v0 := slot.Row(l, h, pos)
					require.Equal(t, k0, krow)
					none, v1 := tr.Row(l, h, pos)
					require.Nil(t, none)
					require.Equal(t, v0, v1, "seq %d value of position %d", j, pos)
					kb, _ := tr.Block(l, h, pos/4)
					for d := range hd {
						require.Equal(t, k1[d], kb[d*4+pos%4])
					}
				}
			}
		}
	}
	// a kept positions 0-2 and 3+{0, 2, 5, 6}; b has position 13 at 1.
	k := make([]float32, hd)
	seqs[1][0].Key(1, 2, 5, k)
	require.Equal(t, val(8, 1, 2, 0, true), k[0])
	seqs[1][1].Key(0, 0, 1, k)
	require.Equal(t, val(13, 0, 0, 0, true), k[0])
}
