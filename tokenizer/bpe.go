package tokenizer

import (
	"hash/maphash"
	"math"
	"strings"
	"sync"
	"unicode/utf8"
)

// encState is per-call scratch space, pooled by each Tokenizer.
type encState struct {
	syms  []int32   // symbol ids (small words)
	ranks []int32   // rank of the pair (syms[i], syms[i+1]) (small words)
	nodes []bpeNode // linked symbols (long words)
	heap  mergeHeap
	spm   []spmSym
	sheap spmHeap
}

const (
	noRank = math.MaxInt32
	// Words of up to smallWord symbols are merged with a linear scan of pair ranks;
	// longer ones with a heap.
	smallWord = 128
	// Pieces longer than this are not cached.
	maxCachedWord = 256
)

// encodeSection encodes one normalized section of text (no added tokens in it).
func (t *Tokenizer) encodeSection(dst []int32, s string, first bool, st *encState) []int32 {
	if s == "" {
		return dst
	}
	s = t.pre.transform(s, first)
	if t.metaChunks {
		for i := 0; i < len(s); {
			j := nextMetaChunk(s, i)
			if t.model == modelSPM {
				dst = t.spmChunk(dst, s[i:j], st)
			} else {
				dst = t.encodeWord(dst, s[i:j], st)
			}
			i = j
		}
		return dst
	}
	if t.model == modelSPM {
		return t.spmEncode(dst, s, st)
	}
	return t.encodePieces(dst, s, 0, st)
}

// SentencePiece-style text has no pre-tokenizer: BPE runs over the whole section.
// When no token of the vocabulary has ▁ right after another character (true of
// vocabularies trained with split_by_whitespace, as Llama 2's), no merge can join
// across the start of a ▁ that follows another character, so the section can be cut
// there into chunks ("▁▁word") that BPE handles independently with the same result
// — and that the word cache can hold.

const meta = "▁"

// nextMetaChunk returns the end of the chunk that starts at i: a run of ▁, then
// everything up to the next ▁.
func nextMetaChunk(s string, i int) int {
	j := i
	for strings.HasPrefix(s[j:], meta) {
		j += len(meta)
	}
	if k := strings.Index(s[j:], meta); k >= 0 {
		return j + k
	}
	return len(s)
}

// setMetaChunks decides whether sections may be cut into chunks: ▁ must be a token
// and no token may have ▁ right after another character.
func (t *builder) setMetaChunks(tokens func(yield func(string) bool)) {
	if _, ok := t.ids[meta]; !ok {
		return
	}
	for tok := range tokens {
		for k := strings.Index(tok, meta); k >= 0; {
			if k > 0 && !strings.HasSuffix(tok[:k], meta) {
				return
			}
			next := strings.Index(tok[k+len(meta):], meta)
			if next < 0 {
				break
			}
			k += len(meta) + next
		}
	}
	t.metaChunks = true
}

func (t *Tokenizer) encodePieces(dst []int32, s string, level int, st *encState) []int32 {
	if level == len(t.pre.splits) {
		return t.encodeWord(dst, s, st)
	}
	k := t.pre.splits[level]
	for i := 0; i < len(s); {
		j := nextPiece(k, s, i, t.pre.literal)
		dst = t.encodePieces(dst, s[i:j], level+1, st)
		i = j
	}
	return dst
}

// encodeWord encodes one pre-token with the merges-ranked BPE.
func (t *Tokenizer) encodeWord(dst []int32, w string, st *encState) []int32 {
	if w == "" {
		return dst
	}
	if t.model == modelByteBPE {
		if len(w) == 1 {
			if id := t.byteIDs[w[0]]; id >= 0 {
				return append(dst, id)
			}
		}
		if t.ignoreMerges {
			if id, ok := t.rawVocab[w]; ok {
				return append(dst, id)
			}
		}
	} else if t.ignoreMerges {
		if id, ok := t.ids[w]; ok && t.attrs[id]&attrSpecial == 0 {
			return append(dst, id)
		}
	}
	cacheable := len(w) <= maxCachedWord
	if cacheable {
		if ids, ok := t.cache.get(w); ok {
			return append(dst, ids...)
		}
	}
	n := len(dst)
	dst = t.bpeWord(dst, w, st)
	if cacheable {
		t.cache.put(w, dst[n:])
	}
	return dst
}

// initialSymbols fills st.syms with the symbols BPE starts from.
func (t *Tokenizer) initialSymbols(w string, st *encState) []int32 {
	syms := st.syms[:0]
	if t.model == modelByteBPE {
		for i := 0; i < len(w); i++ {
			if id := t.byteIDs[w[i]]; id >= 0 {
				syms = append(syms, id)
			} else if t.unk >= 0 && !(t.fuseUnk && len(syms) > 0 && syms[len(syms)-1] == t.unk) {
				syms = append(syms, t.unk)
			}
		}
		st.syms = syms
		return syms
	}
	prevUnk := false
	for i := 0; i < len(w); {
		_, size := utf8.DecodeRuneInString(w[i:])
		ch := w[i : i+size]
		i += size
		if id, ok := t.ids[ch]; ok && t.attrs[id]&attrSpecial == 0 {
			syms = append(syms, id)
			prevUnk = false
			continue
		}
		if t.byteFallback {
			all := true
			for k := 0; k < len(ch); k++ {
				if t.byteIDs[ch[k]] < 0 {
					all = false
					break
				}
			}
			if all {
				for k := 0; k < len(ch); k++ {
					syms = append(syms, t.byteIDs[ch[k]])
				}
				prevUnk = false
				continue
			}
		}
		if t.unk >= 0 {
			if !(t.fuseUnk && prevUnk) {
				syms = append(syms, t.unk)
			}
			prevUnk = true
		}
	}
	st.syms = syms
	return syms
}

func (t *Tokenizer) rank(a, b int32) (rank, id int32) {
	if v, ok := t.merges[uint64(uint32(a))<<32|uint64(uint32(b))]; ok {
		return int32(v >> 32), int32(uint32(v))
	}
	return noRank, -1
}

// bpeWord applies the merges to w: repeatedly the pair of adjacent symbols with the
// lowest rank, the leftmost one among equals, until no pair has a merge.
func (t *Tokenizer) bpeWord(dst []int32, w string, st *encState) []int32 {
	syms := t.initialSymbols(w, st)
	if len(syms) > smallWord {
		return t.bpeLong(dst, syms, st)
	}
	return t.bpeScan(dst, syms, st)
}

// bpeScan merges the symbols of a short word, finding each next merge by a linear
// scan of the ranks (bpeLong's heap pays off only for long words).
func (t *Tokenizer) bpeScan(dst, syms []int32, st *encState) []int32 {
	ranks := st.ranks[:0]
	for i := 0; i+1 < len(syms); i++ {
		r, _ := t.rank(syms[i], syms[i+1])
		ranks = append(ranks, r)
	}
	for len(syms) > 1 {
		best, at := int32(noRank), -1
		for i, r := range ranks {
			if r < best {
				best, at = r, i
			}
		}
		if at < 0 {
			break
		}
		_, id := t.rank(syms[at], syms[at+1])
		syms[at] = id
		syms = append(syms[:at+1], syms[at+2:]...)
		ranks = append(ranks[:at], ranks[at+1:]...)
		if at > 0 {
			ranks[at-1], _ = t.rank(syms[at-1], syms[at])
		}
		if at < len(ranks) {
			ranks[at], _ = t.rank(syms[at], syms[at+1])
		}
	}
	st.ranks = ranks
	return append(dst, syms...)
}

// bpeNode is a symbol of a long word, in a doubly linked list.
type bpeNode struct {
	id         int32
	prev, next int32 // -1 at the ends
	dead       bool
}

// mergeItem is a candidate merge of nodes pos and its next.
type mergeItem struct {
	rank, pos   int32
	left, right int32 // the ids the merge was found for
}

type mergeHeap = minHeap[mergeItem]

// before orders merges by rank, then leftmost first.
func (a mergeItem) before(b mergeItem) bool {
	return a.rank < b.rank || a.rank == b.rank && a.pos < b.pos
}

func (t *Tokenizer) bpeLong(dst []int32, syms []int32, st *encState) []int32 {
	nodes := st.nodes[:0]
	for i, id := range syms {
		nodes = append(nodes, bpeNode{id: id, prev: int32(i - 1), next: int32(i + 1)})
	}
	nodes[len(nodes)-1].next = -1
	h := st.heap[:0]
	for i := 0; i+1 < len(nodes); i++ {
		if r, _ := t.rank(nodes[i].id, nodes[i+1].id); r != noRank {
			h.push(mergeItem{rank: r, pos: int32(i), left: nodes[i].id, right: nodes[i+1].id})
		}
	}
	for len(h) > 0 {
		m := h.pop()
		a := &nodes[m.pos]
		if a.dead || a.next < 0 || a.id != m.left || nodes[a.next].id != m.right {
			continue
		}
		_, id := t.rank(m.left, m.right)
		b := &nodes[a.next]
		a.id = id
		b.dead = true
		a.next = b.next
		if b.next >= 0 {
			nodes[b.next].prev = m.pos
		}
		if a.prev >= 0 {
			p := nodes[a.prev]
			if r, _ := t.rank(p.id, a.id); r != noRank {
				h.push(mergeItem{rank: r, pos: a.prev, left: p.id, right: a.id})
			}
		}
		if a.next >= 0 {
			if r, _ := t.rank(a.id, nodes[a.next].id); r != noRank {
				h.push(mergeItem{rank: r, pos: m.pos, left: a.id, right: nodes[a.next].id})
			}
		}
	}
	for i := int32(0); i >= 0; i = nodes[i].next {
		dst = append(dst, nodes[i].id)
	}
	st.nodes, st.heap = nodes, h
	return dst
}

// wordCache remembers the ids of pre-tokens. It is sharded so that concurrent
// encoders rarely meet on a lock, and bounded: a full shard is emptied.
type wordCache struct {
	seed   maphash.Seed
	shards [cacheShards]cacheShard
}

const (
	cacheShards   = 16
	cacheShardCap = 4096
)

type cacheShard struct {
	mu sync.RWMutex
	m  map[string][]int32
}

func (c *wordCache) init() {
	c.seed = maphash.MakeSeed()
}

func (c *wordCache) shard(w string) *cacheShard {
	return &c.shards[maphash.String(c.seed, w)%cacheShards]
}

func (c *wordCache) get(w string) ([]int32, bool) {
	s := c.shard(w)
	s.mu.RLock()
	ids, ok := s.m[w]
	s.mu.RUnlock()
	return ids, ok
}

func (c *wordCache) put(w string, ids []int32) {
	v := append([]int32(nil), ids...)
	s := c.shard(w)
	s.mu.Lock()
	if s.m == nil || len(s.m) >= cacheShardCap {
		s.m = make(map[string][]int32, 256)
	}
	s.m[strings.Clone(w)] = v // w may be a slice of a large text
	s.mu.Unlock()
}
