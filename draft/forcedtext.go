package draft

import "github.com/specula/specula/tokenizer"

// TextOf returns what [Forced] needs to draft forced runs of bytes with the target's
// tokenizer tok: its single-byte tokens, its end-of-sequence tokens, and its encoding
// of text without special tokens. A run is tokenized alone, as the tokenizer splits
// it, which is how a byte-level BPE model most often writes it; a SentencePiece
// tokenizer that puts a space in front of a text writes runs the constraint refuses,
// so Forced then drafts single forced tokens only.
func TextOf(tok *tokenizer.Tokenizer) *ForcedText {
	t := &ForcedText{EOS: tok.EOS()}
	for i := range t.ByteTokens {
		t.ByteTokens[i] = -1
	}
	for id := range int32(tok.VocabSize()) {
		if p, ok := tok.Piece(id); ok && len(p) == 1 && !tok.IsSpecial(id) && t.ByteTokens[p[0]] < 0 {
			t.ByteTokens[p[0]] = id
		}
	}
	t.Encode = func(dst []int32, text []byte) []int32 {
		return tok.AppendEncode(dst, string(text), tokenizer.EncodeOptions{})
	}
	return t
}
