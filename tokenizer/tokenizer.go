package tokenizer

import (
	"sync"
	"unicode/utf8"
)

// EncodeOptions control one call of [Tokenizer.Encode].
type EncodeOptions struct {
	// AddBOS puts the tokens the model expects in front of a sequence (usually one
	// beginning-of-sequence token) before the text's tokens. It does nothing for a
	// tokenizer without such tokens.
	AddBOS bool
	// AddEOS appends the tokens the model expects at the end of a sequence (for the
	// few models whose tokenizer adds an end-of-sequence token).
	AddEOS bool
	// ParseSpecial recognises special tokens written in the text, such as
	// "<|im_start|>" or "<s>", and gives them their ids. When it is false the text
	// of a special token is tokenized like any other text: use that for untrusted
	// input. Added tokens that are not special (user-defined symbols) are always
	// recognised.
	ParseSpecial bool
}

// DecodeOptions control [Tokenizer.DecodeWith] and [Tokenizer.NewStream].
type DecodeOptions struct {
	// SkipSpecial leaves special tokens (BOS, EOS, chat markers, unknown) out of the
	// text instead of rendering them as their text.
	SkipSpecial bool
}

// modelKind is the algorithm that turns a pre-token into ids.
type modelKind uint8

const (
	// modelByteBPE: byte-level BPE; a pre-token's bytes are the initial symbols.
	modelByteBPE modelKind = iota
	// modelCharBPE: BPE over characters with byte fallback or an unknown token,
	// merges ranked by their order (Hugging Face BPE without ByteLevel).
	modelCharBPE
	// modelSPM: SentencePiece BPE, merges chosen by the score of the merged piece.
	modelSPM
)

// token attributes
const (
	attrPresent uint8 = 1 << iota // the id has a token
	attrSpecial                   // control, unknown or special added token
	attrUnused                    // SentencePiece UNUSED piece
)

// Tokenizer encodes text to token ids and decodes ids to text. It is immutable after
// loading and safe for concurrent use.
type Tokenizer struct {
	vocab  []string         // id → token text as the file stores it ("Ġthe", "▁the", "<0x0A>")
	pieces []string         // id → the bytes Decode emits for it (not always valid UTF-8)
	attrs  []uint8          // id → attr* flags
	ids    map[string]int32 // token text → id

	model        modelKind
	merges       map[uint64]uint64 // (left<<32 | right) → rank<<32 | merged id
	byteIDs      [256]int32        // byte → initial symbol (byte-level) or <0xXX> token (fallback); -1 if none
	rawVocab     map[string]int32  // byte-level: a token's bytes → id, for ignore_merges
	ignoreMerges bool
	byteFallback bool
	fuseUnk      bool
	unk          int32            // unknown token, -1 if none
	scores       []float32        // SentencePiece scores by id
	spmPieces    map[string]int32 // SentencePiece pieces that merges may form
	metaChunks   bool             // sections may be cut before ▁ (see nextMetaChunk)

	norm  normalizer
	pre   preTokenizer
	added addedVocab

	bos          int32   // -1 if none
	eos          []int32 // end-of-sequence ids, the primary one first
	bosSeq       []int32 // what AddBOS puts in front
	eosSeq       []int32 // what AddEOS appends
	addBOS       bool    // the model's default for AddBOS
	addEOS       bool    // the model's default for AddEOS
	stripLeading int     // leading spaces Decode removes (SentencePiece's dummy prefix)

	cache   wordCache
	scratch sync.Pool // *encState
}

// DefaultOptions returns the options the model's own files ask for: AddBOS and AddEOS
// as its tokenizer adds them by default (tokenizer_config.json's add_bos_token, the
// post-processor of tokenizer.json, GGUF's tokenizer.ggml.add_bos_token, or the
// SentencePiece convention of a BOS in front), and ParseSpecial true.
func (t *Tokenizer) DefaultOptions() EncodeOptions {
	return EncodeOptions{AddBOS: t.addBOS, AddEOS: t.addEOS, ParseSpecial: true}
}

// VocabSize returns the number of token ids, one more than the largest id. Ids
// without a token (gaps in a vocabulary) count too.
func (t *Tokenizer) VocabSize() int { return len(t.vocab) }

// Token returns the text of token id as the vocabulary stores it (for byte-level
// BPE that is the GPT-2 byte-to-unicode form, "Ġthe" for " the"; for SentencePiece,
// "▁the"), and false if there is no such id.
func (t *Tokenizer) Token(id int32) (string, bool) {
	if !t.valid(id) {
		return "", false
	}
	return t.vocab[id], true
}

// ID returns the id of the token with the given text (in the vocabulary's own form,
// as [Tokenizer.Token] returns it), and false if there is none.
func (t *Tokenizer) ID(token string) (int32, bool) {
	id, ok := t.ids[token]
	return id, ok
}

// BOS returns the beginning-of-sequence token, and false if the model has none.
func (t *Tokenizer) BOS() (int32, bool) { return t.bos, t.bos >= 0 }

// EOS returns every id that ends a generation, the model's end-of-sequence token
// first. Besides that one, the list holds the ids the model's files declare as
// ending generation (generation_config.json's eos_token_id when [Load] reads a
// directory; GGUF's tokenizer.ggml.eot_token_id and eom_token_id) and the special
// tokens of the vocabulary that chat models use to end a turn: <|eot_id|>,
// <|eom_id|>, <|im_end|>, <|end_of_text|>, <|endoftext|>, <|end|>, <end_of_turn>.
// The caller must not modify the slice.
func (t *Tokenizer) EOS() []int32 { return t.eos }

// IsSpecial reports whether id is a special token: a control token such as BOS or
// EOS, the unknown token, or an added token marked special (chat markers).
func (t *Tokenizer) IsSpecial(id int32) bool {
	return t.valid(id) && t.attrs[id]&attrSpecial != 0
}

func (t *Tokenizer) valid(id int32) bool {
	return id >= 0 && int(id) < len(t.attrs) && t.attrs[id]&attrPresent != 0
}

// Encode returns the token ids of text. Invalid UTF-8 in text is encoded byte by
// byte by byte-level tokenizers; the others see U+FFFD in its place (one per maximal
// invalid subpart), as the Hugging Face library only ever sees valid strings.
func (t *Tokenizer) Encode(text string, opts EncodeOptions) []int32 {
	return t.AppendEncode(make([]int32, 0, len(text)/3+4), text, opts)
}

// AppendEncode appends the token ids of text to dst and returns the extended slice,
// like [Tokenizer.Encode].
func (t *Tokenizer) AppendEncode(dst []int32, text string, opts EncodeOptions) []int32 {
	if t.model != modelByteBPE && !utf8.ValidString(text) {
		text = toValidUTF8(text)
	}
	if opts.AddBOS {
		dst = append(dst, t.bosSeq...)
	}
	st := t.getState()
	dst = t.encodeText(dst, text, opts.ParseSpecial, st)
	t.scratch.Put(st)
	if opts.AddEOS {
		dst = append(dst, t.eosSeq...)
	}
	return dst
}

func (t *Tokenizer) getState() *encState {
	if st, ok := t.scratch.Get().(*encState); ok {
		return st
	}
	return new(encState)
}
