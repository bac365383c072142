package kvcache

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// holesOf is the number of leading Hole entries of s's table, as a backend reads it.
func holesOf(s *Seq) int {
	n := 0
	for _, b := range s.Table() {
		if b != Hole {
			break
		}
		n++
	}
	return n
}

// TestReleaseBefore releases, step after step, the blocks before a position of a
// sequence of 22 positions in blocks of 4: whole blocks only, never back, Len, tokens
// and hashes unchanged, the released positions without a slot, the rest intact.
func TestReleaseBefore(t *testing.T) {
	for _, c := range []struct {
		name             string
		release          []int // ReleaseBefore(pos) in turn
		released, holes  int
		freeBlocks, held int
	}{
		{"nothing", []int{0}, 0, 0, 2, 6},
		{"within the first block", []int{3}, 0, 0, 2, 6},
		{"one block", []int{4}, 4, 1, 3, 5},
		{"mid-block rounds down", []int{13}, 12, 3, 5, 3},
		{"the whole length", []int{22}, 20, 5, 7, 1},
		{"never back", []int{13, 5, 0}, 12, 3, 5, 3},
		{"step by step", []int{4, 8, 9, 16}, 16, 4, 6, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, _ := newPool(t, 4, 8)
			var f filler
			s := p.NewSeq()
			defer s.Close()
			ids := f.grow(t, s, nil, 22)
			before := hashes(t, s)
			for _, pos := range c.release {
				require.NoError(t, s.ReleaseBefore(pos))
				require.NoError(t, p.check(s))
			}
			assert.Equal(t, 22, s.Len())
			assert.Equal(t, 6, s.Blocks())
			assert.Equal(t, c.held, s.HeldBlocks())
			assert.Equal(t, c.released, s.Released())
			assert.Equal(t, c.holes, holesOf(s))
			assert.Equal(t, c.freeBlocks, p.Stats().FreeBlocks)
			assert.Equal(t, int64(8-c.freeBlocks)*testBlockBytes, p.Stats().InUseBytes)
			assert.Equal(t, before, hashes(t, s), "the tokens, and so the hashes, stay")
			verify(t, s, ids)
			for pos := range c.released {
				assert.Equal(t, Hole, s.Slot(pos), "position %d", pos)
			}
			// The sequence grows on as before.
			ids = f.grow(t, s, ids, 7)
			verify(t, s, ids)
			require.NoError(t, p.check(s))
		})
	}
}

// TestReleaseBadArguments: a position outside [0, Len()] or a closed sequence is
// refused, and nothing changes.
func TestReleaseBadArguments(t *testing.T) {
	p, _ := newPool(t, 4, 8)
	var f filler
	s := p.NewSeq()
	f.grow(t, s, nil, 10)
	books := snapshot(p, s)
	require.Error(t, s.ReleaseBefore(-1))
	require.Error(t, s.ReleaseBefore(11))
	require.Equal(t, books, snapshot(p, s))
	s.Close()
	require.ErrorIs(t, s.ReleaseBefore(0), ErrClosed)
}

// TestReleaseTruncate truncates a sequence into and below its released positions and
// grows it again: the released block that the new length ends in is given a fresh
// block, its positions before the new length stay released, and the rest is written
// as usual.
func TestReleaseTruncate(t *testing.T) {
	for _, c := range []struct {
		name                 string
		truncate             int
		released, holes      int // after the truncation
		grownHoles, grownLen int // after growing by 7
	}{
		{"above the released positions", 14, 12, 3, 3, 21},
		{"to the released boundary", 12, 12, 3, 3, 19},
		{"into a released block", 10, 10, 3, 2, 17},
		{"to a released block's start", 8, 8, 2, 2, 15},
		{"to nothing", 0, 0, 0, 0, 7},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, _ := newPool(t, 4, 8)
			var f filler
			s := p.NewSeq()
			defer s.Close()
			ids := f.grow(t, s, nil, 18)
			require.NoError(t, s.ReleaseBefore(12))
			require.NoError(t, s.Truncate(c.truncate))
			require.NoError(t, p.check(s))
			assert.Equal(t, c.released, s.Released())
			assert.Equal(t, c.holes, holesOf(s))
			ids = ids[:c.truncate]
			verify(t, s, ids)
			ids = f.grow(t, s, ids, 7)
			require.NoError(t, p.check(s))
			assert.Equal(t, c.grownLen, s.Len())
			assert.Equal(t, c.released, s.Released(), "growing releases nothing and restores nothing")
			assert.Equal(t, c.grownHoles, holesOf(s))
			verify(t, s, ids)
		})
	}
}

// TestReleaseShared: a block another sequence holds stays with it when one of them
// releases it; the other keeps its data and can release its own references later.
func TestReleaseShared(t *testing.T) {
	p, _ := newPool(t, 4, 10)
	var f filler
	a := p.NewSeq()
	ids := f.grow(t, a, nil, 14)
	b, err := a.Fork()
	require.NoError(t, err)
	require.NoError(t, a.ReleaseBefore(9))
	st := p.Stats()
	assert.Equal(t, 6, st.FreeBlocks, "b still holds the two blocks a released")
	assert.Equal(t, 2, st.SharedBlocks, "blocks 2 and 3 are still shared")
	verify(t, a, ids)
	verify(t, b, ids)
	require.NoError(t, p.check(a, b))
	require.NoError(t, b.ReleaseBefore(14))
	assert.Equal(t, 8, p.Stats().FreeBlocks, "blocks 0 and 1 are nobody's now")
	assert.Equal(t, 1, p.Stats().SharedBlocks)
	verify(t, a, ids)
	verify(t, b, ids)
	// Both write on into the shared last block: each copies or owns it.
	idsA := f.grow(t, a, ids, 3)
	idsB := f.grow(t, b, ids, 3)
	verify(t, a, idsA)
	verify(t, b, idsB)
	require.NoError(t, p.check(a, b))
	a.Close()
	b.Close()
	require.NoError(t, p.check(a, b))
	assert.Equal(t, 10, p.Stats().FreeBlocks)
}

// TestReleaseFork: a fork of a sequence with released blocks has the same holes, takes
// no block, grows and closes on its own; closing either gives back only the blocks
// each holds.
func TestReleaseFork(t *testing.T) {
	p, st := newPool(t, 4, 10)
	var f filler
	a := p.NewSeq()
	ids := f.grow(t, a, nil, 18)
	require.NoError(t, a.ReleaseBefore(8))
	free, copies := p.Stats().FreeBlocks, st.copies
	b, err := a.Fork()
	require.NoError(t, err)
	assert.Equal(t, free, p.Stats().FreeBlocks)
	assert.Equal(t, copies, st.copies)
	assert.Equal(t, a.Table(), b.Table())
	assert.Equal(t, 8, b.Released())
	verify(t, b, ids)
	require.NoError(t, p.check(a, b))
	idsB := f.grow(t, b, ids, 5)
	verify(t, b, idsB)
	verify(t, a, ids)
	a.Close()
	require.NoError(t, p.check(a, b))
	verify(t, b, idsB)
	b.Close()
	assert.Equal(t, 10, p.Stats().FreeBlocks)
}

// TestReleaseRetain: Retain moves positions the sequence holds (also when the blocks
// before are released) and refuses, changing nothing, to move a released one.
func TestReleaseRetain(t *testing.T) {
	p, _ := newPool(t, 4, 10)
	var f filler
	s := p.NewSeq()
	defer s.Close()
	ids := f.grow(t, s, nil, 20)
	require.NoError(t, s.ReleaseBefore(8))
	books := snapshot(p, s)
	err := s.Retain(6, []int32{0, 2})
	require.ErrorIs(t, err, ErrReleased, "position 7 would move")
	require.Equal(t, books, snapshot(p, s))
	require.NoError(t, s.Retain(6, []int32{0, 1, 3}), "positions 6 and 7 stay where they are; 9 moves to 8")
	verify(t, s, append(ids[:8:8], ids[9]))
	require.NoError(t, s.Retain(4, nil), "no move: a truncation")
	assert.Equal(t, 4, s.Released())
	require.NoError(t, p.check(s))
}

// TestReleasePublish: Publish never offers a released block, nor one refilled after a
// truncation into the released positions; a published block released goes to the
// prefix cache, where a new sequence finds it again — from block 0 on, so with no
// holes.
func TestReleasePublish(t *testing.T) {
	p, _ := newPool(t, 4, 12)
	var f filler
	a := p.NewSeq()
	ids := f.grow(t, a, nil, 16)
	a.Publish() // blocks 0 … 3
	require.NoError(t, a.ReleaseBefore(8))
	assert.Equal(t, 2, p.Stats().CachedBlocks, "released published blocks are parked")
	ids = f.grow(t, a, ids, 8)
	a.Publish() // blocks 4 and 5
	require.NoError(t, p.check(a))

	b := p.NewSeq()
	require.Equal(t, 24, b.Reuse(toks(ids)), "blocks 0 and 1 from the cache, 2 … 5 shared with a")
	assert.Zero(t, holesOf(b))
	assert.Zero(t, b.Released())
	verify(t, b, ids)
	assert.Zero(t, p.Stats().CachedBlocks)
	require.NoError(t, p.check(a, b))
	b.Close()

	// A block refilled after a truncation into released positions holds no whole
	// prefix: it is not published, nor anything after it.
	c := p.NewSeq()
	cids := f.grow(t, c, nil, 12)
	require.NoError(t, c.ReleaseBefore(12))
	require.NoError(t, c.Truncate(6))
	cids = f.grow(t, c, cids[:6], 10) // block 1 refilled from position 6 on
	c.Publish()
	d := p.NewSeq()
	assert.Zero(t, d.Reuse(toks(cids)), "c's blocks 0 and 1 are not whole; nothing matches from block 0")
	require.NoError(t, p.check(a, c, d))
	a.Close()
	c.Close()
	d.Close()
	require.NoError(t, p.check())
	assert.Equal(t, 12, p.Stats().FreeBlocks)
}

// TestReleaseLockAndAllocs: releasing nothing new takes no lock; releasing takes it
// once; neither allocates.
func TestReleaseLockAndAllocs(t *testing.T) {
	p, _ := newPool(t, 4, 64)
	var f filler
	s := p.NewSeq()
	defer s.Close()
	f.grow(t, s, nil, 40)
	require.NoError(t, s.ReleaseBefore(8))
	assertNoLock(t, p, func() error { return s.ReleaseBefore(10) })
	assertLocks(t, p, func() error { return s.ReleaseBefore(12) })
	tok := []int32{7}
	allocs := testing.AllocsPerRun(100, func() {
		if err := s.Grow(tok); err != nil {
			t.Fatal(err)
		}
		if err := s.ReleaseBefore(s.Len() - 20); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, allocs)
}
