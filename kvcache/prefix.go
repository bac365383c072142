package kvcache

import (
	"fmt"
	"slices"
)

// prefixIndex is a pool's prefix cache: the full blocks sequences published
// ([Seq.Publish]), found again by the hash of every token up to their end
// ([Seq.BlockHash]) and checked against the block's own tokens. A published block no
// sequence holds is cached: it stays reusable, on a least-recently-used list, until
// the pool needs its memory. It is guarded by the pool's mutex.
type prefixIndex struct {
	bs     int
	byHash map[uint64]int32 // hash → block
	hash   []uint64         // per block: its hash, when published
	pub    []bool           // per block: published
	tokens []int32          // per block: its tokens, BlockSize each, when published
	// The cached blocks, least recently used first: a doubly linked list through
	// prev and next (-1 ends), from head to tail.
	prev, next []int32
	head, tail int32
	cached     int
	// Statistics.
	lookups, hits int64
}

func newPrefixIndex(blocks, bs int) prefixIndex {
	x := prefixIndex{bs: bs, byHash: map[uint64]int32{}, hash: make([]uint64, blocks), pub: make([]bool, blocks),
		tokens: make([]int32, blocks*bs), prev: make([]int32, blocks), next: make([]int32, blocks), head: -1, tail: -1}
	return x
}

func (x *prefixIndex) published(b int32) bool { return x.pub[b] }

// publish enters block b, holding tokens, under hash, unless another block holds that
// prefix already.
func (x *prefixIndex) publish(b int32, hash uint64, tokens []int32) {
	if x.pub[b] {
		return
	}
	if _, ok := x.byHash[hash]; ok {
		return
	}
	x.byHash[hash], x.hash[b], x.pub[b] = b, hash, true
	copy(x.tokens[int(b)*x.bs:], tokens)
}

// unpublish forgets block b's prefix; a cached block must leave the list first.
func (x *prefixIndex) unpublish(b int32) {
	if !x.pub[b] {
		return
	}
	delete(x.byHash, x.hash[b])
	x.pub[b] = false
}

// find returns the published block holding tokens under hash.
func (x *prefixIndex) find(hash uint64, tokens []int32) (int32, bool) {
	b, ok := x.byHash[hash]
	if !ok || !slices.Equal(x.tokens[int(b)*x.bs:(int(b)+1)*x.bs], tokens) {
		return 0, false
	}
	return b, true
}

// park puts block b, published and held by no sequence, at the tail of the cached
// list.
func (x *prefixIndex) park(b int32) {
	x.prev[b], x.next[b] = x.tail, -1
	if x.tail >= 0 {
		x.next[x.tail] = b
	} else {
		x.head = b
	}
	x.tail = b
	x.cached++
}

// unpark takes block b off the cached list (a sequence holds it again).
func (x *prefixIndex) unpark(b int32) {
	if x.prev[b] >= 0 {
		x.next[x.prev[b]] = x.next[b]
	} else {
		x.head = x.next[b]
	}
	if x.next[b] >= 0 {
		x.prev[x.next[b]] = x.prev[b]
	} else {
		x.tail = x.prev[b]
	}
	x.cached--
}

// evict gives up the least recently used cached block for new contents.
func (x *prefixIndex) evict() int32 {
	b := x.head
	x.unpark(b)
	x.unpublish(b)
	return b
}

// Publish offers the sequence's full blocks to the pool's prefix cache, for
// [Seq.Reuse] by later sequences. Publish only positions that will not change — a
// target's accepted tokens, say, not a draft's: a block a sequence rearranges or
// truncates into is taken out of the cache again, but other sequences may have
// reused it by then, with the contents it had. Blocks with released positions
// ([Seq.ReleaseBefore]) are skipped; Reuse matches from the first block on, so a
// later block is found again only after another sequence's same prefix.
func (s *Seq) Publish() {
	p := s.pool
	if p == nil {
		return
	}
	bs := p.cfg.BlockSize
	full := len(s.tokens) / bs
	if full <= s.published {
		return
	}
	s.BlockHash(full - 1) // outside the lock: the hashes are the sequence's own
	// A block with a released position (a hole, or one refilled after a Truncate
	// into the released positions) is not whole: never offered.
	first := max(s.published, (s.start+bs-1)/bs)
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := first; i < full; i++ {
		p.prefix.publish(s.table[i], s.hashes[i], s.tokens[i*bs:(i+1)*bs])
	}
	s.published = full
	// Other sequences may share the published blocks from now on: writes into them
	// check first.
	s.owned = max(s.owned, full)
}

// Reuse starts an empty sequence with the longest prefix of tokens, in whole blocks,
// that the pool's prefix cache holds, sharing those blocks (copy on write, as a Fork
// does), and returns its length: those positions are in the sequence and need no
// forward. It reuses nothing when the sequence is not empty.
func (s *Seq) Reuse(tokens []int32) int {
	p := s.pool
	if p == nil || len(s.tokens) > 0 {
		return 0
	}
	bs := p.cfg.BlockSize
	p.mu.Lock()
	defer p.mu.Unlock()
	h := s.salt
	for i := 0; (i+1)*bs <= len(tokens); i++ {
		h = blockHash(h, i > 0 || s.salted, tokens[i*bs:(i+1)*bs])
		p.prefix.lookups++
		b, ok := p.prefix.find(h, tokens[i*bs:(i+1)*bs])
		if !ok {
			break
		}
		p.prefix.hits++
		if p.refs[b] == 0 {
			p.prefix.unpark(b)
			p.refs[b] = 1
		} else {
			p.retain(b)
		}
		s.table = append(s.table, b)
		s.hashes = append(s.hashes, h)
		s.tokens = append(s.tokens, tokens[i*bs:(i+1)*bs]...)
	}
	s.owned = len(s.table) // others may hold them: writes copy first
	s.published = len(s.table)
	return len(s.tokens)
}

// forget takes the sequence's block i out of the prefix cache before the sequence
// writes into it, when it holds the block alone (a shared block is copied first, and
// the others keep its contents). p.mu must be held.
func (s *Seq) forget(i int) {
	p := s.pool
	if b := s.table[i]; p.refs[b] == 1 {
		p.prefix.unpublish(b)
	}
}

// checkPrefix is a description of what is wrong with the index, for tests.
func (p *Pool) checkPrefix() error {
	x := &p.prefix
	n := 0
	for b := x.head; b >= 0; b = x.next[b] {
		if p.refs[b] != 0 || !x.pub[b] {
			return fmt.Errorf("cached block %d has %d references, published %v", b, p.refs[b], x.pub[b])
		}
		n++
	}
	if n != x.cached {
		return fmt.Errorf("%d blocks on the cached list, %d counted", n, x.cached)
	}
	for h, b := range x.byHash {
		if !x.pub[b] || x.hash[b] != h {
			return fmt.Errorf("hash %x names block %d, which holds %x (published %v)", h, b, x.hash[b], x.pub[b])
		}
	}
	return nil
}
