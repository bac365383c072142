package tokenizer

import (
	"errors"
	"fmt"
	"maps"
	"strings"

	"github.com/specula/specula/format/gguf"
)

// Token types of GGUF vocabularies and SentencePiece models (the same numbers).
const (
	typeNormal      = 1
	typeUnknown     = 2
	typeControl     = 3
	typeUserDefined = 4
	typeUnused      = 5
	typeByte        = 6
)

// FromGGUF builds a Tokenizer from the vocabulary in a GGUF file's metadata:
// tokenizer.ggml.model "gpt2" (byte-level BPE with tokenizer.ggml.merges and the
// pre-tokenizer named by tokenizer.ggml.pre: "gpt-2", "llama-bpe"/"llama3", or
// "qwen2") or "llama" (SentencePiece BPE with tokenizer.ggml.scores and byte
// fallback). Token types mark control tokens (special, recognised in text only with
// ParseSpecial) and user-defined ones (always recognised). BOS, EOS, the unknown
// token and add_bos_token/add_eos_token come from their tokenizer.ggml keys; without
// add_bos_token a "llama" vocabulary adds BOS and a "gpt2" one does not, as
// llama.cpp does.
//
// For pre-tokenizer "qwen2" the text is put in Unicode normalization form C first,
// as the Hugging Face tokenizer of Qwen2 does (llama.cpp does not).
func FromGGUF(f *gguf.File) (*Tokenizer, error) {
	t, err := fromGGUF(f)
	if err != nil {
		return nil, fmt.Errorf("gguf vocabulary: %w", err)
	}
	return t, nil
}

// fromGGUF builds the Tokenizer in the order its parts depend on one another: the
// vocabulary, the model (which sets the normalizer and pre-tokenizer that the added
// tokens are indexed by), and last the special tokens.
func fromGGUF(f *gguf.File) (*Tokenizer, error) {
	if f == nil {
		return nil, errors.New("no file")
	}
	v, err := readGGUFVocab(f)
	if err != nil {
		return nil, err
	}
	t := newBuilder(len(v.tokens))
	for i, tok := range v.tokens {
		t.setToken(int32(i), tok)
	}
	if v.model == "gpt2" {
		err = t.ggufBPE(f, v.tokens, v.types)
	} else {
		err = t.ggufSPM(f, v.tokens, v.types, v.scores)
	}
	if err != nil {
		return nil, err
	}
	t.buildMatchers()
	if err := t.setGGUFSpecials(f, v.model); err != nil {
		return nil, err
	}
	return t.Tokenizer, nil
}

// ggufVocab is the vocabulary as a GGUF file's metadata gives it.
type ggufVocab struct {
	model  string    // tokenizer.ggml.model: "gpt2" or "llama"
	tokens []string  // by id
	types  []int32   // by id; typeNormal where the file gives no types
	scores []float32 // by id; "llama" only
}

// readGGUFVocab reads the model kind, the tokens, their types and, for "llama",
// their scores, and checks that they agree in length.
func readGGUFVocab(f *gguf.File) (*ggufVocab, error) {
	model, err := f.String("tokenizer.ggml.model")
	if err != nil {
		return nil, err
	}
	if model != "gpt2" && model != "llama" {
		return nil, fmt.Errorf("tokenizer.ggml.model %q is not supported (only gpt2 and llama)", model)
	}
	tokens, err := f.Strings("tokenizer.ggml.tokens")
	if err != nil {
		return nil, err
	}
	if len(tokens) == 0 {
		return nil, errors.New("tokenizer.ggml.tokens is empty")
	}
	if len(tokens) >= maxVocab {
		return nil, fmt.Errorf("tokenizer.ggml.tokens has %d tokens, more than %d", len(tokens), maxVocab)
	}
	v := &ggufVocab{model: model, tokens: tokens}
	if v.types, err = ggufTokenTypes(f, len(tokens)); err != nil {
		return nil, err
	}
	if model == "llama" {
		if v.scores, err = f.Float32s("tokenizer.ggml.scores"); err != nil {
			return nil, err
		}
		if len(v.scores) != len(tokens) {
			return nil, fmt.Errorf("tokenizer.ggml.scores has %d entries for %d tokens", len(v.scores), len(tokens))
		}
	}
	return v, nil
}

// ggufTokenTypes returns the types of n tokens: tokenizer.ggml.token_type, or all
// normal when the file has no types.
func ggufTokenTypes(f *gguf.File, n int) ([]int32, error) {
	types := make([]int32, n)
	for i := range types {
		types[i] = typeNormal
	}
	if !f.Has("tokenizer.ggml.token_type") {
		return types, nil
	}
	tt, err := f.Int32s("tokenizer.ggml.token_type")
	if err != nil {
		return nil, err
	}
	if len(tt) != n {
		return nil, fmt.Errorf("tokenizer.ggml.token_type has %d entries for %d tokens", len(tt), n)
	}
	copy(types, tt)
	return types, nil
}

// setGGUFSpecials sets the unknown token, BOS and EOS, and whether BOS and EOS are
// added, from their tokenizer.ggml keys. Without add_bos_token a "llama" vocabulary
// adds BOS and a "gpt2" one does not, as llama.cpp does. EOS also lists the
// end-of-turn and end-of-message tokens, which chat models end their answers with.
func (t *builder) setGGUFSpecials(f *gguf.File, model string) error {
	n := len(t.vocab)
	var err error
	if t.unk, err = ggufID(f, "tokenizer.ggml.unknown_token_id", n); err != nil {
		return err
	}
	if t.bos, err = ggufID(f, "tokenizer.ggml.bos_token_id", n); err != nil {
		return err
	}
	eos, err := ggufID(f, "tokenizer.ggml.eos_token_id", n)
	if err != nil {
		return err
	}
	var extra []int32
	for _, key := range []string{"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"} {
		id, err := ggufID(f, key, n)
		if err != nil {
			return err
		}
		if id >= 0 {
			extra = append(extra, id)
		}
	}
	if t.addBOS, err = ggufBool(f, "tokenizer.ggml.add_bos_token", model == "llama"); err != nil {
		return err
	}
	if t.addEOS, err = ggufBool(f, "tokenizer.ggml.add_eos_token", false); err != nil {
		return err
	}
	if t.bos >= 0 {
		t.bosSeq = []int32{t.bos}
	} else {
		t.addBOS = false
	}
	if eos >= 0 {
		t.eosSeq = []int32{eos}
	} else {
		t.addEOS = false
	}
	t.finishEOS(eos, extra)
	return nil
}

// ggufID reads the token id at key, for a vocabulary of n tokens; -1 when the key is
// missing or holds llama.cpp's "none" (-1, or its uint32 form).
func ggufID(f *gguf.File, key string, n int) (int32, error) {
	if !f.Has(key) {
		return -1, nil
	}
	v, err := f.Int(key)
	if err != nil {
		return -1, err
	}
	if v == -1 || v == 0xFFFFFFFF {
		return -1, nil
	}
	if err := checkID(key, v, n); err != nil {
		return -1, err
	}
	return int32(v), nil
}

// ggufBool reads the bool at key, or def when the key is missing.
func ggufBool(f *gguf.File, key string, def bool) (bool, error) {
	if !f.Has(key) {
		return def, nil
	}
	return f.Bool(key)
}

// ggufAdded registers control, unknown and user-defined tokens as added tokens.
func (t *builder) ggufAdded(tokens []string, types []int32) {
	for i, tok := range tokens {
		switch types[i] {
		case typeControl, typeUnknown:
			t.addAdded(addedToken{id: int32(i), content: tok, special: true})
		case typeUserDefined:
			t.addAdded(addedToken{id: int32(i), content: tok})
		}
	}
}

// ggufBPE sets up byte-level BPE: the pre-tokenizer named by tokenizer.ggml.pre,
// the tokens' bytes, the added tokens and the merges.
func (t *builder) ggufBPE(f *gguf.File, tokens []string, types []int32) error {
	if err := t.ggufPreTokenizer(f); err != nil {
		return err
	}
	t.model = modelByteBPE
	t.setGGUFByteLevelPieces(tokens, types)
	t.ggufAdded(tokens, types)
	merges, err := f.Strings("tokenizer.ggml.merges")
	if err != nil {
		return err
	}
	return t.setGGUFMerges(merges)
}

// ggufPreTokenizer sets the pre-tokenizer (and, for Qwen2, the normalizer) that
// tokenizer.ggml.pre names. llama.cpp gives several names to the same pattern.
func (t *builder) ggufPreTokenizer(f *gguf.File) error {
	pre := "(missing)"
	if f.Has("tokenizer.ggml.pre") {
		var err error
		if pre, err = f.String("tokenizer.ggml.pre"); err != nil {
			return err
		}
	}
	switch pre {
	case "gpt-2", "gpt2":
		t.pre.splits = []splitKind{splitGPT2}
	case "llama-bpe", "llama3", "llama-v3", "smaug-bpe":
		// A word that is a token is that token, merges or not, as in Llama 3's
		// tokenizer.json (ignore_merges) and llama.cpp for this pre-tokenizer.
		t.pre.splits = []splitKind{splitLlama3}
		t.ignoreMerges = true
	case "qwen2", "deepseek-r1-qwen":
		t.pre.splits = []splitKind{splitQwen2}
		t.norm.steps = []normStep{{kind: normNFC}}
	default:
		return fmt.Errorf("tokenizer.ggml.pre %s is not supported (known: gpt-2, llama-bpe, qwen2)", pre)
	}
	return nil
}

// setGGUFByteLevelPieces sets what each token decodes to and the byte tables of
// byte-level BPE. Control, unknown and user-defined tokens are their text as it
// stands; the others stand for the bytes their characters map to in GPT-2's table.
func (t *builder) setGGUFByteLevelPieces(tokens []string, types []int32) {
	t.rawVocab = make(map[string]int32, len(tokens))
	for i, tok := range tokens {
		switch types[i] {
		case typeControl, typeUnknown, typeUserDefined:
			t.pieces[i] = tok
			continue
		}
		raw, ok := byteLevelBytes(tok)
		if !ok {
			t.pieces[i] = tok
			continue
		}
		t.pieces[i] = raw
		if _, dup := t.rawVocab[raw]; !dup {
			t.rawVocab[raw] = int32(i)
		}
	}
	for b := range 256 {
		if id, ok := t.ids[string(byteToRune[b])]; ok {
			t.byteIDs[b] = id
		}
	}
}

// setGGUFMerges reads tokenizer.ggml.merges, "a b" strings in rank order; the first
// (lowest) rank of a pair given twice wins.
func (t *builder) setGGUFMerges(merges []string) error {
	t.merges = make(map[uint64]uint64, len(merges))
	for rank, m := range merges {
		a, b, ok := strings.Cut(m, " ")
		if !ok || strings.Contains(b, " ") {
			return fmt.Errorf("tokenizer.ggml.merges[%d] %q is not two tokens separated by one space", rank, m)
		}
		ia, ok1 := t.ids[a]
		ib, ok2 := t.ids[b]
		im, ok3 := t.ids[a+b]
		if !ok1 || !ok2 || !ok3 {
			return fmt.Errorf("tokenizer.ggml.merges[%d] %q: %q, %q or %q is not a token", rank, m, a, b, a+b)
		}
		key := uint64(uint32(ia))<<32 | uint64(uint32(ib))
		if _, dup := t.merges[key]; !dup {
			t.merges[key] = uint64(rank)<<32 | uint64(uint32(im))
		}
	}
	return nil
}

// ggufSPM sets up SentencePiece BPE with byte fallback, the space handling that
// tokenizer.ggml.add_space_prefix and remove_extra_whitespaces ask for (a dummy
// prefix by default, no collapsing of spaces), and ▁ for spaces.
func (t *builder) ggufSPM(f *gguf.File, tokens []string, types []int32, scores []float32) error {
	addSpace, err := ggufBool(f, "tokenizer.ggml.add_space_prefix", true)
	if err != nil {
		return err
	}
	collapse, err := ggufBool(f, "tokenizer.ggml.remove_extra_whitespaces", false)
	if err != nil {
		return err
	}
	t.setupSPM(tokens, types, scores, true, addSpace, collapse, true)
	return nil
}

// setupSPM sets up SentencePiece BPE over pieces with the given types and scores.
func (t *builder) setupSPM(pieces []string, types []int32, scores []float32, byteFallback, dummyPrefix, collapse, escape bool) {
	t.model = modelSPM
	t.scores = scores
	t.spmPieces = make(map[string]int32, len(pieces))
	for i, p := range pieces {
		switch types[i] {
		case typeByte:
			if b, ok := byteToken(p); ok {
				if t.byteIDs[b] < 0 {
					t.byteIDs[b] = int32(i)
				}
				t.pieces[i] = string([]byte{b})
			} else {
				t.pieces[i] = p
			}
		case typeControl, typeUnknown, typeUserDefined:
			t.pieces[i] = p
		default:
			t.pieces[i] = strings.ReplaceAll(p, "▁", " ")
		}
		switch types[i] {
		case typeControl, typeUnknown, typeByte:
		default: // normal, user-defined, unused: the pieces merges may form
			if _, dup := t.spmPieces[p]; !dup && p != "" {
				t.spmPieces[p] = int32(i)
			}
		}
		if types[i] == typeUnused {
			t.attrs[i] |= attrUnused
		}
	}
	t.byteFallback = byteFallback
	if collapse {
		t.norm.steps = append(t.norm.steps, normStep{kind: normCollapseSpace})
	}
	space := " "
	if escape {
		space = "▁"
		t.norm.steps = append(t.norm.steps, normStep{kind: normReplace, a: " ", b: "▁"})
	}
	if dummyPrefix {
		t.norm.steps = append(t.norm.steps, normStep{kind: normPrepend, a: space})
		t.stripLeading = 1
	}
	t.ggufAdded(pieces, types)
	t.setMetaChunks(maps.Keys(t.spmPieces))
}
