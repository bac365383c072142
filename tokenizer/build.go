package tokenizer

import (
	"fmt"
	"strings"
)

// This file holds what the loaders share: the GPT-2 byte table, the assembly of the
// vocabulary and added tokens, and the choice of BOS/EOS.

// byteToRune is GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for
// themselves, the others are moved to U+0100 and up.
var byteToRune = func() (t [256]rune) {
	n := rune(0)
	for b := 0; b < 256; b++ {
		if b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF {
			t[b] = rune(b)
		} else {
			t[b] = 256 + n
			n++
		}
	}
	return t
}()

// runeToByte inverts byteToRune; -1 for runes it does not produce.
var runeToByte = func() (t [324]int16) {
	for i := range t {
		t[i] = -1
	}
	for b, r := range byteToRune {
		t[r] = int16(b)
	}
	return t
}()

// byteLevelBytes returns the bytes a byte-level token stands for, and false if some
// character of it is not in the byte table.
func byteLevelBytes(tok string) (string, bool) {
	b := make([]byte, 0, len(tok))
	for _, r := range tok {
		if r < 0 || int(r) >= len(runeToByte) || runeToByte[r] < 0 {
			return "", false
		}
		b = append(b, byte(runeToByte[r]))
	}
	return string(b), true
}

// byteToken returns the byte of a byte-fallback token "<0xAB>" (either case of hex
// digits), and false for any other token.
func byteToken(tok string) (byte, bool) {
	if len(tok) != 6 || !strings.HasPrefix(tok, "<0x") || tok[5] != '>' {
		return 0, false
	}
	hi, ok1 := hexDigit(tok[3])
	lo, ok2 := hexDigit(tok[4])
	return hi<<4 | lo, ok1 && ok2
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// maxVocab bounds the vocabulary size a file may ask for.
const maxVocab = 1 << 24

// builder assembles a Tokenizer from what a file says: the loaders' steps (the
// vocabulary, the model, the normalizer and pre-tokenizer, the added and special
// tokens, the decoder) are its methods, so that the Tokenizer itself carries only what
// encoding and decoding need.
type builder struct{ *Tokenizer }

// newBuilder starts a Tokenizer with room for n ids, none of them present yet.
func newBuilder(n int) *builder {
	t := &Tokenizer{
		vocab:  make([]string, n),
		pieces: make([]string, n),
		attrs:  make([]uint8, n),
		ids:    make(map[string]int32, n),
		unk:    -1,
		bos:    -1,
	}
	for i := range t.byteIDs {
		t.byteIDs[i] = -1
	}
	t.cache.init()
	return &builder{t}
}

// setToken gives id the text tok. The first id of a text keeps it in the id map.
func (t *builder) setToken(id int32, tok string) {
	t.vocab[id] = tok
	t.attrs[id] |= attrPresent
	if _, ok := t.ids[tok]; !ok {
		t.ids[tok] = id
	}
}

// addAdded registers an added token; buildMatchers indexes them all.
func (t *builder) addAdded(a addedToken) {
	t.added.tokens = append(t.added.tokens, a)
	if a.special {
		t.attrs[a.id] |= attrSpecial
	}
}

// buildMatchers indexes the added tokens, once the normalizer is known: tokens
// matched after normalization are indexed by their normalized content.
func (t *builder) buildMatchers() {
	for i, a := range t.added.tokens {
		if a.normalized && len(t.norm.steps) > 0 {
			t.added.norm.add(t.norm.apply(a.content), int32(i))
		} else {
			t.added.raw.add(a.content, int32(i))
		}
	}
}

// endOfTurn are special tokens that chat models emit to end their turn; EOS lists
// them when the vocabulary has them as special tokens.
var endOfTurn = [...]string{"<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|end_of_text|>", "<|endoftext|>", "<|end|>", "<end_of_turn>"}

// finishEOS sets the EOS list: primary first, then extra, then the end-of-turn
// specials, without repeats.
func (t *builder) finishEOS(primary int32, extra []int32) {
	var eos []int32
	add := func(id int32) {
		if !t.valid(id) {
			return
		}
		for _, e := range eos {
			if e == id {
				return
			}
		}
		eos = append(eos, id)
	}
	add(primary)
	for _, id := range extra {
		add(id)
	}
	for _, name := range endOfTurn {
		if id, ok := t.ids[name]; ok && t.attrs[id]&attrSpecial != 0 {
			add(id)
		}
	}
	t.eos = eos
}

// checkID reports an id out of the vocabulary.
func checkID(what string, id int64, n int) error {
	if id < 0 || id >= int64(n) {
		return fmt.Errorf("%s %d is outside the vocabulary of %d tokens", what, id, n)
	}
	return nil
}
