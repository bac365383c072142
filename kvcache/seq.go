package kvcache

import (
	"fmt"
	"math"
	"slices"
)

// Seq is one request's key/value cache: a length and a table of the pool blocks that
// hold its positions. Make one with [Pool.NewSeq] or [Seq.Fork].
//
// A Seq is not safe for concurrent mutation (Grow, Truncate, Move, Retain, Fork,
// Close). While it is not being mutated, any number of goroutines may call Len, Blocks,
// Row and Block. The zero Seq is closed.
type Seq struct {
	pool  *Pool   // nil once closed
	table []int32 // logical block i → pool block; len(table) == ceil(n / BlockSize)
	n     int     // positions held
	// owned: table[owned:] are held by this sequence alone. Nothing else can start to
	// share them (only a Fork of this sequence can), so writes there need no lock.
	// Blocks before owned may be shared; their counts are checked under the lock.
	// Any future way of sharing blocks (a prefix cache, say) must keep this true.
	owned   int
	scratch []int32 // reused by own: pairs of (logical index, old block)
}

// Len returns the number of positions the sequence holds.
func (s *Seq) Len() int { return s.n }

// Blocks returns the number of logical blocks of the sequence: Len() rounded up to a
// multiple of the block size, divided by it.
func (s *Seq) Blocks() int { return len(s.table) }

// Grow extends the sequence by n positions, taking blocks from the pool as needed.
// The contents of the new positions are unspecified: the caller writes them next,
// through [Seq.Row].
//
// On return every block covering a position at or beyond the old length belongs to s
// alone: a partly filled last block that s shares with another sequence (after a
// Fork) is copied first. Grow is all or nothing: when the pool has too few free blocks
// it returns an error wrapping [ErrOutOfMemory] and changes nothing.
//
// Growing within a last block that is known to be s's alone takes no lock. Grow
// allocates Go memory only to extend the block table past its earlier capacity and
// the first time a block of the pool is used, so appending token after token does not
// allocate in the steady state.
func (s *Seq) Grow(n int) error {
	p := s.pool
	if p == nil {
		return fmt.Errorf("%w: Grow(%d)", ErrClosed, n)
	}
	if n <= 0 {
		if n == 0 {
			return nil
		}
		return fmt.Errorf("kvcache: Grow(%d): n must be >= 0", n)
	}
	bs := p.cfg.BlockSize
	if n > math.MaxInt-bs-s.n {
		return fmt.Errorf("kvcache: Grow(%d): length %d + n overflows", n, s.n)
	}
	newLen := s.n + n
	if newLen <= len(s.table)*bs && len(s.table) > s.owned {
		// Fast path: the new positions fit in the last block, which is s's alone.
		s.n = newLen
		return nil
	}
	add := (newLen+bs-1)/bs - len(s.table)
	last := len(s.table) - 1
	// The partly filled last block will be written; it may be shared if it lies
	// before owned. (When add == 0, that is why the fast path was missed.)
	check := s.n%bs != 0 && last < s.owned
	if add > 0 {
		s.table = slices.Grow(s.table, add) // allocate outside the lock
	}
	p.mu.Lock()
	cow := check && p.refs[s.table[last]] > 1
	need := add
	if cow {
		need++
	}
	if free := len(p.free); need > free {
		p.mu.Unlock()
		return p.oom(fmt.Sprintf("growing from %d to %d positions", s.n, newLen), need, free)
	}
	var fresh int32
	if cow {
		fresh = p.alloc()
	}
	for range add {
		s.table = append(s.table, p.alloc())
	}
	p.mu.Unlock()
	for _, b := range s.table[last+1:] {
		p.materialize(b)
	}
	if cow {
		p.materialize(fresh)
		old := s.table[last]
		p.copyBlock(fresh, old, s.n%bs)
		s.table[last] = fresh
		p.mu.Lock()
		p.release(old)
		p.mu.Unlock()
	}
	if check {
		s.owned = last
	}
	s.n = newLen
	return nil
}

// Truncate shrinks the sequence to its first n positions (0 <= n <= Len()), returning
// the blocks it no longer needs: a block goes back to the free list when no sequence
// holds it any more.
func (s *Seq) Truncate(n int) error {
	p := s.pool
	if p == nil {
		return fmt.Errorf("%w: Truncate(%d)", ErrClosed, n)
	}
	if n < 0 || n > s.n {
		return fmt.Errorf("kvcache: Truncate(%d): n must be in [0, %d], the sequence's length", n, s.n)
	}
	s.truncate(n)
	return nil
}

func (s *Seq) truncate(n int) {
	p := s.pool
	keep := (n + p.cfg.BlockSize - 1) / p.cfg.BlockSize
	if keep < len(s.table) {
		p.mu.Lock()
		for _, b := range s.table[keep:] {
			p.release(b)
		}
		p.mu.Unlock()
		s.table = s.table[:keep]
		s.owned = min(s.owned, keep)
	}
	s.n = n
}

// Fork returns a new sequence with the same length and contents as s. The two share
// every block (no data is copied now); each copies a shared block before it first
// writes into it, in Grow, Move or Retain. The new sequence must be closed on its own.
func (s *Seq) Fork() (*Seq, error) {
	p := s.pool
	if p == nil {
		return nil, fmt.Errorf("%w: Fork", ErrClosed)
	}
	t := slices.Clone(s.table)
	p.mu.Lock()
	for _, b := range t {
		p.retain(b)
	}
	p.mu.Unlock()
	s.owned = len(s.table)
	return &Seq{pool: p, table: t, n: s.n, owned: len(t)}, nil
}

// Move copies the keys and values (every layer and head) of position src to position
// dst; both must be below Len(). The block holding dst is copied first if it is
// shared, which can fail with [ErrOutOfMemory]; then nothing is changed.
func (s *Seq) Move(dst, src int) error {
	p := s.pool
	if p == nil {
		return fmt.Errorf("%w: Move(%d, %d)", ErrClosed, dst, src)
	}
	if dst < 0 || dst >= s.n {
		return fmt.Errorf("kvcache: Move(dst=%d, src=%d): dst must be in [0, %d)", dst, src, s.n)
	}
	if src < 0 || src >= s.n {
		return fmt.Errorf("kvcache: Move(dst=%d, src=%d): src must be in [0, %d)", dst, src, s.n)
	}
	if dst == src {
		return nil
	}
	i := dst / p.cfg.BlockSize
	if err := s.own(i, i, "Move"); err != nil {
		return err
	}
	s.move(dst, src)
	return nil
}

// Retain keeps, of the positions from, from+1, …, only those at the offsets keep, in
// that order: for each i, position from+keep[i] moves to from+i, and the sequence is
// then truncated to from+len(keep). keep must be strictly ascending, with
// 0 <= keep[i] < Len()-from, and 0 <= from <= Len(). This is how a runtime keeps one
// accepted root-to-leaf path of a tree draft that was appended at from.
//
// Shared destination blocks are copied first; when that needs more blocks than are
// free, Retain returns an error wrapping [ErrOutOfMemory] and changes nothing.
func (s *Seq) Retain(from int, keep []int32) error {
	p := s.pool
	if p == nil {
		return fmt.Errorf("%w: Retain(%d, %d offsets)", ErrClosed, from, len(keep))
	}
	if from < 0 || from > s.n {
		return fmt.Errorf("kvcache: Retain(from=%d): from must be in [0, %d], the sequence's length", from, s.n)
	}
	first := len(keep) // the first offset that actually moves
	for i, k := range keep {
		if k < 0 || int(k) >= s.n-from {
			return fmt.Errorf("kvcache: Retain(from=%d): keep[%d] = %d, must be in [0, %d)", from, i, k, s.n-from)
		}
		if i > 0 && k <= keep[i-1] {
			return fmt.Errorf("kvcache: Retain(from=%d): keep[%d] = %d does not follow keep[%d] = %d in ascending order", from, i, k, i-1, keep[i-1])
		}
		if first == len(keep) && int(k) != i {
			first = i
		}
	}
	if first < len(keep) {
		// Offsets ascend strictly from 0, so keep[i] >= i, and once keep[i] > i every
		// later offset moves too: the destinations are from+first … from+len(keep)-1.
		bs := p.cfg.BlockSize
		if err := s.own((from+first)/bs, (from+len(keep)-1)/bs, "Retain"); err != nil {
			return err
		}
		// Ascending order is safe: a destination from+i is below every later source
		// from+keep[j] >= from+j > from+i, so no source is overwritten before it is read.
		for i := first; i < len(keep); i++ {
			s.move(from+i, from+int(keep[i]))
		}
	}
	s.truncate(from + len(keep))
	return nil
}

// own makes the logical blocks lo … hi s's alone, copying those that are shared. It is
// all or nothing: when the pool cannot supply the copies it returns an error wrapping
// ErrOutOfMemory and changes nothing. op names the caller for that error.
func (s *Seq) own(lo, hi int, op string) error {
	hi = min(hi, s.owned-1) // blocks from owned on are s's alone already
	if lo > hi {
		return nil
	}
	p := s.pool
	s.scratch = slices.Grow(s.scratch[:0], 2*(hi-lo+1)) // allocate outside the lock
	p.mu.Lock()
	need := 0
	for _, b := range s.table[lo : hi+1] {
		if p.refs[b] > 1 {
			need++
		}
	}
	if free := len(p.free); need > free {
		p.mu.Unlock()
		return p.oom(fmt.Sprintf("%s: copying shared blocks %d…%d of a sequence of %d positions", op, lo, hi, s.n), need, free)
	}
	for i := lo; i <= hi; i++ {
		if b := s.table[i]; p.refs[b] > 1 {
			s.scratch = append(s.scratch, int32(i), b)
			s.table[i] = p.alloc()
		}
	}
	p.mu.Unlock()
	if len(s.scratch) > 0 {
		bs := p.cfg.BlockSize
		for j := 0; j < len(s.scratch); j += 2 {
			i, old := int(s.scratch[j]), s.scratch[j+1]
			p.materialize(s.table[i])
			p.copyBlock(s.table[i], old, min(bs, s.n-i*bs))
		}
		p.mu.Lock()
		for j := 1; j < len(s.scratch); j += 2 {
			p.release(s.scratch[j])
		}
		p.mu.Unlock()
	}
	if hi == s.owned-1 {
		s.owned = lo
	}
	return nil
}

// move copies every run of position src to position dst. dst's block must be s's alone.
func (s *Seq) move(dst, src int) {
	p := s.pool
	bs := p.cfg.BlockSize
	p.copySlots(p.blocks[s.table[dst/bs]], p.blocks[s.table[src/bs]], dst%bs, src%bs, 1)
}

// Row returns the key and value vectors, HeadDim floats each, of position pos for one
// layer and key/value head. The slices alias the pool's memory. With
// [Config.KeysTransposed] a key is not contiguous and k is nil: use [Seq.SetKey] and
// [Seq.Key].
//
// Preconditions (a violation is a programming error and panics): 0 <= layer < Layers,
// 0 <= head < KVHeads, 0 <= pos < Len(). Write through the slices only to positions
// added by the most recent [Seq.Grow], and only before the sequence is forked again:
// Grow made those blocks s's alone, while other positions may sit in blocks that other
// sequences share. Row itself makes no such check and takes no lock.
func (s *Seq) Row(layer, head, pos int) (k, v []float32) {
	p := s.pool
	if uint(pos) >= uint(s.n) || uint(layer) >= uint(p.cfg.Layers) || uint(head) >= uint(p.cfg.KVHeads) {
		s.outOfRange("Row", layer, head, pos)
	}
	bs, hd := p.cfg.BlockSize, p.cfg.HeadDim
	blk := p.blocks[s.table[pos/bs]]
	run := p.runOffset(layer, head)
	voff := run + p.vOffset + pos%bs*hd
	if !p.cfg.KeysTransposed {
		k = blk[run+pos%bs*hd : run+pos%bs*hd+hd : run+pos%bs*hd+hd]
	}
	return k, blk[voff : voff+hd : voff+hd]
}

// keyRun returns the key run of position pos's block for one layer and head, and the
// position's slot in it.
func (s *Seq) keyRun(op string, layer, head, pos int) ([]float32, int) {
	p := s.pool
	if uint(pos) >= uint(s.n) || uint(layer) >= uint(p.cfg.Layers) || uint(head) >= uint(p.cfg.KVHeads) {
		s.outOfRange(op, layer, head, pos)
	}
	blk := p.blocks[s.table[pos/p.cfg.BlockSize]]
	run := p.runOffset(layer, head)
	return blk[run : run+p.runFloats], pos % p.cfg.BlockSize
}

// SetKey writes the key vector (HeadDim floats) of position pos for one layer and
// key/value head, in either layout. The preconditions of [Seq.Row] apply.
func (s *Seq) SetKey(layer, head, pos int, k []float32) {
	run, slot := s.keyRun("SetKey", layer, head, pos)
	p := s.pool
	if !p.cfg.KeysTransposed {
		copy(run[slot*p.cfg.HeadDim:(slot+1)*p.cfg.HeadDim], k)
		return
	}
	for d, x := range k[:p.cfg.HeadDim] {
		run[d*p.cfg.BlockSize+slot] = x
	}
}

// Key copies the key vector of position pos for one layer and key/value head into
// dst (HeadDim floats), in either layout. The preconditions of [Seq.Row] apply.
func (s *Seq) Key(layer, head, pos int, dst []float32) {
	run, slot := s.keyRun("Key", layer, head, pos)
	p := s.pool
	if !p.cfg.KeysTransposed {
		copy(dst, run[slot*p.cfg.HeadDim:(slot+1)*p.cfg.HeadDim])
		return
	}
	for d := range dst[:p.cfg.HeadDim] {
		dst[d] = run[d*p.cfg.BlockSize+slot]
	}
}

// Block returns the keys and values of the i-th logical block of the sequence for one
// layer and key/value head: BlockSize×HeadDim floats each, slot-major, where slot j
// holds position i*BlockSize+j (the keys dimension-major with [Config.KeysTransposed]).
// The last block may reach beyond Len(): callers read
// only its first min(BlockSize, Len()-i*BlockSize) slots; the slots after those hold
// unspecified values. The slices alias the pool's memory and are for reading.
//
// Preconditions (a violation is a programming error and panics): 0 <= layer < Layers,
// 0 <= head < KVHeads, 0 <= i < Blocks().
func (s *Seq) Block(layer, head, i int) (k, v []float32) {
	p := s.pool
	if uint(i) >= uint(len(s.table)) || uint(layer) >= uint(p.cfg.Layers) || uint(head) >= uint(p.cfg.KVHeads) {
		s.outOfRange("Block", layer, head, i)
	}
	rf := p.runFloats
	blk := p.blocks[s.table[i]]
	off := p.runOffset(layer, head)
	voff := off + p.vOffset
	return blk[off : off+rf : off+rf], blk[voff : voff+rf : voff+rf]
}

// outOfRange panics with a description of a Row or Block call whose arguments break
// its preconditions. It is kept out of line so that the callers stay small.
//
//go:noinline
func (s *Seq) outOfRange(op string, layer, head, idx int) {
	if s.pool == nil {
		panic(fmt.Sprintf("kvcache: %s(layer=%d, head=%d, %d) on a closed sequence", op, layer, head, idx))
	}
	c := s.pool.cfg
	panic(fmt.Sprintf("kvcache: %s(layer=%d, head=%d, %d) out of range: %d layers, %d KV heads, %d positions in %d blocks",
		op, layer, head, idx, c.Layers, c.KVHeads, s.n, len(s.table)))
}

// Close returns all of the sequence's blocks to the pool (those no other sequence
// holds become free). It is idempotent; afterwards Grow, Truncate, Move, Retain and
// Fork return errors wrapping [ErrClosed], and Len and Blocks return 0.
func (s *Seq) Close() {
	p := s.pool
	if p == nil {
		return
	}
	p.mu.Lock()
	for _, b := range s.table {
		p.release(b)
	}
	p.mu.Unlock()
	*s = Seq{}
}
