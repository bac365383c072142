package kvcache

import (
	"fmt"
	"math"
	"slices"
)

// Seq is one request's key/value books: the token at each position and the table of
// the pool blocks that hold them. Make one with [Pool.NewSeq] or [Seq.Fork].
//
// A Seq is not safe for concurrent mutation (Grow, Truncate, Retain, ReleaseBefore,
// Fork, Close, and BlockHash, which caches). While it is not being mutated, any number
// of goroutines may call Len, Blocks, HeldBlocks, Released, Table, Slot and Tokens. The
// zero Seq is closed.
type Seq struct {
	pool   *Pool   // nil once closed
	table  []int32 // logical block i → pool block; len(table) == ceil(Len() / BlockSize)
	tokens []int32 // the token at each position
	// owned: table[owned:] are held by this sequence alone. Nothing else can start to
	// share them (only a Fork of this sequence can), so writes there need no lock.
	// Blocks before owned may be shared; their counts are checked under the lock.
	// Any future way of sharing blocks (a prefix cache, say) must keep this true.
	owned  int
	hashes []uint64 // BlockHash of the first len(hashes) blocks, all full
	// salt, when salted, is hashed in front of the first block ([Seq.Salt]).
	salt   uint64
	salted bool
	// published: the first published blocks were offered to the prefix cache.
	published int
	// holes: table[:holes] are [Hole]s, blocks given back by ReleaseBefore (or cut to
	// by a Truncate below them); every later entry is a pool block.
	holes int
	// start: the first position whose keys and values the sequence holds
	// ([Seq.Released]); start <= Len(), and holes·BlockSize <= start unless
	// start == Len().
	start int

	pairs []int32 // scratch: slot copies for the storage
	swaps []int32 // scratch: pairs of (logical index, old block) being replaced
}

// Len returns the number of positions the sequence holds.
func (s *Seq) Len() int { return len(s.tokens) }

// Blocks returns the number of logical blocks of the sequence: Len() rounded up to a
// multiple of the block size, divided by it. Released blocks count: they are the
// table's [Hole]s.
func (s *Seq) Blocks() int { return len(s.table) }

// HeldBlocks returns the number of pool blocks the sequence's table holds: Blocks
// less the released ones.
func (s *Seq) HeldBlocks() int { return len(s.table) - s.holes }

// Table returns the block table: the pool block of each logical block. It is the
// sequence's own and valid until its next mutation; it must not be modified.
//
// A logical block that [Seq.ReleaseBefore] gave back is [Hole] (-1): the holes are
// always the first entries of the table, and every position they cover lies before
// [Seq.Released]. A backend must not read a hole; with sliding-window attention no row
// sees the positions of one.
func (s *Seq) Table() []int32 { return s.table }

// Slot returns the physical slot of position pos (0 <= pos < Len()): where a backend
// stores that position's keys and values. A released position (pos < [Seq.Released])
// has no slot: Slot returns [Hole] for it.
func (s *Seq) Slot(pos int) int32 {
	if pos < s.start {
		return Hole
	}
	bs := s.pool.cfg.BlockSize
	return s.table[pos/bs]*int32(bs) + int32(pos%bs)
}

// Released returns the first position whose keys and values the sequence still holds:
// the positions before it were given back by [Seq.ReleaseBefore] (or cut away by a
// Truncate below them) and have no slot. It is 0 for a sequence that released nothing,
// and at most Len().
func (s *Seq) Released() int { return s.start }

// ReleaseBefore gives back to the pool every block of the sequence whose positions all
// lie before pos (0 <= pos <= Len()): the memory of positions that no row will attend to
// again, as with sliding-window attention. Their table entries become [Hole]s and
// [Seq.Released] moves to the first position of the first block kept (never back). A
// block another sequence shares stays with it; a published one stays in the prefix
// cache, reusable, as when a sequence closes. Len, the tokens and the block hashes are
// unchanged; Truncate, Fork, Publish and Close handle the holes (see each).
//
// Releasing takes the pool's lock only when a block goes back, and never allocates.
func (s *Seq) ReleaseBefore(pos int) error {
	p := s.pool
	if p == nil {
		return fmt.Errorf("%w: ReleaseBefore(%d)", ErrClosed, pos)
	}
	if pos < 0 || pos > len(s.tokens) {
		return fmt.Errorf("kvcache: ReleaseBefore(%d): pos must be in [0, %d], the sequence's length", pos, len(s.tokens))
	}
	n := pos / p.cfg.BlockSize
	if n <= s.holes {
		return nil
	}
	p.releaseAll(s.table[s.holes:n])
	for i := s.holes; i < n; i++ {
		s.table[i] = Hole
	}
	s.holes = n
	s.owned = max(s.owned, n)
	s.start = max(s.start, n*p.cfg.BlockSize)
	return nil
}

// Tokens returns the token at each position. It must not be modified.
func (s *Seq) Tokens() []int32 { return s.tokens }

// Grow extends the sequence by one position for each of tokens, taking blocks from
// the pool as needed. The backend writes the new positions' keys and values next, at
// their slots.
//
// On return every block covering a position at or beyond the old length belongs to s
// alone: a partly filled last block that s shares with another sequence (after a
// Fork) is copied first. Grow is all or nothing: when the pool has too few free blocks
// it returns an error wrapping [ErrOutOfMemory] and changes nothing; when the storage
// fails to copy, its error.
//
// Growing within a last block that is known to be s's alone takes no lock. Grow
// allocates only to extend its slices past their earlier capacity, so appending token
// after token does not allocate in the steady state.
func (s *Seq) Grow(tokens []int32) error {
	p := s.pool
	if p == nil {
		return fmt.Errorf("%w: Grow(%d tokens)", ErrClosed, len(tokens))
	}
	n, old := len(tokens), len(s.tokens)
	if n == 0 {
		return nil
	}
	bs := p.cfg.BlockSize
	if n > math.MaxInt32-old {
		return fmt.Errorf("kvcache: Grow(%d tokens): length %d + n overflows", n, old)
	}
	newLen := old + n
	if newLen > len(s.table)*bs || len(s.table) <= s.owned || len(s.table) <= s.holes {
		if err := s.addBlocks(old, newLen); err != nil {
			return err
		}
	}
	s.tokens = append(s.tokens, tokens...)
	return nil
}

// addBlocks takes the blocks for growing from old to newLen positions, copying a
// shared, partly filled last block first.
func (s *Seq) addBlocks(old, newLen int) error {
	p := s.pool
	bs := p.cfg.BlockSize
	add := (newLen+bs-1)/bs - len(s.table)
	last := len(s.table) - 1
	// The partly filled last block will be written: a hole (after a Truncate into the
	// released positions) gets a block of its own; a block may be shared if it lies
	// before owned.
	hole := old%bs != 0 && last < s.holes
	check := old%bs != 0 && last < s.owned && !hole
	s.table = slices.Grow(s.table, add) // allocate outside the lock
	p.mu.Lock()
	cow := check && p.refs[s.table[last]] > 1
	need := add
	if cow || hole {
		need++
	}
	if free := p.available(); need > free {
		p.mu.Unlock()
		return p.oom(fmt.Sprintf("growing from %d to %d positions", old, newLen), need, free)
	}
	var fresh int32
	if cow {
		fresh = p.alloc()
	}
	if hole {
		s.table[last] = p.alloc()
		s.holes, s.owned = last, min(s.owned, last)
	}
	for range add {
		s.table = append(s.table, p.alloc())
	}
	p.mu.Unlock()
	if cow {
		s.pairs = appendBlockCopy(s.pairs[:0], bs, fresh, s.table[last], old%bs)
		if err := p.storage.Copy(s.pairs); err != nil {
			p.releaseAll(append(s.table[last+1:], fresh))
			s.table = s.table[:last+1]
			return fmt.Errorf("kvcache: copying a shared block: %w", err)
		}
		s.table[last], fresh = fresh, s.table[last]
		p.releaseAll([]int32{fresh})
	}
	if check {
		s.owned = last
	}
	return nil
}

// appendBlockCopy appends the slot copies of the first slots positions of block src
// into block dst.
func appendBlockCopy(pairs []int32, bs int, dst, src int32, slots int) []int32 {
	for j := range int32(slots) {
		pairs = append(pairs, dst*int32(bs)+j, src*int32(bs)+j)
	}
	return pairs
}

// Truncate shrinks the sequence to its first n positions (0 <= n <= Len()), returning
// the blocks it no longer needs: a block goes back to the free list when no sequence
// holds it any more.
//
// n may lie below [Seq.Released]: the sequence then holds no position's data
// (Released becomes n), and growing it again gives the partly filled last block, if it
// was released, a fresh block whose positions before n stay released. Whether the
// positions it will attend to are still there is the model's question, not the
// books'.
func (s *Seq) Truncate(n int) error {
	if s.pool == nil {
		return fmt.Errorf("%w: Truncate(%d)", ErrClosed, n)
	}
	if n < 0 || n > len(s.tokens) {
		return fmt.Errorf("kvcache: Truncate(%d): n must be in [0, %d], the sequence's length", n, len(s.tokens))
	}
	s.truncate(n)
	return nil
}

func (s *Seq) truncate(n int) {
	p := s.pool
	bs := p.cfg.BlockSize
	keep := (n + bs - 1) / bs
	if n%bs != 0 && keep-1 < len(s.table) && keep-1 < len(s.tokens)/bs && keep-1 >= s.holes {
		// The last kept block was full and will be written again.
		p.mu.Lock()
		s.forget(keep - 1)
		p.mu.Unlock()
	}
	if keep < len(s.table) {
		p.releaseAll(s.table[max(keep, s.holes):])
		s.table = s.table[:keep]
		s.owned = min(s.owned, keep)
		s.holes = min(s.holes, keep)
	}
	s.start = min(s.start, n)
	s.tokens = s.tokens[:n]
	s.hashes = s.hashes[:min(len(s.hashes), n/bs)]
	s.published = min(s.published, n/bs)
}

// Fork returns a new sequence with the same length and contents as s. The two share
// every block (no data is copied now); each copies a shared block before it first
// writes into it, in Grow or Retain. Released blocks stay released in both: the fork
// has the same holes and [Seq.Released]. The new sequence must be closed on its own.
func (s *Seq) Fork() (*Seq, error) {
	p := s.pool
	if p == nil {
		return nil, fmt.Errorf("%w: Fork", ErrClosed)
	}
	t := slices.Clone(s.table)
	p.mu.Lock()
	for _, b := range t[s.holes:] {
		p.retain(b)
	}
	p.mu.Unlock()
	s.owned = len(s.table)
	return &Seq{pool: p, table: t, tokens: slices.Clone(s.tokens), owned: len(t), hashes: slices.Clone(s.hashes),
		salt: s.salt, salted: s.salted, holes: s.holes, start: s.start}, nil
}

// Retain keeps, of the positions from, from+1, …, only those at the offsets keep, in
// that order: for each i, position from+keep[i] moves to from+i, and the sequence is
// then truncated to from+len(keep). keep must be strictly ascending, with
// 0 <= keep[i] < Len()-from, and 0 <= from <= Len(); no position that moves may be
// released (before [Seq.Released]), an error wrapping [ErrReleased] otherwise. This is
// how a runtime keeps one accepted root-to-leaf path of a tree draft that was appended
// at from.
//
// Shared destination blocks are copied first; when that needs more blocks than are
// free, Retain returns an error wrapping [ErrOutOfMemory] and changes nothing. When the
// storage fails to copy, the positions from the first that moves on may hold anything
// (a move writes in place): Retain then truncates the sequence to the positions before
// them, which are intact, and returns the storage's error.
func (s *Seq) Retain(from int, keep []int32) error {
	p := s.pool
	if p == nil {
		return fmt.Errorf("%w: Retain(%d, %d offsets)", ErrClosed, from, len(keep))
	}
	first, err := s.checkRetain(from, keep)
	if err != nil {
		return err
	}
	if first < len(keep) {
		if err := s.move(from, first, keep); err != nil {
			return err
		}
	}
	s.truncate(from + len(keep))
	return nil
}

// move moves position from+keep[i] to from+i for every i from first on: the shared
// destination blocks are copied first, then the positions moved, each one storage
// copy, in order.
func (s *Seq) move(from, first int, keep []int32) error {
	p := s.pool
	bs := p.cfg.BlockSize
	// Offsets ascend strictly from 0, so keep[i] >= i, and once keep[i] > i every later
	// offset moves too: the destinations are from+first … from+len(keep)-1.
	lo, hi := (from+first)/bs, (from+len(keep)-1)/bs
	if err := s.own(lo, hi); err != nil {
		return err
	}
	p.mu.Lock()
	for i := lo; i <= hi; i++ {
		s.forget(i) // its contents change
	}
	p.mu.Unlock()
	// Ascending order is safe: a destination from+i is below every later source
	// from+keep[j] >= from+j > from+i, so no source is overwritten before it is read.
	s.pairs = s.pairs[:0]
	for i := first; i < len(keep); i++ {
		s.pairs = append(s.pairs, s.Slot(from+i), s.Slot(from+int(keep[i])))
	}
	if err := p.storage.Copy(s.pairs); err != nil {
		s.truncate(from + first)
		return fmt.Errorf("kvcache: moving kept positions (the sequence keeps its %d positions before them): %w", from+first, err)
	}
	for i := first; i < len(keep); i++ {
		s.tokens[from+i] = s.tokens[from+int(keep[i])]
	}
	s.hashes = s.hashes[:min(len(s.hashes), (from+first)/bs)]
	s.published = min(s.published, (from+first)/bs)
	return nil
}

// checkRetain validates Retain's arguments and returns the first offset that moves.
func (s *Seq) checkRetain(from int, keep []int32) (int, error) {
	n := len(s.tokens)
	if from < 0 || from > n {
		return 0, fmt.Errorf("kvcache: Retain(from=%d): from must be in [0, %d], the sequence's length", from, n)
	}
	first := len(keep)
	for i, k := range keep {
		if k < 0 || int(k) >= n-from {
			return 0, fmt.Errorf("kvcache: Retain(from=%d): keep[%d] = %d, must be in [0, %d)", from, i, k, n-from)
		}
		if i > 0 && k <= keep[i-1] {
			return 0, fmt.Errorf("kvcache: Retain(from=%d): keep[%d] = %d does not follow keep[%d] = %d in ascending order", from, i, k, i-1, keep[i-1])
		}
		if first == len(keep) && int(k) != i {
			first = i
		}
	}
	if first < len(keep) && from+first < s.start {
		return 0, fmt.Errorf("%w: Retain(from=%d) would move position %d, but the positions before %d were given back",
			ErrReleased, from, from+first, s.start)
	}
	return first, nil
}

// own makes the logical blocks lo … hi s's alone, copying those that are shared. It is
// all or nothing: when the pool cannot supply the copies it returns an error wrapping
// ErrOutOfMemory, and when the storage fails to copy, its error; either way it changes
// nothing.
func (s *Seq) own(lo, hi int) error {
	hi = min(hi, s.owned-1) // blocks from owned on are s's alone already
	if lo > hi {
		return nil
	}
	p := s.pool
	s.swaps = slices.Grow(s.swaps[:0], 2*(hi-lo+1)) // allocate outside the lock
	p.mu.Lock()
	need := 0
	for _, b := range s.table[lo : hi+1] {
		if p.refs[b] > 1 {
			need++
		}
	}
	if free := p.available(); need > free {
		p.mu.Unlock()
		return p.oom(fmt.Sprintf("Retain: copying shared blocks %d…%d of a sequence of %d positions", lo, hi, len(s.tokens)), need, free)
	}
	for i := lo; i <= hi; i++ {
		if b := s.table[i]; p.refs[b] > 1 {
			s.swaps = append(s.swaps, int32(i), b)
			s.table[i] = p.alloc()
		}
	}
	p.mu.Unlock()
	if len(s.swaps) > 0 {
		if err := s.copySwapped(); err != nil {
			return err
		}
	}
	if hi == s.owned-1 {
		s.owned = lo
	}
	return nil
}

// copySwapped copies the old blocks listed in s.swaps into the fresh blocks that
// replaced them, then releases the old ones; on a storage error it puts the old
// blocks back and releases the fresh ones.
func (s *Seq) copySwapped() error {
	p := s.pool
	bs := p.cfg.BlockSize
	s.pairs = s.pairs[:0]
	for j := 0; j < len(s.swaps); j += 2 {
		i, old := int(s.swaps[j]), s.swaps[j+1]
		s.pairs = appendBlockCopy(s.pairs, bs, s.table[i], old, min(bs, len(s.tokens)-i*bs))
	}
	err := p.storage.Copy(s.pairs)
	p.mu.Lock()
	defer p.mu.Unlock()
	for j := 0; j < len(s.swaps); j += 2 {
		i, old := int(s.swaps[j]), s.swaps[j+1]
		if err != nil {
			old, s.table[i] = s.table[i], old
		}
		p.release(old)
	}
	if err != nil {
		return fmt.Errorf("kvcache: copying shared blocks: %w", err)
	}
	return nil
}

// BlockHash returns a hash of every token from position 0 to the end of logical block
// i, and whether block i is full (only full blocks have a hash). Two sequences of one
// process whose block i hashes alike hold, with overwhelming probability, the same
// tokens up to there. Hashes are cached, so BlockHash mutates the cache: call it only
// from the sequence's owner.
func (s *Seq) BlockHash(i int) (uint64, bool) {
	if s.pool == nil {
		return 0, false
	}
	bs := s.pool.cfg.BlockSize
	if i < 0 || i >= len(s.tokens)/bs {
		return 0, false
	}
	for j := len(s.hashes); j <= i; j++ {
		prev, chained := s.salt, s.salted
		if j > 0 {
			prev, chained = s.hashes[j-1], true
		}
		s.hashes = append(s.hashes, blockHash(prev, chained, s.tokens[j*bs:(j+1)*bs]))
	}
	return s.hashes[i], true
}

// Salt sets, on an empty sequence, a value hashed in front of its first block: the
// blocks it publishes are then found again only by sequences with the same salt and
// the same tokens, and its Reuse finds only those. It is for keys and values that
// depend on more than the sequence's tokens — an EAGLE layer's rows read the target's
// states, which depend on a token before the layer's first (vLLM's cache_salt, a
// tenant's own cache, is the same idea). The salt stays until the sequence closes, and
// a Fork has it too.
func (s *Seq) Salt(salt uint64) error {
	if s.pool == nil {
		return fmt.Errorf("%w: Salt", ErrClosed)
	}
	if len(s.tokens) > 0 {
		return fmt.Errorf("kvcache: Salt on a sequence of %d positions: only an empty one takes a salt", len(s.tokens))
	}
	s.salt, s.salted = salt, true
	s.hashes = s.hashes[:0]
	return nil
}

// blockHash hashes a block's tokens after the hash of the blocks before it (none for
// the first).
func blockHash(prev uint64, chained bool, tokens []int32) uint64 {
	h := uint64(fnvOffset)
	if chained {
		h = fnvWord(h, prev, 8)
	}
	for _, t := range tokens {
		h = fnvWord(h, uint64(uint32(t)), 4)
	}
	return h
}

// FNV-1a, 64 bits, over little-endian words.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// fnvWord hashes the low n bytes of w, least significant first, into h.
func fnvWord(h, w uint64, n int) uint64 {
	for range n {
		h = (h ^ (w & 0xff)) * fnvPrime
		w >>= 8
	}
	return h
}

// Close returns all of the sequence's blocks to the pool (those no other sequence
// holds become free; released ones went back before). It is idempotent; afterwards
// Grow, Truncate, Retain, Fork and ReleaseBefore return errors wrapping [ErrClosed],
// and Len and Blocks return 0.
func (s *Seq) Close() {
	if s.pool == nil {
		return
	}
	s.pool.releaseAll(s.table[s.holes:])
	*s = Seq{}
}
