package quantize

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/specula/specula/format/gguf"
)

// GGUF token types, as llama.cpp's converter writes them.
const (
	tokNormal      = 1
	tokUnknown     = 2
	tokControl     = 3
	tokUserDefined = 4
	tokUnused      = 5
	tokByte        = 6
)

// hfTokenizer is the part of a tokenizer.json a GGUF tokenizer needs.
type hfTokenizer struct {
	Model struct {
		Type         string            `json:"type"`
		Vocab        map[string]int    `json:"vocab"`
		Merges       []json.RawMessage `json:"merges"`
		ByteFallback bool              `json:"byte_fallback"`
		UnkToken     string            `json:"unk_token"`
	} `json:"model"`
	AddedTokens []struct {
		ID      int    `json:"id"`
		Content string `json:"content"`
		Special bool   `json:"special"`
	} `json:"added_tokens"`
	Normalizer   *hfStep         `json:"normalizer"`
	PreTokenizer json.RawMessage `json:"pre_tokenizer"`
}

// hfStep is a normalizer or pre-tokenizer of a tokenizer.json, as far as the space
// handling of SentencePiece-style tokenizers goes; Sequence steps nest.
type hfStep struct {
	Type           string   `json:"type"`
	Prepend        string   `json:"prepend"`
	Content        string   `json:"content"`
	Replacement    string   `json:"replacement"`
	PrependScheme  string   `json:"prepend_scheme"`
	AddPrefixSpace *bool    `json:"add_prefix_space"`
	Normalizers    []hfStep `json:"normalizers"`
	PreTokenizers  []hfStep `json:"pretokenizers"`
}

// steps returns s and the steps nested in it, depth first.
func (s *hfStep) steps() []hfStep {
	if s == nil {
		return nil
	}
	out := []hfStep{*s}
	for _, c := range append(s.Normalizers, s.PreTokenizers...) {
		out = append(out, c.steps()...)
	}
	return out
}

// size is the number of ids the tokenizer uses: one past the largest.
func (tj *hfTokenizer) size() int {
	n := tj.modelSize()
	for _, a := range tj.AddedTokens {
		n = max(n, a.ID+1)
	}
	return n
}

// maxIDGap is how far past its token count a tokenizer's ids may reach (unused ids
// between them): beyond, the file is taken for corrupt rather than sized by it.
const maxIDGap = 1 << 16

// checkIDs refuses ids far past the number of tokens, which would size the
// vocabulary by a corrupt entry.
func (tj *hfTokenizer) checkIDs() error {
	if n, top := len(tj.Model.Vocab)+len(tj.AddedTokens), tj.size(); top > n+maxIDGap {
		return fmt.Errorf("tokenizer.json has ids up to %d for %d tokens", top-1, n)
	}
	return nil
}

// modelSize is the number of ids of the model's own vocabulary, added tokens aside.
func (tj *hfTokenizer) modelSize() int {
	n := 0
	for _, id := range tj.Model.Vocab {
		n = max(n, id+1)
	}
	return n
}

// merges returns the merges as "a b" strings, in rank order.
func (tj *hfTokenizer) merges() ([]string, error) {
	merges := make([]string, 0, len(tj.Model.Merges))
	for _, m := range tj.Model.Merges {
		var s string
		if json.Unmarshal(m, &s) == nil {
			merges = append(merges, s)
			continue
		}
		var pair []string
		if err := json.Unmarshal(m, &pair); err != nil || len(pair) != 2 {
			return nil, fmt.Errorf("tokenizer.json: merge %s is neither \"a b\" nor [a, b]", m)
		}
		merges = append(merges, pair[0]+" "+pair[1])
	}
	return merges, nil
}

// byteLevel reports whether the tokenizer is byte-level BPE (GPT-2, Llama 3, Qwen2).
func (tj *hfTokenizer) byteLevel() bool {
	return tj.Model.Type == "BPE" && strings.Contains(string(tj.PreTokenizer), "ByteLevel")
}

// sentencePiece reports whether the tokenizer is SentencePiece-style BPE: byte
// fallback, and spaces written ▁ by the normalizer (Gemma 3, Llama 2) or by a
// Metaspace pre-tokenizer.
func (tj *hfTokenizer) sentencePiece() bool {
	if tj.Model.Type != "BPE" || !tj.Model.ByteFallback {
		return false
	}
	for _, s := range append(tj.Normalizer.steps(), tj.preSteps()...) {
		if s.Type == "Replace" && s.Content == "▁" || s.Type == "Metaspace" {
			return true
		}
	}
	return false
}

// preSteps returns the pre-tokenizer's steps (none when it is null or unreadable).
func (tj *hfTokenizer) preSteps() []hfStep {
	var pre *hfStep
	_ = json.Unmarshal(tj.PreTokenizer, &pre)
	return pre.steps()
}

// spacePrefix reports whether the tokenizer puts ▁ before the text: a Prepend
// normalizer (Llama 2), or a Metaspace pre-tokenizer that prepends. Gemma 3 does
// not.
func (tj *hfTokenizer) spacePrefix() bool {
	for _, s := range tj.Normalizer.steps() {
		if s.Type == "Prepend" && s.Prepend == "▁" {
			return true
		}
	}
	for _, s := range tj.preSteps() {
		if s.Type == "Metaspace" {
			return s.PrependScheme != "never" && (s.AddPrefixSpace == nil || *s.AddPrefixSpace)
		}
	}
	return false
}

// TokenizerKV turns the tokenizer.json of a Hugging Face directory (with its
// tokenizer_config.json and config.json where present) into GGUF tokenizer metadata
// for a model of vocab tokens, as llama.cpp's converter writes it. Two kinds are
// understood:
//
//   - byte-level BPE (Qwen3, Llama 3): tokenizer.ggml.model "gpt2", the tokens, their
//     types, the merges and the pre-tokenizer's name; vocab 0 means as many tokens as
//     the tokenizer has, and ids past the tokenizer's are unused padding tokens;
//   - SentencePiece-style BPE with byte fallback (Gemma 3, Llama 2): "llama", the
//     tokens, their types and scores, and whether a space is put before the text.
//     vocab 0 means as many tokens as the BPE model has; added tokens past vocab are
//     left out, as the converter leaves them out. See [spmScores] for the scores.
//
// Both get the special ids, add_bos_token and add_eos_token, and the chat template.
func TokenizerKV(dir string, vocab int) ([]gguf.KeyValue, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, err
	}
	var tj hfTokenizer
	if err := json.Unmarshal(raw, &tj); err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	merges, err := tj.merges()
	if err != nil {
		return nil, err
	}
	var kv []gguf.KeyValue
	if vocab <= 0 {
		if err := tj.checkIDs(); err != nil {
			return nil, err
		}
	}
	switch {
	case tj.byteLevel():
		if vocab <= 0 {
			vocab = tj.size()
		}
		kv, err = byteLevelKV(&tj, merges, vocab)
	case tj.sentencePiece():
		if vocab <= 0 {
			vocab = tj.modelSize()
		}
		kv, err = sentencePieceKV(&tj, merges, vocab), nil
	default:
		return nil, errors.New("tokenizer.json is neither byte-level BPE nor SentencePiece-style BPE with byte fallback")
	}
	if err != nil {
		return nil, err
	}
	return append(kv, specialKV(dir, &tj, vocab)...), nil
}

// paddedVocab returns n tokens and types: unused padding tokens "[PADi]".
func paddedVocab(n int) ([]string, []int32) {
	tokens := make([]string, n)
	types := make([]int32, n)
	for i := range tokens {
		tokens[i], types[i] = "[PAD"+strconv.Itoa(i)+"]", tokUnused
	}
	return tokens, types
}

// byteLevelKV is the vocabulary of a byte-level BPE tokenizer.json as "gpt2" metadata
// of vocab tokens.
func byteLevelKV(tj *hfTokenizer, merges []string, vocab int) ([]gguf.KeyValue, error) {
	tokens, types := paddedVocab(vocab)
	set := func(id int, s string, typ int32) error {
		if id < 0 || id >= vocab {
			return fmt.Errorf("token %q has id %d outside the model's vocabulary of %d", s, id, vocab)
		}
		tokens[id], types[id] = s, typ
		return nil
	}
	for s, id := range tj.Model.Vocab {
		if err := set(id, s, tokNormal); err != nil {
			return nil, err
		}
	}
	for _, a := range tj.AddedTokens {
		typ := int32(tokUserDefined)
		if a.Special {
			typ = tokControl
		}
		if err := set(a.ID, a.Content, typ); err != nil {
			return nil, err
		}
	}
	return []gguf.KeyValue{
		{Key: "tokenizer.ggml.model", Value: gguf.String("gpt2")},
		{Key: "tokenizer.ggml.pre", Value: gguf.String(ggufPre(string(tj.PreTokenizer)))},
		{Key: "tokenizer.ggml.tokens", Value: gguf.Strings(tokens)},
		{Key: "tokenizer.ggml.token_type", Value: gguf.Int32s(types)},
		{Key: "tokenizer.ggml.merges", Value: gguf.Strings(merges)},
	}, nil
}

// sentencePieceKV is the vocabulary of a SentencePiece-style BPE tokenizer.json as
// "llama" metadata, the way the converter writes it from a tokenizer.model: byte
// tokens <0xXX> of type byte, the unknown token unknown, added tokens control when
// special (or when they look special, as <unusedN> and <mask> do) and user-defined
// otherwise, with ▁ in them written as a space; ids the tokenizer leaves free are
// unused padding. Tokens past vocab are left out.
func sentencePieceKV(tj *hfTokenizer, merges []string, vocab int) []gguf.KeyValue {
	tokens, types := paddedVocab(vocab)
	for s, id := range tj.Model.Vocab {
		if id < 0 || id >= vocab {
			continue
		}
		tokens[id] = s
		switch {
		case isByteToken(s):
			types[id] = tokByte
		case s == tj.Model.UnkToken:
			types[id] = tokUnknown
		default:
			types[id] = tokNormal
		}
	}
	for _, a := range tj.AddedTokens {
		if a.ID < 0 || a.ID >= vocab {
			continue
		}
		tokens[a.ID], types[a.ID] = a.Content, tokControl
		if !a.Special && !looksSpecial(a.Content) {
			tokens[a.ID], types[a.ID] = strings.ReplaceAll(a.Content, "▁", " "), tokUserDefined
		}
	}
	return []gguf.KeyValue{
		{Key: "tokenizer.ggml.model", Value: gguf.String("llama")},
		{Key: "tokenizer.ggml.pre", Value: gguf.String("default")},
		{Key: "tokenizer.ggml.tokens", Value: gguf.Strings(tokens)},
		{Key: "tokenizer.ggml.scores", Value: gguf.Float32s(spmScores(tokens, types, merges))},
		{Key: "tokenizer.ggml.token_type", Value: gguf.Int32s(types)},
		{Key: "tokenizer.ggml.add_space_prefix", Value: gguf.Bool(tj.spacePrefix())},
	}
}

// spmScores gives SentencePiece scores to a BPE vocabulary, so that SentencePiece's
// merging (llama.cpp's SPM tokenizer: merge the adjacent pair whose concatenation is
// the piece of highest score, leftmost first) segments text as BPE does (merge the
// pair of lowest rank): a normal token that merges make scores −r, r the rank of
// the first merge that makes it; every other token (characters, bytes, added and
// padding tokens) scores below them all, −(len(merges)+1).
//
// This is exact when every split of a token into two tokens is a merge — true of
// tokenizer.json files converted from a tokenizer.model, which list all of them
// ranked by the merged piece's score (Gemma 3's 514 906 merges): the candidate pairs
// are then the same in both, and the pair of lowest rank is the pair whose piece has
// the highest score. The two differ only in the order of two merges that make the
// same token at different places, which cannot change the result.
func spmScores(tokens []string, types []int32, merges []string) []float32 {
	first := make(map[string]int, len(merges))
	for r, m := range merges {
		a, b, _ := strings.Cut(m, " ")
		if _, ok := first[a+b]; !ok {
			first[a+b] = r
		}
	}
	low := -float32(len(merges) + 1)
	scores := make([]float32, len(tokens))
	for i, s := range tokens {
		scores[i] = low
		if r, ok := first[s]; ok && types[i] == tokNormal {
			scores[i] = -float32(r)
		}
	}
	return scores
}

// isByteToken reports whether s is a byte-fallback token, <0xXX>.
func isByteToken(s string) bool {
	if len(s) != 6 || !strings.HasPrefix(s, "<0x") || s[5] != '>' {
		return false
	}
	_, err := strconv.ParseUint(s[3:5], 16, 8)
	return err == nil
}

// looksSpecial reports whether an added token that is not marked special is a
// control token all the same, by the converter's rule (does_token_look_special):
// Gemma's <mask> and <unusedN>, <pad>, and the <|…|> tokens.
func looksSpecial(s string) bool {
	switch s {
	case "<pad>", "<mask>", "<2mass>", "[@BOS@]":
		return true
	}
	return strings.HasPrefix(s, "<|") && strings.HasSuffix(s, "|>") ||
		strings.HasPrefix(s, "<｜") && strings.HasSuffix(s, "｜>") ||
		strings.HasPrefix(s, "<unused") && strings.HasSuffix(s, ">")
}

// specialKV reads the special ids, add_bos_token, add_eos_token and the chat template
// as the converter does: a special token named in tokenizer_config.json, else the id
// config.json gives (the first of a list); ids past the n tokens are left out.
func specialKV(dir string, tj *hfTokenizer, n int) []gguf.KeyValue {
	var cfg map[string]json.RawMessage
	if raw, err := os.ReadFile(filepath.Join(dir, "config.json")); err == nil {
		_ = json.Unmarshal(raw, &cfg)
	}
	var tc map[string]json.RawMessage
	raw, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	haveTC := err == nil && json.Unmarshal(raw, &tc) == nil
	var kv []gguf.KeyValue
	for _, typ := range []struct{ name, key string }{
		{"bos", "bos_token_id"}, {"eos", "eos_token_id"}, {"unk", "unknown_token_id"}, {"pad", "padding_token_id"},
	} {
		id, ok := tj.id(tokenText(tc[typ.name+"_token"]))
		if !ok {
			id, ok = firstID(cfg[typ.name+"_token_id"])
		}
		if ok && id >= 0 && id < n {
			kv = append(kv, gguf.KeyValue{Key: "tokenizer.ggml." + typ.key, Value: gguf.Uint32(uint32(id))})
		}
	}
	if !haveTC {
		return kv
	}
	var add struct {
		BOS          *bool  `json:"add_bos_token"`
		EOS          *bool  `json:"add_eos_token"`
		ChatTemplate string `json:"chat_template"`
	}
	_ = json.Unmarshal(raw, &add)
	kv = append(kv, gguf.KeyValue{Key: "tokenizer.ggml.add_bos_token", Value: gguf.Bool(add.BOS != nil && *add.BOS)})
	if add.EOS != nil {
		kv = append(kv, gguf.KeyValue{Key: "tokenizer.ggml.add_eos_token", Value: gguf.Bool(*add.EOS)})
	}
	if add.ChatTemplate != "" {
		kv = append(kv, gguf.KeyValue{Key: "tokenizer.chat_template", Value: gguf.String(add.ChatTemplate)})
	}
	return kv
}

// id returns the id of token s: an added token's, else the model vocabulary's.
func (tj *hfTokenizer) id(s string) (int, bool) {
	if s == "" {
		return 0, false
	}
	for _, a := range tj.AddedTokens {
		if a.Content == s {
			return a.ID, true
		}
	}
	id, ok := tj.Model.Vocab[s]
	return id, ok
}

// tokenText reads a token of tokenizer_config.json: a string, or an object with its
// content ("" when neither).
func tokenText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var obj struct {
		Content string `json:"content"`
	}
	_ = json.Unmarshal(raw, &obj)
	return obj.Content
}

// ggufPre names the GGUF pre-tokenizer (tokenizer.ggml.pre) of a byte-level
// tokenizer.json's pre_tokenizer by its split pattern: Llama 3's (digits in threes),
// Qwen2's (the same with single digits; Qwen2.5 and Qwen3 keep it), else GPT-2's.
func ggufPre(preTokenizer string) string {
	switch {
	case strings.Contains(preTokenizer, `\\p{N}{1,3}|`):
		return "llama-bpe"
	case strings.Contains(preTokenizer, `\\p{L}+|\\p{N}|`):
		return "qwen2"
	}
	return "gpt-2"
}

// firstID reads a token id given as a number or as a list of numbers.
func firstID(raw json.RawMessage) (int, bool) {
	var id int
	if json.Unmarshal(raw, &id) == nil {
		return id, true
	}
	var ids []int
	if json.Unmarshal(raw, &ids) == nil && len(ids) > 0 {
		return ids[0], true
	}
	return 0, false
}
