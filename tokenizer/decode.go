package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// Decode returns the text of ids, special tokens rendered as their text. Ids that are
// not in the vocabulary are skipped. The bytes of the tokens are joined and then made
// a string; invalid UTF-8 (a sequence cut short, stray bytes) becomes U+FFFD, one per
// maximal invalid subpart, as Rust's String::from_utf8_lossy and the WHATWG decoder
// do. SentencePiece tokenizers drop the space in front of the first word (their
// "dummy prefix").
func (t *Tokenizer) Decode(ids []int32) string {
	return t.DecodeWith(ids, DecodeOptions{})
}

// DecodeWith is [Tokenizer.Decode] with options.
func (t *Tokenizer) DecodeWith(ids []int32, opts DecodeOptions) string {
	n := 0
	for _, id := range ids {
		if t.valid(id) {
			n += len(t.pieces[id])
		}
	}
	buf := make([]byte, 0, n)
	strip := t.stripLeading
	for _, id := range ids {
		p, ok := t.piece(id, opts)
		if !ok {
			continue
		}
		for strip > 0 && len(buf) == 0 && p != "" {
			if p[0] != ' ' {
				strip = 0
				break
			}
			p = p[1:]
			strip--
		}
		buf = append(buf, p...)
	}
	return lossy(buf)
}

func (t *Tokenizer) piece(id int32, opts DecodeOptions) (string, bool) {
	if !t.valid(id) || opts.SkipSpecial && t.attrs[id]&attrSpecial != 0 {
		return "", false
	}
	return t.pieces[id], true
}

// lossy returns b as a string with every maximal invalid UTF-8 subpart replaced by
// U+FFFD.
func lossy(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	out := make([]byte, 0, len(b)+8)
	for i := 0; i < len(b); {
		n, complete := validPrefix(b[i:])
		if complete {
			out = append(out, b[i:i+n]...)
		} else {
			out = append(out, "\uFFFD"...)
			if n == 0 {
				n = 1
			}
		}
		i += n
	}
	return string(out)
}

// toValidUTF8 is lossy for strings.
func toValidUTF8(s string) string { return lossy([]byte(s)) }

// validPrefix looks at the UTF-8 sequence that starts b (len(b) > 0). It returns the
// length of the character and true when b starts with a whole valid character;
// otherwise the length of the maximal subpart (the bytes that could still begin a
// character; 0 for a byte that never can) and false.
func validPrefix(b []byte) (int, bool) {
	c := b[0]
	if c < 0x80 {
		return 1, true
	}
	var need int
	lo, hi := byte(0x80), byte(0xBF) // allowed range of the second byte
	switch {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		need = 2
	case c == 0xED:
		need, hi = 2, 0x9F
	case c == 0xF0:
		need, lo = 3, 0x90
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	case c == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 0, false
	}
	for k := 1; k <= need; k++ {
		if k >= len(b) {
			return k, false // cut short: the whole rest is one subpart
		}
		x := b[k]
		if k == 1 && (x < lo || x > hi) || k > 1 && (x < 0x80 || x > 0xBF) {
			return k, false
		}
	}
	return need + 1, true
}

// incompleteTail returns the length of the trailing bytes of b that begin a valid
// character not yet complete (0 to 3): the bytes a stream must hold back.
func incompleteTail(b []byte) int {
	for k := 1; k <= 3 && k <= len(b); k++ {
		start := len(b) - k
		c := b[start]
		if c < 0x80 {
			return 0
		}
		if c >= 0xC0 { // a lead byte (or an invalid one)
			n, complete := validPrefix(b[start:])
			if !complete && n == k {
				return k
			}
			return 0
		}
	}
	return 0
}

// Stream decodes a sequence of ids one at a time, for streaming output. What Push
// and Flush return, joined, equals [Tokenizer.DecodeWith] of all the ids: no call
// returns part of a character, and no byte is lost. A Stream is not safe for
// concurrent use; make one per sequence.
type Stream struct {
	t       *Tokenizer
	opts    DecodeOptions
	strip   int    // leading spaces still to drop
	started bool   // some byte has been produced
	pending []byte // the start of a character whose other bytes have not come yet
}

// NewStream returns a Stream that decodes with opts.
func (t *Tokenizer) NewStream(opts DecodeOptions) *Stream {
	return &Stream{t: t, opts: opts, strip: t.stripLeading}
}

// Push adds one id and returns the text that it completes, possibly "" (while a
// character's bytes are still arriving, or for a skipped special token).
func (s *Stream) Push(id int32) string {
	p, ok := s.t.piece(id, s.opts)
	if !ok || p == "" {
		return ""
	}
	if !s.started {
		for s.strip > 0 && p != "" && p[0] == ' ' {
			p = p[1:]
			s.strip--
		}
		if p == "" {
			return ""
		}
		s.started = true
	}
	s.pending = append(s.pending, p...)
	keep := incompleteTail(s.pending)
	if keep == len(s.pending) {
		return ""
	}
	out := lossy(s.pending[:len(s.pending)-keep])
	n := copy(s.pending, s.pending[len(s.pending)-keep:])
	s.pending = s.pending[:n]
	return out
}

// Flush returns whatever is held back — the beginning of a character that never
// completed, as U+FFFD — and resets the Stream for a new sequence.
func (s *Stream) Flush() string {
	out := lossy(s.pending)
	s.pending = s.pending[:0]
	s.started = false
	s.strip = s.t.stripLeading
	return out
}

// StripsLeadingSpace reports whether Decode drops the space in front of the first
// token's text (SentencePiece's dummy prefix): what a text's first token writes is
// then its piece without that space.
func (t *Tokenizer) StripsLeadingSpace() bool { return t.stripLeading > 0 }

// Piece returns the bytes a token stands for in decoded text (a byte-fallback token's
// single byte, a word piece's text with its space), as Decode joins them; ok is false
// for an id outside the vocabulary. The bytes may be a part of a UTF-8 character:
// OpenAI's logprobs report them as "bytes" beside the token's text for that reason.
func (t *Tokenizer) Piece(id int32) (piece string, ok bool) {
	if !t.valid(id) {
		return "", false
	}
	return t.pieces[id], true
}

// PieceText is a token's piece as text to show (logprobs' token strings): a part of
// a UTF-8 character in it becomes U+FFFD; "" for an id outside the vocabulary.
func (t *Tokenizer) PieceText(id int32) string {
	p, _ := t.Piece(id)
	return strings.ToValidUTF8(p, "\uFFFD")
}
