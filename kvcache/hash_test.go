package kvcache

import (
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tracked is a pool and every sequence a test opened in it, for Pool.check.
type tracked struct {
	p   *Pool
	all []*Seq
}

func newTracked(t *testing.T, bs, blocks int) *tracked {
	p, _ := newPool(t, bs, blocks)
	return &tracked{p: p}
}

// seqOf returns a new sequence grown by tokens in one Grow.
func (tr *tracked) seqOf(t *testing.T, tokens []int32) *Seq {
	t.Helper()
	return tr.add(t, tr.p.NewSeq(), tokens)
}

// add tracks s, grows it by tokens and closes it when the test ends.
func (tr *tracked) add(t *testing.T, s *Seq, tokens []int32) *Seq {
	t.Helper()
	tr.all = append(tr.all, s)
	t.Cleanup(s.Close)
	require.NoError(t, s.Grow(tokens))
	return s
}

func (tr *tracked) check(t *testing.T) {
	t.Helper()
	require.NoError(t, tr.p.check(tr.all...))
}

// hashes returns the hash of every full block of s, and checks that the block after
// them has none.
func hashes(t *testing.T, s *Seq) []uint64 {
	t.Helper()
	var out []uint64
	for i := range s.Blocks() + 1 {
		h, ok := s.BlockHash(i)
		full := (i+1)*s.pool.cfg.BlockSize <= s.Len()
		require.Equal(t, full, ok, "block %d of %d positions", i, s.Len())
		if !ok {
			require.Zero(t, h)
			break
		}
		out = append(out, h)
	}
	return out
}

// seq returns the tokens lo, lo+1, …, hi-1.
func seq(lo, hi int32) []int32 {
	var out []int32
	for x := lo; x < hi; x++ {
		out = append(out, x)
	}
	return out
}

func cat(parts ...[]int32) []int32 { return slices.Concat(parts...) }

func TestBlockHash(t *testing.T) {
	p := newTracked(t, 4, 64)
	a := p.seqOf(t, seq(1, 11)) // blocks 0, 1 full; block 2 holds 2
	ha := hashes(t, a)
	require.Len(t, ha, 2)
	assert.NotEqual(t, ha[0], ha[1])
	for _, i := range []int{-1, 2, 3, 100, math.MinInt} {
		h, ok := a.BlockHash(i)
		assert.False(t, ok, "block %d", i)
		assert.Zero(t, h, "block %d", i)
	}

	// The same tokens in another sequence hash alike; so does a fork, also after it
	// grows on its own.
	assert.Equal(t, ha, hashes(t, p.seqOf(t, seq(1, 11))))
	b, err := a.Fork()
	require.NoError(t, err)
	p.add(t, b, nil)
	assert.Equal(t, ha, hashes(t, b))
	require.NoError(t, b.Grow(seq(100, 102)))
	hb := hashes(t, b)
	require.Len(t, hb, 3)
	assert.Equal(t, ha, hb[:2])
	assert.Equal(t, ha, hashes(t, a), "the fork's growth does not change the original")

	// A different token anywhere in or before a block changes its hash, and only the
	// hashes of that block and the ones after it.
	other := p.seqOf(t, cat(seq(1, 6), []int32{-6}, seq(7, 11)))
	ho := hashes(t, other)
	assert.Equal(t, ha[0], ho[0])
	assert.NotEqual(t, ha[1], ho[1])
	first := p.seqOf(t, cat([]int32{0}, seq(2, 11)))
	hf := hashes(t, first)
	assert.NotEqual(t, ha[0], hf[0])
	assert.NotEqual(t, ha[1], hf[1], "the hash of a block covers every token before it")

	// A hash depends on the tokens' order and on every byte of each token.
	assert.NotEqual(t, ha[0], hashes(t, p.seqOf(t, []int32{2, 1, 3, 4}))[0])
	seen := map[uint64][]int32{}
	for _, x := range []int32{0, 1, 1 << 8, 1 << 16, 1 << 24, -1, math.MinInt32, math.MaxInt32} {
		tokens := []int32{7, x, 7, 7}
		h := hashes(t, p.seqOf(t, tokens))[0]
		require.NotContains(t, seen, h, "tokens %v hash like %v", tokens, seen[h])
		seen[h] = tokens
	}

	// The sequence's own pool and block size are all that count: another pool of the
	// same block size agrees, one of another block size has other blocks.
	q := newTracked(t, 4, 4)
	assert.Equal(t, ha, hashes(t, q.seqOf(t, seq(1, 11))))
	r := newTracked(t, 2, 8)
	hr := hashes(t, r.seqOf(t, seq(1, 11)))
	require.Len(t, hr, 5)
	assert.NotEqual(t, ha[0], hr[1], "a block of 4 is not two blocks of 2")
	p.check(t)
}

// TestBlockHashWays: the hash of a prefix does not depend on how the sequence came to
// hold it, nor on which blocks were hashed before.
func TestBlockHashWays(t *testing.T) {
	p := newTracked(t, 4, 64)
	want := seq(10, 23) // 13 tokens: 3 full blocks
	ref := hashes(t, p.seqOf(t, want))
	require.Len(t, ref, 3)

	ways := map[string]func(t *testing.T) *Seq{
		"one by one": func(t *testing.T) *Seq {
			s := p.seqOf(t, nil)
			for _, x := range want {
				require.NoError(t, s.Grow([]int32{x}))
				s.BlockHash(s.Len()/4 - 1) // hash each block as it fills
			}
			return s
		},
		"uneven pieces": func(t *testing.T) *Seq {
			s := p.seqOf(t, want[:3])
			require.NoError(t, s.Grow(want[3:9]))
			require.NoError(t, s.Grow(want[9:]))
			return s
		},
		"truncated and regrown": func(t *testing.T) *Seq {
			s := p.seqOf(t, cat(want[:6], seq(-9, -1)))
			hashes(t, s)
			require.NoError(t, s.Truncate(6))
			require.NoError(t, s.Grow(want[6:]))
			return s
		},
		"truncated at a block boundary": func(t *testing.T) *Seq {
			s := p.seqOf(t, cat(want[:8], seq(-9, -1)))
			hashes(t, s)
			require.NoError(t, s.Truncate(8))
			require.NoError(t, s.Grow(want[8:]))
			return s
		},
		"retained from a draft": func(t *testing.T) *Seq {
			// want[5:] interleaved with rejected draft tokens, hashed before the Retain.
			s := p.seqOf(t, want[:5])
			var keep []int32
			for i, x := range want[5:] {
				require.NoError(t, s.Grow([]int32{-100 - int32(i), x}))
				keep = append(keep, int32(2*i+1))
			}
			hashes(t, s)
			require.NoError(t, s.Retain(5, keep))
			return s
		},
		"forked": func(t *testing.T) *Seq {
			s := p.seqOf(t, want[:7])
			hashes(t, s)
			f, err := s.Fork()
			require.NoError(t, err)
			p.add(t, f, nil)
			require.NoError(t, s.Grow(seq(-5, 0)))
			require.NoError(t, f.Grow(want[7:]))
			return f
		},
	}
	for name, way := range ways {
		t.Run(name, func(t *testing.T) {
			s := way(t)
			assert.Equal(t, want, s.Tokens())
			assert.Equal(t, ref, hashes(t, s))
			p.check(t)
		})
	}
}

// TestBlockHashChanges: Truncate and Retain drop the hashes of the blocks they change,
// and keep those of the blocks before.
func TestBlockHashChanges(t *testing.T) {
	p := newTracked(t, 4, 64)
	a := p.seqOf(t, seq(1, 13)) // 3 full blocks
	h := hashes(t, a)
	require.Len(t, h, 3)

	require.NoError(t, a.Truncate(12))
	assert.Equal(t, h, hashes(t, a))
	require.NoError(t, a.Truncate(8))
	assert.Equal(t, h[:2], hashes(t, a), "truncating at a block boundary keeps the full blocks' hashes")
	require.NoError(t, a.Truncate(6))
	assert.Equal(t, h[:1], hashes(t, a), "block 1 is no longer full")
	require.NoError(t, a.Grow([]int32{70, 80}))
	h1 := hashes(t, a)
	require.Len(t, h1, 2)
	assert.Equal(t, h[0], h1[0])
	assert.NotEqual(t, h[1], h1[1], "block 1 holds other tokens now")
	assert.Equal(t, h1, hashes(t, p.seqOf(t, []int32{1, 2, 3, 4, 5, 6, 70, 80})))
	require.NoError(t, a.Grow([]int32{7, 8}))
	require.NoError(t, a.Truncate(8))
	require.NoError(t, a.Grow(seq(9, 13)))
	assert.Equal(t, h1, hashes(t, a)[:2])

	// Retain changes block 1 (positions 5 …) and drops block 2.
	b := p.seqOf(t, seq(1, 17)) // 4 full blocks
	hb := hashes(t, b)
	require.NoError(t, b.Retain(5, []int32{0, 3, 4, 9, 10}))
	assert.Equal(t, cat(seq(1, 7), []int32{9, 10, 15, 16}), b.Tokens())
	h2 := hashes(t, b)
	require.Len(t, h2, 2)
	assert.Equal(t, hb[0], h2[0])
	assert.NotEqual(t, hb[1], h2[1])
	assert.Equal(t, h2, hashes(t, p.seqOf(t, b.Tokens())))

	// A Retain that moves nothing keeps every hash before the new length.
	c := p.seqOf(t, seq(1, 17))
	hc := hashes(t, c)
	require.NoError(t, c.Retain(6, []int32{0, 1, 2, 3}))
	assert.Equal(t, hc[:2], hashes(t, c))
	// Nor does a Retain whose first move lies in a later block change an earlier one.
	d := p.seqOf(t, seq(1, 17))
	hd := hashes(t, d)
	require.NoError(t, d.Retain(2, []int32{0, 1, 2, 3, 4, 5, 7, 8, 10, 11, 12}))
	assert.Equal(t, cat(seq(1, 9), []int32{10, 11, 13, 14, 15}), d.Tokens())
	h3 := hashes(t, d)
	require.Len(t, h3, 3)
	assert.Equal(t, hd[:2], h3[:2])
	assert.NotEqual(t, hd[2], h3[2])
	assert.Equal(t, hashes(t, p.seqOf(t, d.Tokens())), h3)
	p.check(t)
}

// TestBlockHashHugeIndex checks that BlockHash of a huge block index says "not full"
// rather than overflowing (i+1)·BlockSize and running past the tokens.
func TestBlockHashHugeIndex(t *testing.T) {
	p := newTracked(t, 4, 4)
	s := p.seqOf(t, seq(1, 9))
	for _, i := range []int{math.MaxInt, math.MaxInt/4 + 1, 1 << 62} {
		require.NotPanics(t, func() {
			_, ok := s.BlockHash(i)
			assert.False(t, ok, "block %d", i)
		}, "BlockHash(%d)", i)
	}
	p.check(t)
}

// TestTokens: Tokens follow Grow, Truncate, Retain and Fork, and a fork's tokens are its
// own.
func TestTokens(t *testing.T) {
	p, _ := newPool(t, 4, 16)
	a := p.NewSeq()
	defer a.Close()
	assert.Empty(t, a.Tokens())
	require.NoError(t, a.Grow([]int32{5, 6, 7}))
	require.NoError(t, a.Grow([]int32{8}))
	require.NoError(t, a.Grow(nil))
	assert.Equal(t, []int32{5, 6, 7, 8}, a.Tokens())
	in := []int32{9, 10, 11}
	require.NoError(t, a.Grow(in))
	in[0] = -1
	assert.Equal(t, []int32{5, 6, 7, 8, 9, 10, 11}, a.Tokens(), "Grow copies the tokens")

	b, err := a.Fork()
	require.NoError(t, err)
	defer b.Close()
	assert.Equal(t, a.Tokens(), b.Tokens())
	require.NoError(t, b.Truncate(2))
	require.NoError(t, b.Grow([]int32{-2, -3, -4}))
	assert.Equal(t, []int32{5, 6, -2, -3, -4}, b.Tokens())
	assert.Equal(t, []int32{5, 6, 7, 8, 9, 10, 11}, a.Tokens(), "the fork's growth does not reach the original")
	require.NoError(t, a.Truncate(3))
	require.NoError(t, a.Grow([]int32{100}))
	assert.Equal(t, []int32{5, 6, 7, 100}, a.Tokens())
	assert.Equal(t, []int32{5, 6, -2, -3, -4}, b.Tokens(), "nor the original's the fork")

	require.NoError(t, a.Grow([]int32{20, 21, 22, 23, 24}))
	require.NoError(t, a.Retain(4, []int32{1, 4}))
	assert.Equal(t, []int32{5, 6, 7, 100, 21, 24}, a.Tokens(), "Retain moves the tokens with the data")
	require.NoError(t, a.Retain(0, []int32{0, 2, 5}))
	assert.Equal(t, []int32{5, 7, 24}, a.Tokens())
	require.NoError(t, a.Retain(1, nil))
	assert.Equal(t, []int32{5}, a.Tokens())
	assert.Equal(t, []int32{5, 6, -2, -3, -4}, b.Tokens())
	require.NoError(t, p.check(a, b))
}
