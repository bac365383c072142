package kvcache

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRandomOps drives several sequences of one small pool through many random
// operations and checks them against a reference model (the write id and the token
// held at each position), together with the pool's invariants and the block hashes,
// after every step. The pool is small so that running out of memory is common, and
// the storage fails now and then.
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

// modelSeq is a sequence and what it should hold: the write id and the token of each
// position, the first position it holds (Released) and its number of released blocks.
type modelSeq struct {
	s     *Seq
	ids   []uint32
	toks  []int32
	start int
	holes int
}

// truncated is what Truncate(n) (or a Retain that ends at n) leaves of the holes.
func (m *modelSeq) truncated(n, bs int) {
	m.ids, m.toks = m.ids[:n], m.toks[:n]
	m.start = min(m.start, n)
	m.holes = min(m.holes, (n+bs-1)/bs)
}

func (m *modelSeq) verify(t *testing.T, step int) {
	t.Helper()
	s, bs := m.s, m.s.pool.cfg.BlockSize
	require.Equal(t, len(m.ids), s.Len(), "step %d: length", step)
	require.Equal(t, (len(m.ids)+bs-1)/bs, s.Blocks(), "step %d: blocks", step)
	require.Equal(t, m.toks, s.Tokens(), "step %d: tokens", step)
	require.Equal(t, m.start, s.Released(), "step %d: released", step)
	require.Equal(t, s.Blocks()-m.holes, s.HeldBlocks(), "step %d: held blocks", step)
	for i, b := range s.Table() {
		require.Equal(t, i < m.holes, b == Hole, "step %d: table entry %d is %d, %d holes", step, i, b, m.holes)
	}
	st := storage(s)
	for pos, id := range m.ids {
		if pos < m.start {
			require.Equal(t, Hole, s.Slot(pos), "step %d: released position %d", step, pos)
			continue
		}
		require.Equal(t, id, st.ids[s.Slot(pos)], "step %d: position %d", step, pos)
	}
}

// hashBook remembers the hash of every token prefix seen: one prefix must always hash
// alike, whichever sequence holds it and however it came to, and two prefixes never.
type hashBook struct {
	byPrefix map[string]uint64
	byHash   map[uint64]string
	buf      []byte
}

func (hb *hashBook) check(t *testing.T, step int, rng *rand.Rand, s *Seq) {
	t.Helper()
	bs := s.pool.cfg.BlockSize
	full := s.Len() / bs
	hb.buf = hb.buf[:0]
	for _, x := range s.Tokens() {
		hb.buf = binary.LittleEndian.AppendUint32(hb.buf, uint32(x))
	}
	// Ask for a random block first, so that the cache fills in uneven steps.
	if full > 0 {
		s.BlockHash(rng.IntN(full))
	}
	for i := range full {
		h, ok := s.BlockHash(i)
		require.True(t, ok, "step %d: block %d of %d positions has no hash", step, i, s.Len())
		prefix := hb.buf[:(i+1)*bs*4]
		if w, ok := hb.byPrefix[string(prefix)]; ok {
			require.Equal(t, w, h, "step %d: block %d: a prefix seen before hashes otherwise", step, i)
		} else {
			hb.byPrefix[string(prefix)] = h
		}
		if w, ok := hb.byHash[h]; ok {
			require.Equal(t, w, string(prefix), "step %d: block %d: two prefixes hash alike", step, i)
		} else {
			hb.byHash[h] = string(prefix)
		}
	}
	_, ok := s.BlockHash(full)
	require.False(t, ok, "step %d: the block after the full ones has a hash", step)
}

// sharedIn counts the blocks lo … hi of s that another sequence holds too (holes
// are nobody's).
func sharedIn(s *Seq, lo, hi int) int {
	p := s.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for i := lo; i <= hi && i < len(s.table); i++ {
		if b := s.table[i]; b != Hole && p.refs[b] > 1 {
			n++
		}
	}
	return n
}

func randomOps(t *testing.T, bs, blocks, steps int, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x6b76))
	p, st := newPool(t, bs, blocks)
	var f filler
	var seqs []*modelSeq
	var closed []*Seq
	hb := &hashBook{byPrefix: map[string]uint64{}, byHash: map[uint64]string{}}
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
	for step := range steps {
		before := p.Stats()
		m := pick()
		n := m.s.Len()
		books := snapshot(p, all()...)
		copies := st.copies
		// unchanged checks that a failed operation left the pool and every sequence as
		// they were; a failed copy may leave the free blocks in another order.
		unchanged := func(err error, what string) {
			t.Helper()
			if errors.Is(err, errStorage) {
				require.Equal(t, books.freeSet(), snapshot(p, all()...).freeSet(), "step %d: a failed %s changed the books", step, what)
			} else {
				require.Equal(t, books, snapshot(p, all()...), "step %d: a failed %s changed the books", step, what)
			}
			require.Equal(t, before, p.Stats(), "step %d: a failed %s changed the pool", step, what)
		}
		// failing arms the storage to fail the k-th copy of the next operation, one
		// time in oneIn; disarm undoes it after the operation.
		failing := func(k, oneIn int) bool {
			if rng.IntN(oneIn) != 0 {
				return false
			}
			st.failNext(k)
			return true
		}
		disarm := func() { st.failIn = 0 }
		switch op := rng.IntN(100); {
		case op < 28: // grow and write
			g := rng.IntN(3*bs + 3)
			add := (n+g+bs-1)/bs - m.s.Blocks()
			cow := g > 0 && n%bs != 0 && sharedIn(m.s, n/bs, n/bs) > 0
			hole := g > 0 && n%bs != 0 && m.holes == m.s.Blocks() // refilled, no copy
			need := add
			if cow || hole {
				need++
			}
			armed := failing(1, 5)
			ids := f.ids(g)
			tokens := toks(ids)
			err := m.s.Grow(tokens)
			disarm()
			switch {
			case need > before.FreeBlocks:
				require.ErrorIs(t, err, ErrOutOfMemory, "step %d: Grow(%d) needs %d blocks, %d are free", step, g, need, before.FreeBlocks)
				unchanged(err, "Grow")
				counts["grow-oom"]++
			case armed && cow:
				require.ErrorIs(t, err, errStorage, "step %d", step)
				unchanged(err, "Grow")
				counts["grow-storage-error"]++
			default:
				require.NoError(t, err, "step %d: Grow(%d) needs %d blocks, %d are free", step, g, need, before.FreeBlocks)
				require.Equal(t, before.FreeBlocks-need, p.Stats().FreeBlocks, "step %d: Grow(%d) took other than %d blocks", step, g, need)
				wantCopies := 0
				if cow {
					wantCopies = 1
				}
				require.Equal(t, wantCopies, st.copies-copies, "step %d: copies of Grow(%d)", step, g)
				for i, id := range ids {
					write(m.s, n+i, id)
				}
				m.ids = append(slices.Clip(m.ids), ids...)
				m.toks = append(slices.Clip(m.toks), tokens...)
				if hole {
					m.holes = n / bs
					counts["grow-into-hole"]++
				}
				counts["grow"]++
			}
		case op < 33: // a new sequence with the tokens of another, grown piece by piece
			src := seqs[rng.IntN(len(seqs))]
			if src == m || len(seqs) >= 8 {
				break
			}
			c := &modelSeq{s: p.NewSeq()}
			seqs = append(seqs, c)
			want := src.toks[:rng.IntN(len(src.toks)+1)]
			for len(c.toks) < len(want) {
				k := 1 + rng.IntN(len(want)-len(c.toks))
				tokens := want[len(c.toks) : len(c.toks)+k]
				if err := c.s.Grow(tokens); err != nil {
					require.ErrorIs(t, err, ErrOutOfMemory, "step %d", step)
					break
				}
				for i := range k {
					f.next++
					write(c.s, len(c.ids), f.next)
					c.ids = append(c.ids, f.next)
					c.toks = append(c.toks, tokens[i])
				}
			}
			counts["copy"]++
		case op < 46: // truncate
			k := rng.IntN(n + 1)
			require.NoError(t, m.s.Truncate(k))
			if k < m.start {
				counts["truncate-into-released"]++
			}
			m.truncated(k, bs)
			counts["truncate"]++
		case op < 55: // fork
			if len(seqs) >= 8 {
				break
			}
			s, err := m.s.Fork()
			require.NoError(t, err)
			require.Equal(t, before.FreeBlocks, p.Stats().FreeBlocks, "step %d: a fork took blocks", step)
			require.Equal(t, copies, st.copies, "step %d: a fork copied", step)
			seqs = append(seqs, &modelSeq{s: s, ids: slices.Clip(m.ids), toks: slices.Clip(m.toks), start: m.start, holes: m.holes})
			m.ids, m.toks = slices.Clip(m.ids), slices.Clip(m.toks)
			counts["fork"]++
		case op < 74: // retain a random path of a "tree" grown at from
			from := n - rng.IntN(min(n, 3*bs+2)+1)
			var keep []int32
			for k := range n - from {
				if rng.IntN(2) == 0 {
					keep = append(keep, int32(k))
				}
			}
			first := len(keep)
			for i, k := range keep {
				if int(k) != i {
					first = i
					break
				}
			}
			moves := first < len(keep)
			if moves && from+first < m.start {
				err := m.s.Retain(from, keep)
				require.ErrorIs(t, err, ErrReleased, "step %d: Retain(%d, %v) moves position %d, released before %d", step, from, keep, from+first, m.start)
				unchanged(err, "Retain")
				counts["retain-released"]++
				break
			}
			need := 0
			if moves {
				need = sharedIn(m.s, (from+first)/bs, (from+len(keep)-1)/bs)
			}
			oneIn := 5
			if need > 0 {
				oneIn = 2 // a copy of shared blocks first: rarer, so fail it more often
			}
			armed := moves && failing(1+rng.IntN(2), oneIn)
			failAt := st.failIn
			err := m.s.Retain(from, keep)
			disarm()
			switch {
			case need > before.FreeBlocks:
				require.ErrorIs(t, err, ErrOutOfMemory, "step %d", step)
				unchanged(err, "Retain")
				require.Equal(t, n, m.s.Len())
				counts["retain-oom"]++
			case armed && failAt == 1 && need > 0:
				// The copy of the shared destination blocks failed: nothing changed.
				require.ErrorIs(t, err, errStorage, "step %d", step)
				unchanged(err, "Retain")
				counts["retain-copy-error"]++
			case armed && (failAt == 1 || failAt == 2 && need > 0):
				// The move failed: the positions before the first move are kept.
				require.ErrorIs(t, err, errStorage, "step %d", step)
				require.Equal(t, from+first, m.s.Len(), "step %d", step)
				m.truncated(from+first, bs)
				counts["retain-move-error"]++
			default:
				require.NoError(t, err, "step %d", step)
				ids := slices.Clone(m.ids[:from])
				tokens := slices.Clone(m.toks[:from])
				for _, k := range keep {
					ids = append(ids, m.ids[from+int(k)])
					tokens = append(tokens, m.toks[from+int(k)])
				}
				m.ids, m.toks = ids, tokens
				m.truncated(len(ids), bs)
				counts["retain"]++
			}
		case op < 84: // close
			m.s.Close()
			i := slices.Index(seqs, m)
			seqs = slices.Delete(seqs, i, i+1)
			closed = append(closed, m.s)
			require.ErrorIs(t, m.s.Grow([]int32{1}), ErrClosed)
			require.ErrorIs(t, m.s.Truncate(0), ErrClosed)
			require.ErrorIs(t, m.s.Retain(0, nil), ErrClosed)
			_, err := m.s.Fork()
			require.ErrorIs(t, err, ErrClosed)
			require.ErrorIs(t, m.s.ReleaseBefore(0), ErrClosed)
			counts["close"]++
		case op < 90: // release the blocks before a position
			pos := rng.IntN(n + 1)
			k := pos / bs
			freed := 0
			if k > m.holes {
				freed = (k - m.holes) - sharedIn(m.s, m.holes, k-1)
			}
			require.NoError(t, m.s.ReleaseBefore(pos), "step %d", step)
			require.Equal(t, before.FreeBlocks+freed, p.Stats().FreeBlocks, "step %d: ReleaseBefore(%d) freed other than %d blocks", step, pos, freed)
			require.Equal(t, copies, st.copies, "step %d: a release copied", step)
			if k > m.holes {
				m.holes, m.start = k, max(m.start, k*bs)
				counts["release"]++
			}
		default: // invalid arguments are refused and change nothing
			var err error
			switch rng.IntN(7) {
			case 0:
				err = m.s.Truncate(-1 - rng.IntN(5))
			case 1:
				err = m.s.Truncate(n + 1 + rng.IntN(5))
			case 2:
				err = m.s.Retain(n+1, nil)
			case 3:
				err = m.s.Retain(0, []int32{int32(n)})
			case 4:
				err = m.s.Retain(0, []int32{0, 0})
			case 5:
				err = m.s.ReleaseBefore(-1 - rng.IntN(5))
			case 6:
				err = m.s.ReleaseBefore(n + 1 + rng.IntN(5))
			}
			require.Error(t, err)
			unchanged(err, "call with invalid arguments")
			counts["invalid"]++
		}
		require.NoError(t, p.check(all()...), "step %d", step)
		used := 0
		for _, m := range seqs {
			m.verify(t, step)
			hb.check(t, step, rng, m.s)
			used += m.s.HeldBlocks()
		}
		s := p.Stats()
		require.LessOrEqual(t, s.Blocks-s.FreeBlocks, used, "step %d: blocks in use beyond the tables", step)
	}
	for _, m := range seqs {
		m.s.Close()
	}
	require.NoError(t, p.check(all()...))
	assert.Equal(t, blocks, p.Stats().FreeBlocks)
	t.Logf("operations: %v; %d prefixes hashed", counts, len(hb.byPrefix))
	if steps >= 1000 {
		for _, op := range []string{"grow", "grow-oom", "copy", "truncate", "fork", "retain", "retain-oom",
			"retain-copy-error", "retain-move-error", "close", "invalid", "release", "retain-released",
			"truncate-into-released"} {
			assert.Positive(t, counts[op], "operation %s never ran", op)
		}
		if bs > 1 {
			assert.Positive(t, counts["grow-storage-error"], "operation grow-storage-error never ran")
			assert.Positive(t, counts["grow-into-hole"], "operation grow-into-hole never ran")
		}
	}
}
