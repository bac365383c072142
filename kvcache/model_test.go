package kvcache

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRandomOps drives several sequences of one small pool through many random
// operations and checks them against a reference model (the write id held at each
// position), together with the pool's invariants, after every step. The pool is small
// so that running out of memory is common.
func TestRandomOps(t *testing.T) {
	steps := 4000
	if testing.Short() {
		steps = 500
	}
	for _, c := range []struct {
		bs, blocks int
		seed       uint64
	}{
		{1, 40, 1},
		{3, 16, 2},
		{4, 24, 3},
		{16, 6, 4},
	} {
		t.Run(fmt.Sprintf("block=%d,blocks=%d", c.bs, c.blocks), func(t *testing.T) {
			randomOps(t, c.bs, c.blocks, steps, c.seed)
		})
	}
}

type modelSeq struct {
	s   *Seq
	ids []uint32
}

func randomOps(t *testing.T, bs, blocks, steps int, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x6b76))
	p := newPool(t, 2, 2, 3, bs, blocks)
	var f filler
	var seqs []*modelSeq
	var closed []*Seq
	counts := map[string]int{}
	all := func() []*Seq {
		out := slices.Clone(closed)
		for _, m := range seqs {
			out = append(out, m.s)
		}
		return out
	}
	pick := func() *modelSeq {
		if len(seqs) == 0 || rng.IntN(20) == 0 {
			m := &modelSeq{s: p.NewSeq()}
			seqs = append(seqs, m)
			return m
		}
		return seqs[rng.IntN(len(seqs))]
	}
	// unchanged checks that a failed operation left the pool and every sequence as
	// they were.
	unchanged := func(step int, err error, before Stats) {
		t.Helper()
		require.ErrorIs(t, err, ErrOutOfMemory, "step %d", step)
		require.Equal(t, before, p.Stats(), "step %d: a failed operation changed the pool", step)
	}
	for step := range steps {
		before := p.Stats()
		m := pick()
		n := m.s.Len()
		switch op := rng.IntN(100); {
		case op < 30: // grow and write
			g := rng.IntN(3*bs + 3)
			add := (n+g+bs-1)/bs - m.s.Blocks()
			err := m.s.Grow(g)
			if err != nil {
				unchanged(step, err, before)
				require.Greater(t, add+1, before.FreeBlocks, "step %d: Grow(%d) failed with %d free", step, g, before.FreeBlocks)
				require.Equal(t, n, m.s.Len())
				counts["grow-oom"]++
				break
			}
			require.LessOrEqual(t, add, before.FreeBlocks, "step %d: Grow(%d) succeeded beyond the free blocks", step, g)
			ids := slices.Clip(m.ids)
			for i := range g {
				f.next++
				write(m.s, n+i, f.next)
				ids = append(ids, f.next)
			}
			m.ids = ids
			counts["grow"]++
		case op < 45: // truncate
			k := rng.IntN(n + 1)
			require.NoError(t, m.s.Truncate(k))
			m.ids = m.ids[:k]
			counts["truncate"]++
		case op < 55: // fork
			if len(seqs) >= 8 {
				break
			}
			s, err := m.s.Fork()
			require.NoError(t, err)
			seqs = append(seqs, &modelSeq{s: s, ids: slices.Clip(m.ids)})
			m.ids = slices.Clip(m.ids)
			counts["fork"]++
		case op < 72: // retain a random path of a "tree" grown at from
			from := n - rng.IntN(min(n, 3*bs+2)+1)
			var keep []int32
			for k := range n - from {
				if rng.IntN(2) == 0 {
					keep = append(keep, int32(k))
				}
			}
			err := m.s.Retain(from, keep)
			if err != nil {
				unchanged(step, err, before)
				require.Equal(t, n, m.s.Len())
				counts["retain-oom"]++
				break
			}
			ids := slices.Clone(m.ids[:from])
			for _, k := range keep {
				ids = append(ids, m.ids[from+int(k)])
			}
			m.ids = ids
			counts["retain"]++
		case op < 80: // move
			if n == 0 {
				break
			}
			dst, src := rng.IntN(n), rng.IntN(n)
			err := m.s.Move(dst, src)
			if err != nil {
				unchanged(step, err, before)
				counts["move-oom"]++
				break
			}
			m.ids = slices.Clone(m.ids)
			m.ids[dst] = m.ids[src]
			counts["move"]++
		case op < 88: // close
			m.s.Close()
			i := slices.Index(seqs, m)
			seqs = slices.Delete(seqs, i, i+1)
			closed = append(closed, m.s)
			require.ErrorIs(t, m.s.Grow(1), ErrClosed)
			require.ErrorIs(t, m.s.Truncate(0), ErrClosed)
			require.ErrorIs(t, m.s.Retain(0, nil), ErrClosed)
			_, err := m.s.Fork()
			require.ErrorIs(t, err, ErrClosed)
			counts["close"]++
		default: // invalid arguments are refused and change nothing
			var err error
			switch rng.IntN(4) {
			case 0:
				err = m.s.Grow(-1 - rng.IntN(5))
			case 1:
				err = m.s.Truncate(n + 1 + rng.IntN(5))
			case 2:
				err = m.s.Retain(n+1, nil)
			case 3:
				err = m.s.Retain(0, []int32{int32(n)})
			}
			require.Error(t, err)
			require.Equal(t, before, p.Stats())
			counts["invalid"]++
		}
		require.NoError(t, p.check(all()...), "step %d", step)
		used := 0
		for _, m := range seqs {
			verify(t, m.s, m.ids)
			used += m.s.Blocks()
		}
		st := p.Stats()
		require.LessOrEqual(t, st.Blocks-st.FreeBlocks, used, "step %d: blocks in use beyond the tables", step)
	}
	for _, m := range seqs {
		m.s.Close()
	}
	require.NoError(t, p.check(all()...))
	assert.Equal(t, blocks, p.Stats().FreeBlocks)
	t.Logf("operations: %v", counts)
	if steps >= 1000 {
		for _, op := range []string{"grow", "grow-oom", "truncate", "fork", "retain", "move", "close"} {
			assert.Positive(t, counts[op], "operation %s never ran", op)
		}
	}
}
