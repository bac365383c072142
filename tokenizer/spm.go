package tokenizer

import "unicode/utf8"

// SentencePiece BPE, as sentencepiece's bpe_model.cc (and llama.cpp's SPM tokenizer)
// does it: start from the characters of the normalized text; repeatedly merge the
// adjacent pair whose concatenation is a piece with the highest score, the leftmost
// among equals; then look each symbol up, with characters that are not pieces going
// to byte tokens (byte fallback) or to the unknown token.

type spmSym struct {
	start, end int32 // bytes of the symbol in the text
	prev, next int32 // -1 at the ends
	dead       bool
}

type spmItem struct {
	score       float32
	left, right int32
	size        int32 // bytes of the merged piece, to recognise stale items
}

type spmHeap = minHeap[spmItem]

// before orders merges by score, highest first, then leftmost first.
func (a spmItem) before(b spmItem) bool {
	return a.score > b.score || a.score == b.score && a.left < b.left
}

// spmChunk encodes one chunk (see nextMetaChunk) through the word cache.
func (t *Tokenizer) spmChunk(dst []int32, s string, st *encState) []int32 {
	cacheable := len(s) <= maxCachedWord
	if cacheable {
		if ids, ok := t.cache.get(s); ok {
			return append(dst, ids...)
		}
	}
	n := len(dst)
	dst = t.spmEncode(dst, s, st)
	if cacheable {
		t.cache.put(s, dst[n:])
	}
	return dst
}

// spmEncode encodes one normalized section.
func (t *Tokenizer) spmEncode(dst []int32, s string, st *encState) []int32 {
	if s == "" {
		return dst
	}
	syms := st.spm[:0]
	for i := 0; i < len(s); {
		_, w := utf8.DecodeRuneInString(s[i:])
		n := int32(len(syms))
		syms = append(syms, spmSym{start: int32(i), end: int32(i + w), prev: n - 1, next: n + 1})
		i += w
	}
	syms[len(syms)-1].next = -1
	h := st.sheap[:0]
	// unused records how pieces of type UNUSED were formed, to split them again.
	var unused map[string][2]string
	tryAdd := func(l, r int32) {
		if l < 0 || r < 0 {
			return
		}
		text := s[syms[l].start:syms[r].end]
		id, ok := t.spmPieces[text]
		if !ok {
			return
		}
		h.push(spmItem{score: t.scores[id], left: l, right: r, size: int32(len(text))})
		if t.attrs[id]&attrUnused != 0 {
			if unused == nil {
				unused = make(map[string][2]string)
			}
			unused[text] = [2]string{s[syms[l].start:syms[l].end], s[syms[r].start:syms[r].end]}
		}
	}
	for i := int32(1); i < int32(len(syms)); i++ {
		tryAdd(i-1, i)
	}
	for len(h) > 0 {
		top := h.pop()
		l, r := &syms[top.left], &syms[top.right]
		if l.dead || r.dead || l.next != top.right || (l.end-l.start)+(r.end-r.start) != top.size {
			continue
		}
		l.end = r.end
		r.dead = true
		l.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = top.left
		}
		tryAdd(l.prev, top.left)
		tryAdd(top.left, l.next)
	}
	prevUnk := false
	for i := int32(0); i >= 0; i = syms[i].next {
		dst = t.spmEmit(dst, s[syms[i].start:syms[i].end], unused, &prevUnk, 0)
	}
	st.spm, st.sheap = syms, h
	return dst
}

// spmEmit appends the ids of one final symbol.
func (t *Tokenizer) spmEmit(dst []int32, piece string, unused map[string][2]string, prevUnk *bool, depth int) []int32 {
	id, ok := t.spmPieces[piece]
	if ok && t.attrs[id]&attrUnused != 0 && depth < 64 {
		if parts, found := unused[piece]; found {
			dst = t.spmEmit(dst, parts[0], unused, prevUnk, depth+1)
			return t.spmEmit(dst, parts[1], unused, prevUnk, depth+1)
		}
	}
	if ok {
		*prevUnk = false
		return append(dst, id)
	}
	if t.byteFallback {
		all := true
		for k := 0; k < len(piece); k++ {
			if t.byteIDs[piece[k]] < 0 {
				all = false
				break
			}
		}
		if all {
			for k := 0; k < len(piece); k++ {
				dst = append(dst, t.byteIDs[piece[k]])
			}
			*prevUnk = false
			return dst
		}
	}
	if t.unk >= 0 && !*prevUnk {
		dst = append(dst, t.unk)
		*prevUnk = true
	}
	return dst
}
