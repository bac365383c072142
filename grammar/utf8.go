package grammar

import (
	"slices"
	"unicode/utf8"
)

// runeRange is the code points lo to hi, both included.
type runeRange struct{ lo, hi rune }

// normalize sorts and merges ranges, clipped to valid code points without the
// surrogates (which UTF-8 cannot encode).
func normalize(rs []runeRange) []runeRange {
	var out []runeRange
	for _, r := range rs {
		r.lo, r.hi = max(r.lo, 0), min(r.hi, utf8.MaxRune)
		if r.lo > r.hi {
			continue
		}
		if r.lo < 0xD800 && r.hi > 0xDFFF {
			out = append(out, runeRange{r.lo, 0xD7FF}, runeRange{0xE000, r.hi})
			continue
		}
		if r.lo >= 0xD800 && r.lo <= 0xDFFF {
			r.lo = 0xE000
		}
		if r.hi >= 0xD800 && r.hi <= 0xDFFF {
			r.hi = 0xD7FF
		}
		if r.lo <= r.hi {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b runeRange) int { return int(a.lo - b.lo) })
	merged := out[:0]
	for _, r := range out {
		if n := len(merged); n > 0 && r.lo <= merged[n-1].hi+1 {
			merged[n-1].hi = max(merged[n-1].hi, r.hi)
			continue
		}
		merged = append(merged, r)
	}
	return merged
}

// complement is every code point outside rs.
func complement(rs []runeRange) []runeRange {
	rs = normalize(rs)
	var out []runeRange
	next := rune(0)
	for _, r := range rs {
		if r.lo > next {
			out = append(out, runeRange{next, r.lo - 1})
		}
		next = r.hi + 1
	}
	if next <= utf8.MaxRune {
		out = append(out, runeRange{next, utf8.MaxRune})
	}
	return normalize(out)
}

// utf8Sequences turns code point ranges into the byte sequences that encode them:
// each sequence a byte set per byte, the ASCII ones merged into one single-byte
// sequence.
func utf8Sequences(rs []runeRange) [][]bset {
	var ascii bset
	hasASCII := false
	var out [][]bset
	for _, r := range normalize(rs) {
		for _, seq := range splitRange(r.lo, r.hi, nil) {
			if len(seq) == 1 && seq[0][1] < 0x80 {
				ascii.add(seq[0][0], seq[0][1])
				hasASCII = true
				continue
			}
			sets := make([]bset, len(seq))
			for i, br := range seq {
				sets[i].add(br[0], br[1])
			}
			out = append(out, sets)
		}
	}
	if hasASCII {
		out = append([][]bset{{ascii}}, out...)
	}
	return out
}

// splitRange appends to out the byte-range sequences encoding lo..hi, each sequence
// a product of byte ranges (the well-known UTF-8 range splitting).
func splitRange(lo, hi rune, out [][][2]byte) [][][2]byte {
	if lo > hi {
		return out
	}
	for _, edge := range []rune{0x7F, 0x7FF, 0xFFFF} {
		if lo <= edge && edge < hi {
			out = splitRange(lo, edge, out)
			return splitRange(edge+1, hi, out)
		}
	}
	if hi < 0x80 {
		return append(out, [][2]byte{{byte(lo), byte(hi)}})
	}
	for i := 1; i < utf8.UTFMax; i++ {
		m := rune(1)<<(6*i) - 1
		if lo&^m != hi&^m {
			if lo&m != 0 {
				out = splitRange(lo, lo|m, out)
				return splitRange((lo|m)+1, hi, out)
			}
			if hi&m != m {
				out = splitRange(lo, (hi&^m)-1, out)
				return splitRange(hi&^m, hi, out)
			}
		}
	}
	var a, b [utf8.UTFMax]byte
	n := utf8.EncodeRune(a[:], lo)
	utf8.EncodeRune(b[:], hi)
	seq := make([][2]byte, n)
	for i := range n {
		seq[i] = [2]byte{a[i], b[i]}
	}
	return append(out, seq)
}
