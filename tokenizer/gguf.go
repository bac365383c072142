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

func fromGGUF(f *gguf.File) (*Tokenizer, error) {
	if f == nil {
		return nil, errors.New("no file")
	}
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
	n := len(tokens)
	types := make([]int32, n)
	for i := range types {
		types[i] = typeNormal
	}
	if f.Has("tokenizer.ggml.token_type") {
		tt, err := f.Int32s("tokenizer.ggml.token_type")
		if err != nil {
			return nil, err
		}
		if len(tt) != n {
			return nil, fmt.Errorf("tokenizer.ggml.token_type has %d entries for %d tokens", len(tt), n)
		}
		copy(types, tt)
	}
	var scores []float32
	if model == "llama" {
		if scores, err = f.Float32s("tokenizer.ggml.scores"); err != nil {
			return nil, err
		}
		if len(scores) != n {
			return nil, fmt.Errorf("tokenizer.ggml.scores has %d entries for %d tokens", len(scores), n)
		}
	}

	boolKey := func(key string, def bool) (bool, error) {
		if !f.Has(key) {
			return def, nil
		}
		return f.Bool(key)
	}
	idKey := func(key string) (int32, error) {
		if !f.Has(key) {
			return -1, nil
		}
		v, err := f.Int(key)
		if err != nil {
			return -1, err
		}
		if v == -1 || v == 0xFFFFFFFF { // llama.cpp's "none"
			return -1, nil
		}
		if err := checkID(key, v, n); err != nil {
			return -1, err
		}
		return int32(v), nil
	}

	t := newTokenizer(n)
	for i, tok := range tokens {
		t.setToken(int32(i), tok)
	}
	if model == "gpt2" {
		err = t.ggufBPE(f, tokens, types)
	} else {
		err = t.ggufSPM(f, tokens, types, scores)
	}
	if err != nil {
		return nil, err
	}
	t.buildMatchers()

	if t.unk, err = idKey("tokenizer.ggml.unknown_token_id"); err != nil {
		return nil, err
	}
	if t.bos, err = idKey("tokenizer.ggml.bos_token_id"); err != nil {
		return nil, err
	}
	eos, err := idKey("tokenizer.ggml.eos_token_id")
	if err != nil {
		return nil, err
	}
	var extra []int32
	for _, key := range []string{"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"} {
		id, err := idKey(key)
		if err != nil {
			return nil, err
		}
		if id >= 0 {
			extra = append(extra, id)
		}
	}
	if t.addBOS, err = boolKey("tokenizer.ggml.add_bos_token", model == "llama"); err != nil {
		return nil, err
	}
	if t.addEOS, err = boolKey("tokenizer.ggml.add_eos_token", false); err != nil {
		return nil, err
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
	return t, nil
}

// ggufAdded registers control, unknown and user-defined tokens as added tokens.
func (t *Tokenizer) ggufAdded(tokens []string, types []int32) {
	for i, tok := range tokens {
		switch types[i] {
		case typeControl, typeUnknown:
			t.addAdded(addedToken{id: int32(i), content: tok, special: true})
		case typeUserDefined:
			t.addAdded(addedToken{id: int32(i), content: tok})
		}
	}
}

func (t *Tokenizer) ggufBPE(f *gguf.File, tokens []string, types []int32) error {
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
		t.pre.splits = []splitKind{splitLlama3}
	case "qwen2", "deepseek-r1-qwen":
		t.pre.splits = []splitKind{splitQwen2}
		t.norm.steps = []normStep{{kind: normNFC}}
	default:
		return fmt.Errorf("tokenizer.ggml.pre %s is not supported (known: gpt-2, llama-bpe, qwen2)", pre)
	}
	t.model = modelByteBPE
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
	t.ggufAdded(tokens, types)
	merges, err := f.Strings("tokenizer.ggml.merges")
	if err != nil {
		return err
	}
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

func (t *Tokenizer) ggufSPM(f *gguf.File, tokens []string, types []int32, scores []float32) error {
	addSpace := true
	if f.Has("tokenizer.ggml.add_space_prefix") {
		var err error
		if addSpace, err = f.Bool("tokenizer.ggml.add_space_prefix"); err != nil {
			return err
		}
	}
	collapse := false
	if f.Has("tokenizer.ggml.remove_extra_whitespaces") {
		var err error
		if collapse, err = f.Bool("tokenizer.ggml.remove_extra_whitespaces"); err != nil {
			return err
		}
	}
	t.setupSPM(tokens, types, scores, true, addSpace, collapse, true)
	return nil
}

// setupSPM sets up SentencePiece BPE over pieces with the given types and scores.
func (t *Tokenizer) setupSPM(pieces []string, types []int32, scores []float32, byteFallback, dummyPrefix, collapse, escape bool) {
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
