package kvcache

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// zeros returns n tokens for tests that look only at the block counts.
func zeros(n int) []int32 { return make([]int32, n) }

func TestNewPool(t *testing.T) {
	const bb = 100
	for _, c := range []struct {
		name   string
		cfg    Config
		nilSt  bool
		blocks int
		err    []string // substrings of the error, nil for success
	}{
		{"default block size", Config{BlockBytes: bb, Budget: 10 * bb}, false, 10, nil},
		{"budget rounds down", Config{BlockBytes: bb, Budget: 11*bb - 1}, false, 10, nil},
		{"exactly one block", Config{BlockBytes: bb, Budget: bb}, false, 1, nil},
		{"explicit block size", Config{BlockSize: 3, BlockBytes: 96, Budget: 1000}, false, 1000 / 96, nil},
		{"budget below one block", Config{BlockBytes: bb, Budget: bb - 1}, false,
			0, []string{"budget of 99 bytes", "one block of 100 bytes"}},
		{"zero budget", Config{BlockBytes: bb}, false, 0, []string{"Config.Budget is 0 bytes"}},
		{"negative budget", Config{BlockBytes: bb, Budget: -5}, false, 0, []string{"Config.Budget is -5 bytes"}},
		{"zero block bytes", Config{Budget: 1 << 20}, false, 0, []string{"Config.BlockBytes is 0"}},
		{"negative block bytes", Config{BlockBytes: -3, Budget: 1 << 20}, false, 0, []string{"Config.BlockBytes is -3"}},
		{"negative block size", Config{BlockSize: -16, BlockBytes: bb, Budget: 1 << 20}, false, 0, []string{"Config.BlockSize is -16"}},
		{"nil storage", Config{BlockBytes: bb, Budget: 1 << 20}, true, 0, []string{"nil storage"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var storage Storage = newTestStorage(1, 1)
			if c.nilSt {
				storage = nil
			}
			p, err := NewPool(c.cfg, storage)
			if c.err != nil {
				require.Error(t, err)
				assert.Nil(t, p)
				for _, s := range c.err {
					assert.Contains(t, err.Error(), s)
				}
				if !c.nilSt {
					_, berr := c.cfg.Blocks()
					assert.EqualError(t, berr, err.Error(), "Config.Blocks refuses it alike")
				}
				return
			}
			require.NoError(t, err)
			n, err := c.cfg.Blocks()
			require.NoError(t, err)
			assert.Equal(t, c.blocks, n)
			bs := c.cfg.BlockSize
			if bs == 0 {
				bs = DefaultBlockSize
			}
			st := p.Stats()
			assert.Equal(t, Stats{Blocks: c.blocks, FreeBlocks: c.blocks, BlockSize: bs, BlockBytes: c.cfg.BlockBytes,
				ResidentBytes: int64(c.blocks) * c.cfg.BlockBytes, Budget: c.cfg.Budget}, st)
			assert.LessOrEqual(t, int64(st.Blocks)*st.BlockBytes, c.cfg.Budget)
			want := c.cfg
			want.BlockSize = bs
			assert.Equal(t, want, p.Config())
			require.NoError(t, p.check())
		})
	}
}

// TestConfigBlocks: a pool never has more blocks than int32 slots can address.
func TestConfigBlocks(t *testing.T) {
	for _, c := range []struct {
		bs   int
		want int
	}{
		{0, math.MaxInt32 / DefaultBlockSize},
		{1, math.MaxInt32},
		{16, math.MaxInt32 / 16},
		{1 << 29, 3},
		{1 << 30, 1},
	} {
		n, err := Config{BlockSize: c.bs, BlockBytes: 1, Budget: math.MaxInt64}.Blocks()
		require.NoError(t, err)
		assert.Equal(t, c.want, n, "block size %d", c.bs)
		bs := int64(max(c.bs, 1))
		if c.bs == 0 {
			bs = DefaultBlockSize
		}
		assert.LessOrEqual(t, int64(n)*bs-1, int64(math.MaxInt32), "the last slot is an int32")
	}
	// Below the cap the budget decides.
	n, err := Config{BlockSize: 1 << 29, BlockBytes: 10, Budget: 25}.Blocks()
	require.NoError(t, err)
	assert.Equal(t, 2, n)
}

func TestStats(t *testing.T) {
	p, _ := newPool(t, 4, 10)
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
			require.NoError(t, a.Grow(zeros(step.n)))
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
		assert.Equal(t, 10*bb, st.ResidentBytes, "a storage that does not say holds the whole pool")
		assert.Equal(t, int64(10*testBlockBytes), st.Budget)
		assert.Equal(t, 4, st.BlockSize)
	}
}

func TestStatsFork(t *testing.T) {
	p, _ := newPool(t, 4, 10)
	a := p.NewSeq()
	require.NoError(t, a.Grow(zeros(15))) // 4 blocks
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

// TestStatsResident: a storage that knows its resident memory reports it through
// Stats, whatever the books hold.
func TestStatsResident(t *testing.T) {
	st := &residentStorage{testStorage: *newTestStorage(4, 8)}
	p, err := NewPool(Config{BlockSize: 4, BlockBytes: 256, Budget: 8 * 256}, st)
	require.NoError(t, err)
	st.pool = p
	assert.Zero(t, p.Stats().ResidentBytes)

	var f filler
	a := p.NewSeq()
	defer a.Close()
	ids := f.grow(t, a, nil, 6)
	st.resident = 2 * 256 // as a lazy storage would after its first writes
	s := p.Stats()
	assert.Equal(t, int64(2*256), s.ResidentBytes)
	assert.Equal(t, int64(2*256), s.InUseBytes)
	assert.Equal(t, 6, s.FreeBlocks)

	// The books keep working on it: a fork copies its shared last block through it.
	b, err := a.Fork()
	require.NoError(t, err)
	defer b.Close()
	idb := f.grow(t, b, ids, 1)
	verify(t, a, ids)
	verify(t, b, idb)
	assert.Equal(t, 1, st.copies)
	require.NoError(t, a.Truncate(0))
	st.resident = 12345
	assert.Equal(t, int64(12345), p.Stats().ResidentBytes, "Stats reports the storage's number, not the books'")
	require.NoError(t, p.check(a, b))
}

func TestRoundTrip(t *testing.T) {
	for _, bs := range []int{1, 4, 5, 16} {
		t.Run(fmt.Sprintf("block=%d", bs), func(t *testing.T) {
			p, _ := newPool(t, bs, 64)
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
			assert.Empty(t, s.Tokens())
			ids = f.grow(t, s, ids[:0], 5)
			verify(t, s, ids)
			require.NoError(t, p.check(s))
		})
	}
}

// TestSlot pins the documented address: block·BlockSize + offset, with blocks handed
// out from 0 up, and that the slots of a fork are the original's until it copies.
func TestSlot(t *testing.T) {
	p, _ := newPool(t, 4, 8)
	a := p.NewSeq()
	defer a.Close()
	require.NoError(t, a.Grow(zeros(10)))
	assert.Equal(t, []int32{0, 1, 2}, a.Table())
	for pos := range 10 {
		assert.Equal(t, int32(pos), a.Slot(pos), "position %d", pos)
	}
	b, err := a.Fork()
	require.NoError(t, err)
	defer b.Close()
	assert.Equal(t, a.Table(), b.Table())
	require.NoError(t, b.Grow(zeros(1))) // copies block 2 into the next free block, 3
	assert.Equal(t, []int32{0, 1, 3}, b.Table())
	assert.Equal(t, []int32{0, 1, 2}, a.Table())
	for pos := range 11 {
		assert.Equal(t, b.Table()[pos/4]*4+int32(pos%4), b.Slot(pos))
	}
	assert.Equal(t, int32(3*4+2), b.Slot(10))
	assert.Equal(t, int32(2*4+1), a.Slot(9))

	// Freed blocks are handed out again, most recently freed first.
	require.NoError(t, a.Truncate(4)) // frees block 2
	require.NoError(t, a.Grow(zeros(4)))
	assert.Equal(t, []int32{0, 2}, a.Table())
	require.NoError(t, p.check(a, b))
}

func TestOutOfMemory(t *testing.T) {
	p, _ := newPool(t, 4, 5)
	var f filler
	a, b := p.NewSeq(), p.NewSeq()
	defer a.Close()
	ida := f.grow(t, a, nil, 10) // 3 blocks
	idb := f.grow(t, b, nil, 6)  // 2 blocks: the pool is full
	before := p.Stats()
	require.Equal(t, 0, before.FreeBlocks)

	books := snapshot(p, a, b)
	err := a.Grow(zeros(3)) // 10 → 13 needs one more block
	require.ErrorIs(t, err, ErrOutOfMemory)
	assert.Contains(t, err.Error(), "growing from 10 to 13 positions needs 1 blocks, 0 of 5 are free")
	assert.Contains(t, err.Error(), fmt.Sprintf("budget %d bytes, %d bytes per block", p.Config().Budget, p.Config().BlockBytes))
	assert.Equal(t, 10, a.Len())
	assert.Equal(t, before, p.Stats())
	assert.Equal(t, books, snapshot(p, a, b), "a failed Grow changes nothing")
	verify(t, a, ida)

	// Growing within the last block needs nothing.
	ida = f.grow(t, a, ida, 2)
	verify(t, a, ida)

	// A fork whose shared last block would have to be copied also fails cleanly.
	c, err := b.Fork()
	require.NoError(t, err)
	require.NoError(t, c.Truncate(5))
	books = snapshot(p, a, b, c)
	err = c.Grow(zeros(1))
	require.ErrorIs(t, err, ErrOutOfMemory)
	assert.Contains(t, err.Error(), "growing from 5 to 6 positions needs 1 blocks, 0 of 5 are free")
	assert.Equal(t, books, snapshot(p, a, b, c))
	verify(t, c, idb[:5])
	require.NoError(t, p.check(a, b, c))
	err = c.Retain(4, []int32{})
	require.NoError(t, err, "retaining nothing moves nothing")
	require.Equal(t, 4, c.Len())
	books = snapshot(p, a, b, c)
	err = c.Retain(0, []int32{1})
	require.ErrorIs(t, err, ErrOutOfMemory)
	assert.Contains(t, err.Error(), "Retain: copying shared blocks 0…0 of a sequence of 4 positions needs 1 blocks, 0 of 5 are free")
	assert.Equal(t, 4, c.Len(), "a failed Retain does not truncate")
	assert.Equal(t, books, snapshot(p, a, b, c), "a failed Retain changes nothing")
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
	err = a.Grow(zeros(1000))
	require.ErrorIs(t, err, ErrOutOfMemory)
	assert.Contains(t, err.Error(), "needs 250 blocks")
	verify(t, a, ida)
}

func TestForkCopyOnWrite(t *testing.T) {
	p, st := newPool(t, 4, 20)
	var f filler
	a := p.NewSeq()
	prefix := f.grow(t, a, nil, 10) // blocks 0, 1 full; block 2 holds 2 of 4
	b, err := a.Fork()
	require.NoError(t, err)
	assert.Equal(t, 17, p.Stats().FreeBlocks, "fork copies nothing")
	assert.Equal(t, 3, p.Stats().SharedBlocks)
	assert.Zero(t, st.copies)
	verify(t, b, prefix)

	// a writes into the shared, partly filled last block: it gets its own copy of the
	// two positions there. Then b holds the old block alone and writes into it.
	ida := f.grow(t, a, prefix, 1)
	assert.Equal(t, 16, p.Stats().FreeBlocks, "a copied the last block")
	assert.Equal(t, 2, p.Stats().SharedBlocks)
	assert.Equal(t, 1, st.copies)
	assert.Equal(t, 2, st.slots)
	idb := f.grow(t, b, prefix, 3)
	assert.Equal(t, 15, p.Stats().FreeBlocks, "b copied nothing, it took a fourth block")
	assert.Equal(t, 2, p.Stats().SharedBlocks)
	assert.Equal(t, 1, st.copies)
	verify(t, a, ida)
	verify(t, b, idb)
	require.NoError(t, p.check(a, b))
	assert.Equal(t, a.Table()[:2], b.Table()[:2], "the full blocks of the prefix are still shared")
	assert.NotEqual(t, a.Table()[2], b.Table()[2])

	// Growing across block boundaries after the copy allocates fresh blocks only.
	ida = f.grow(t, a, ida, 9)
	idb = f.grow(t, b, idb, 2)
	assert.Equal(t, 1, st.copies)
	verify(t, a, ida)
	verify(t, b, idb)
	require.NoError(t, p.check(a, b))

	// Truncating one back into the shared prefix and growing again copies again; the
	// other does not notice.
	require.NoError(t, b.Truncate(6))
	idb = f.grow(t, b, idb[:6], 5)
	assert.Equal(t, 2, st.copies)
	assert.Equal(t, 4, st.slots)
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
	s := p.Stats()
	assert.Equal(t, 0, s.SharedBlocks)
	assert.Equal(t, s.Blocks-c.Blocks(), s.FreeBlocks)
	c.Close()
	assert.Equal(t, 20, p.Stats().FreeBlocks, "every block is free once the last user closes")
	require.NoError(t, p.check())
}

// TestForkFullBlock: when the shared last block is full, growing needs no copy.
func TestForkFullBlock(t *testing.T) {
	p, st := newPool(t, 4, 6)
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
	assert.Zero(t, st.copies)
	verify(t, a, ida)
	verify(t, b, idb)
	require.NoError(t, p.check(a, b))
}

// TestForkAfterOtherCloses: when the other holder of a shared block closes first, the
// block is no longer shared and Grow writes into it without copying.
func TestForkAfterOtherCloses(t *testing.T) {
	p, st := newPool(t, 4, 4)
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
	assert.Zero(t, st.copies)
	verify(t, a, ids)
	require.NoError(t, p.check(a, b))
	// The block is known to be a's own now: growing on takes no lock.
	assertNoLock(t, p, func() error { return a.Grow(zeros(1)) })
}

// assertNoLock runs f while the test holds the pool's lock and fails unless f returns
// without waiting for it.
func assertNoLock(t *testing.T, p *Pool, f func() error) {
	t.Helper()
	done := make(chan error, 1)
	p.mu.Lock()
	go func() { done <- f() }()
	select {
	case err := <-done:
		p.mu.Unlock()
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		p.mu.Unlock()
		require.NoError(t, <-done)
		t.Fatal("waited for the pool's lock")
	}
}

// assertLocks runs f while the test holds the pool's lock and fails unless f waits for
// it.
func assertLocks(t *testing.T, p *Pool, f func() error) {
	t.Helper()
	done := make(chan error, 1)
	p.mu.Lock()
	go func() { done <- f() }()
	select {
	case <-done:
		p.mu.Unlock()
		t.Fatal("returned without the pool's lock")
	case <-time.After(20 * time.Millisecond):
		p.mu.Unlock()
		require.NoError(t, <-done)
	}
}

// TestGrowLock: Grow within a last block that is known to be the sequence's own takes
// no lock; Grow that needs a block or may have to copy one does.
func TestGrowLock(t *testing.T) {
	p, _ := newPool(t, 4, 8)
	a := p.NewSeq()
	defer a.Close()
	assertLocks(t, p, func() error { return a.Grow(zeros(1)) }) // the first block
	assertNoLock(t, p, func() error { return a.Grow(zeros(3)) })
	assertLocks(t, p, func() error { return a.Grow(zeros(2)) }) // a second block
	b, err := a.Fork()
	require.NoError(t, err)
	defer b.Close()
	assertLocks(t, p, func() error { return a.Grow(zeros(1)) }) // the last block is shared: copy
	assertNoLock(t, p, func() error { return a.Grow(zeros(1)) })
	assertLocks(t, p, func() error { return b.Grow(zeros(1)) }) // b must look, a copied
	assertNoLock(t, p, func() error { return b.Grow(zeros(1)) })
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
		{"forked tree, from zero", 4, 0, 10, []int32{2, 3, 9}, 10, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, st := newPool(t, c.bs, 64)
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
				otherIDs = f.grow(t, other, ids[:c.forkAt], 3)
			}
			ids = f.grow(t, a, ids, c.tree)
			if c.forkAll {
				var err error
				other, err = a.Fork()
				require.NoError(t, err)
				otherIDs = slices.Clone(ids)
			}
			if other != nil {
				defer other.Close()
			}
			copies := st.copies
			require.NoError(t, a.Retain(c.prefix, c.keep))
			want := slices.Clone(ids[:c.prefix])
			for _, k := range c.keep {
				want = append(want, ids[c.prefix+int(k)])
			}
			verify(t, a, want)
			moves := false
			for i, k := range c.keep {
				moves = moves || int(k) != i
			}
			if !moves {
				assert.Equal(t, copies, st.copies, "nothing moves, nothing is copied")
			} else {
				assert.Greater(t, st.copies, copies)
			}
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

// TestRetainCopies: Retain copies each shared destination block once, whole, then
// moves the kept positions within the sequence's own blocks.
func TestRetainCopies(t *testing.T) {
	p, st := newPool(t, 4, 16)
	var f filler
	a := p.NewSeq()
	defer a.Close()
	ids := f.grow(t, a, nil, 14) // blocks 0 … 3, the last holding 2
	b, err := a.Fork()
	require.NoError(t, err)
	defer b.Close()
	free := p.Stats().FreeBlocks
	// Positions 5 … 13 are the draft; keep 5, 7, 12, 13: destinations 6, 7, 8 in
	// blocks 1 and 2, both shared.
	require.NoError(t, a.Retain(5, []int32{0, 2, 7, 8}))
	assert.Equal(t, 2, st.copies, "one copy of the shared blocks, one move")
	assert.Equal(t, 4+4+3, st.slots, "blocks 1 and 2 whole, three moved positions")
	assert.Equal(t, free-2, p.Stats().FreeBlocks, "blocks 1 and 2 copied, block 3 dropped only by a")
	assert.Equal(t, b.Table()[0], a.Table()[0], "block 0 is still shared")
	verify(t, a, append(slices.Clone(ids[:5]), ids[5], ids[7], ids[12], ids[13]))
	verify(t, b, ids)
	require.NoError(t, p.check(a, b))
}

func TestBadArguments(t *testing.T) {
	p, _ := newPool(t, 4, 10)
	var f filler
	s := p.NewSeq()
	defer s.Close()
	ids := f.grow(t, s, nil, 6)
	for _, c := range []struct {
		name string
		op   func() error
		msg  string
	}{
		{"Truncate negative", func() error { return s.Truncate(-1) }, "kvcache: Truncate(-1): n must be in [0, 6]"},
		{"Truncate beyond", func() error { return s.Truncate(7) }, "kvcache: Truncate(7): n must be in [0, 6], the sequence's length"},
		{"Retain from negative", func() error { return s.Retain(-1, nil) }, "kvcache: Retain(from=-1): from must be in [0, 6]"},
		{"Retain from beyond", func() error { return s.Retain(7, nil) }, "from must be in [0, 6], the sequence's length"},
		{"Retain offset beyond", func() error { return s.Retain(4, []int32{0, 2}) }, "kvcache: Retain(from=4): keep[1] = 2, must be in [0, 2)"},
		{"Retain offset negative", func() error { return s.Retain(4, []int32{-1}) }, "keep[0] = -1, must be in [0, 2)"},
		{"Retain not ascending", func() error { return s.Retain(2, []int32{0, 2, 2}) }, "keep[2] = 2 does not follow keep[1] = 2 in ascending order"},
		{"Retain descending", func() error { return s.Retain(2, []int32{3, 1}) }, "keep[1] = 1 does not follow keep[0] = 3"},
		{"Retain from end, offset", func() error { return s.Retain(6, []int32{0}) }, "keep[0] = 0, must be in [0, 0)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := snapshot(p, s)
			err := c.op()
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.msg)
			assert.NotErrorIs(t, err, ErrOutOfMemory)
			assert.NotErrorIs(t, err, ErrClosed)
			assert.Equal(t, before, snapshot(p, s))
			verify(t, s, ids)
		})
	}
	before := snapshot(p, s)
	require.NoError(t, s.Grow(nil))
	require.NoError(t, s.Grow([]int32{}))
	require.NoError(t, s.Truncate(6))
	require.NoError(t, s.Retain(6, nil))
	assert.Equal(t, before, snapshot(p, s), "empty operations change nothing")
	verify(t, s, ids)
}

func TestClosed(t *testing.T) {
	p, _ := newPool(t, 4, 4)
	s := p.NewSeq()
	require.NoError(t, s.Grow(zeros(5)))
	s.BlockHash(0)
	s.Close()
	s.Close() // idempotent
	assert.Equal(t, 4, p.Stats().FreeBlocks)
	assert.Equal(t, 0, s.Len())
	assert.Equal(t, 0, s.Blocks())
	assert.Empty(t, s.Table())
	assert.Empty(t, s.Tokens())
	h, ok := s.BlockHash(0)
	assert.False(t, ok)
	assert.Zero(t, h)
	for _, c := range []struct {
		name string
		err  error
		msg  string
	}{
		{"Grow", s.Grow(zeros(3)), "kvcache: sequence is closed: Grow(3 tokens)"},
		{"Truncate", s.Truncate(0), "kvcache: sequence is closed: Truncate(0)"},
		{"Retain", s.Retain(1, []int32{0, 1}), "kvcache: sequence is closed: Retain(1, 2 offsets)"},
	} {
		assert.ErrorIs(t, c.err, ErrClosed, c.name)
		assert.EqualError(t, c.err, c.msg, c.name)
	}
	f, err := s.Fork()
	assert.ErrorIs(t, err, ErrClosed)
	assert.EqualError(t, err, "kvcache: sequence is closed: Fork")
	assert.Nil(t, f)

	var zero Seq
	assert.ErrorIs(t, zero.Grow(zeros(1)), ErrClosed, "the zero Seq is closed")
	assert.Equal(t, 0, zero.Len())
	zero.Close()
	require.NoError(t, p.check(s, &zero))
}

// TestGrowAllocs: growing by one token and writing it does not allocate in the steady
// state, including when a new block is taken from the pool, and neither do hashing
// the full blocks and retaining a short chain.
func TestGrowAllocs(t *testing.T) {
	p, _ := newPool(t, 16, 64)
	s := p.NewSeq()
	defer s.Close()
	const max = 1000
	require.NoError(t, s.Grow(zeros(max))) // size the block table and tokens once
	for i := range max / 16 {
		s.BlockHash(i) // and the hashes
	}
	require.NoError(t, s.Truncate(0))
	var id uint32
	one := []int32{0}
	allocs := testing.AllocsPerRun(5000, func() {
		if s.Len() == max {
			if err := s.Truncate(0); err != nil {
				t.Fatal(err)
			}
		}
		id++
		one[0] = tok(id)
		if err := s.Grow(one); err != nil {
			t.Fatal(err)
		}
		write(s, s.Len()-1, id)
		if s.Len()%16 == 0 {
			if _, ok := s.BlockHash(s.Len()/16 - 1); !ok {
				t.Fatal("no hash of a full block")
			}
		}
	})
	assert.Zero(t, allocs)
	assert.Equal(t, tok(id), s.Tokens()[s.Len()-1], "the steady state did run")

	// Retain of a short chain after a Grow does not allocate either.
	keep := []int32{0, 2, 3}
	five := zeros(5)
	require.NoError(t, s.Truncate(0))
	allocs = testing.AllocsPerRun(100, func() {
		n := s.Len()
		if err := s.Grow(five); err != nil {
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
	require.NoError(t, p.check(s))
}

func TestErrorsWrap(t *testing.T) {
	p, st := newPool(t, 1, 1)
	s := p.NewSeq()
	defer s.Close()
	err := s.Grow(zeros(2))
	assert.True(t, errors.Is(err, ErrOutOfMemory))
	assert.False(t, errors.Is(err, ErrClosed))
	assert.False(t, errors.Is(err, errStorage))

	p, st = newPool(t, 2, 4)
	a := p.NewSeq()
	defer a.Close()
	require.NoError(t, a.Grow(zeros(1)))
	b, err := a.Fork()
	require.NoError(t, err)
	defer b.Close()
	st.failNext(1)
	err = a.Grow(zeros(1))
	assert.True(t, errors.Is(err, errStorage), "the storage's error is wrapped: %v", err)
	assert.False(t, errors.Is(err, ErrOutOfMemory))
	assert.Contains(t, err.Error(), "kvcache: copying a shared block: ")
}

// TestStorageErrors: when the storage fails to copy, Grow and the copy of shared
// blocks in Retain undo everything: tables, reference counts, free blocks, tokens,
// hashes and length are as they were, and the sequences work on.
func TestStorageErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		op   func(a *Seq) error
		msg  string
	}{
		{"Grow into a shared block", func(a *Seq) error { return a.Grow(zeros(1)) }, "kvcache: copying a shared block"},
		{"Grow into a shared block and two more", func(a *Seq) error { return a.Grow(zeros(10)) }, "kvcache: copying a shared block"},
		{"Retain into shared blocks", func(a *Seq) error { return a.Retain(2, []int32{0, 3, 5}) }, "kvcache: copying shared blocks"},
		{"Retain into the shared last block", func(a *Seq) error { return a.Retain(8, []int32{1}) }, "kvcache: copying shared blocks"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, st := newPool(t, 4, 16)
			var f filler
			a := p.NewSeq()
			defer a.Close()
			ids := f.grow(t, a, nil, 10)
			for i := range 2 {
				a.BlockHash(i)
			}
			b, err := a.Fork()
			require.NoError(t, err)
			defer b.Close()
			before := snapshot(p, a, b)
			stats := p.Stats()
			st.failNext(1)
			err = c.op(a)
			require.ErrorIs(t, err, errStorage)
			assert.Contains(t, err.Error(), c.msg)
			assert.Equal(t, 1, st.failed, "the copy was asked for")
			assert.Equal(t, before.freeSet(), snapshot(p, a, b).freeSet(), "a failed copy changes nothing")
			assert.Equal(t, stats, p.Stats())
			require.NoError(t, p.check(a, b))
			verify(t, a, ids)
			verify(t, b, ids)

			// Without the failure the same operation works.
			require.NoError(t, c.op(a))
			require.NoError(t, p.check(a, b))
			verify(t, b, ids)
		})
	}
}

// TestRetainStorageErrorLength: when the storage fails to move the kept positions,
// Retain returns its error and does not truncate, and the books stay consistent.
func TestRetainStorageErrorLength(t *testing.T) {
	for _, forked := range []bool{false, true} {
		t.Run(fmt.Sprintf("forked=%v", forked), func(t *testing.T) {
			p, st := newPool(t, 4, 16)
			var f filler
			a := p.NewSeq()
			defer a.Close()
			ids := f.grow(t, a, nil, 12)
			var b *Seq
			fail := 1
			if forked {
				var err error
				b, err = a.Fork()
				require.NoError(t, err)
				defer b.Close()
				fail = 2 // the copy of the shared blocks succeeds, the move fails
			}
			st.failNext(fail)
			err := a.Retain(1, []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
			require.ErrorIs(t, err, errStorage)
			assert.Contains(t, err.Error(), "kvcache: moving kept positions")
			// The sequence keeps the positions before the first move, as they were.
			assert.Equal(t, 1, a.Len())
			assert.Equal(t, 1, a.Blocks())
			verify(t, a, ids[:1])
			require.NoError(t, p.check(a, b))
			if b != nil {
				verify(t, b, ids)
			}
		})
	}
}

// TestRetainStorageErrorUndoes checks that a Retain whose copy of shared destination
// blocks the storage fails changes nothing: tokens, hashes, tables and counts.
func TestRetainStorageErrorUndoes(t *testing.T) {
	p, st := newPool(t, 4, 16)
	var f filler
	a := p.NewSeq()
	defer a.Close()
	ids := f.grow(t, a, nil, 12)
	for i := range 3 {
		a.BlockHash(i)
	}
	b, err := a.Fork()
	require.NoError(t, err)
	defer b.Close()
	before := snapshot(p, a, b)
	st.failNext(1)
	err = a.Retain(1, []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
	require.ErrorIs(t, err, errStorage)
	assert.Contains(t, err.Error(), "kvcache: copying shared blocks")
	assert.NoError(t, p.check(a, b))
	assert.Equal(t, toks(ids), a.Tokens())
	assert.Equal(t, before.freeSet(), snapshot(p, a, b).freeSet(), "a failed Retain changed the books")
	verify(t, a, ids)
	verify(t, b, ids)
}
