package kvcache

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPrefixCache publishes a sequence's full blocks and checks that later sequences
// find them by their tokens — while it runs and after it closed (cached) — share them
// copy on write, do not find a prefix that differs, and that cached blocks are given
// up, least recently used first, when the pool needs memory.
func TestPrefixCache(t *testing.T) {
	p, _ := newPool(t, 4, 8)
	var f filler
	a := p.NewSeq()
	ids := f.grow(t, a, nil, 14) // blocks 0, 1, 2 full, 3 partial
	assert.Zero(t, p.NewSeq().Reuse(toks(ids)), "nothing published yet")
	a.Publish()
	require.NoError(t, p.check(a))

	b := p.NewSeq()
	require.Equal(t, 12, b.Reuse(toks(ids)), "the three full blocks")
	verify(t, b, ids[:12])
	assert.Equal(t, 3, p.Stats().SharedBlocks)
	// b writes after the shared prefix into blocks of its own; a is unchanged.
	ids2 := f.grow(t, b, ids[:12], 3)
	verify(t, b, ids2)
	verify(t, a, ids)
	require.NoError(t, p.check(a, b))

	// A different second block: only the first is found.
	other := append(append([]uint32(nil), ids[:4]...), 999, 998, 997, 996)
	c := p.NewSeq()
	assert.Equal(t, 4, c.Reuse(toks(other)))
	c.Close()

	// After both close, the blocks stay cached and are found again.
	a.Close()
	b.Close()
	st := p.Stats()
	assert.Equal(t, 3, st.CachedBlocks)
	assert.Equal(t, st.Blocks, st.FreeBlocks, "cached blocks count as free")
	d := p.NewSeq()
	require.Equal(t, 12, d.Reuse(toks(ids)))
	verify(t, d, ids[:12])
	require.NoError(t, p.check(d))
	d.Close()

	// Filling the pool gives up the cached blocks: the least recently used first.
	e := p.NewSeq()
	f.grow(t, e, nil, 5*4) // 5 blocks: 5 free ones (8 − 3 cached)
	assert.Equal(t, 3, p.Stats().CachedBlocks)
	f.grow(t, e, nil, 4) // one more: the oldest cached block (the prompt's first) goes
	assert.Equal(t, 2, p.Stats().CachedBlocks)
	require.NoError(t, p.check(e))
	g := p.NewSeq()
	assert.Zero(t, g.Reuse(toks(ids)), "the first block was given up, so nothing matches")
	g.Close()
	e.Close()
	hits, lookups := p.Stats().PrefixHits, p.Stats().PrefixLookups
	assert.Positive(t, hits)
	assert.Greater(t, lookups, hits)
}

// TestPrefixCacheWrites checks that a published block a sequence writes into again —
// by truncating into it and growing, or by Retain moving into it — leaves the cache
// (held alone) or is copied first (shared), so that no one finds contents that
// changed.
func TestPrefixCacheWrites(t *testing.T) {
	p, _ := newPool(t, 4, 12)
	var f filler
	a := p.NewSeq()
	ids := f.grow(t, a, nil, 8)
	a.Publish()
	// Truncating into block 1 and growing writes into it: it leaves the cache.
	require.NoError(t, a.Truncate(6))
	ids = f.grow(t, a, ids[:6], 2)
	b := p.NewSeq()
	assert.Equal(t, 4, b.Reuse(toks(ids)), "block 0 only: block 1 changed")
	verify(t, b, ids[:4])
	b.Close()

	// A Retain that moves into a published block shared by another copies it.
	a.Publish()
	c := p.NewSeq()
	require.Equal(t, 8, c.Reuse(toks(ids)))
	ids = f.grow(t, a, ids, 4)
	require.NoError(t, a.Retain(2, []int32{1, 3, 5, 7}))
	verify(t, c, ids[:8]) // c keeps what it reused
	require.NoError(t, p.check(a, c))
	c.Close()
	a.Close()
}

// TestPrefixCacheSalt checks that a salted sequence's blocks are found again only under
// the same salt — not by an unsalted sequence nor under another salt — that an
// unsalted publisher's blocks are not found under a salt, that a fork keeps the salt,
// and that only an empty sequence takes one.
func TestPrefixCacheSalt(t *testing.T) {
	unsalted := func(*Seq) error { return nil }
	salted := func(v uint64) func(*Seq) error { return func(s *Seq) error { return s.Salt(v) } }
	tests := []struct {
		name        string
		publisher   func(*Seq) error
		reader      func(*Seq) error
		want        int
		viaFork     bool
		description string
	}{
		{"same salt", salted(7), salted(7), 8, false, "found"},
		{"same salt, published by a fork", salted(7), salted(7), 8, true, "the fork publishes under the salt"},
		{"other salt", salted(7), salted(8), 0, false, "another salt finds nothing"},
		{"salted publisher, unsalted reader", salted(7), unsalted, 0, false, "no salt finds nothing"},
		{"unsalted publisher, salted reader", unsalted, salted(0), 0, false, "salt 0 is a salt"},
		{"neither", unsalted, unsalted, 8, false, "found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, _ := newPool(t, 4, 12)
			var f filler
			a := p.NewSeq()
			require.NoError(t, tt.publisher(a))
			pub := a
			if tt.viaFork {
				fk, err := a.Fork()
				require.NoError(t, err)
				defer fk.Close()
				pub = fk
			}
			ids := f.grow(t, pub, nil, 10)
			pub.Publish()
			b := p.NewSeq()
			require.NoError(t, tt.reader(b))
			assert.Equal(t, tt.want, b.Reuse(toks(ids)), tt.description)
			if tt.want > 0 {
				verify(t, b, ids[:tt.want])
			}
			seqs := []*Seq{a, b}
			if tt.viaFork {
				seqs = append(seqs, pub)
			}
			require.NoError(t, p.check(seqs...))
			b.Close()
			a.Close()
		})
	}
	p, _ := newPool(t, 4, 4)
	var f filler
	s := p.NewSeq()
	f.grow(t, s, nil, 2)
	assert.Error(t, s.Salt(1), "a sequence with positions takes no salt")
	s.Close()
	assert.ErrorIs(t, s.Salt(1), ErrClosed)
}
