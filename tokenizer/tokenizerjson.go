package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strings"
)

// The subset of Hugging Face's tokenizer.json that this package understands.

type jsonTokenizer struct {
	AddedTokens   []jsonAddedToken `json:"added_tokens"`
	Normalizer    json.RawMessage  `json:"normalizer"`
	PreTokenizer  json.RawMessage  `json:"pre_tokenizer"`
	PostProcessor json.RawMessage  `json:"post_processor"`
	Decoder       json.RawMessage  `json:"decoder"`
	Model         json.RawMessage  `json:"model"`
}

type jsonAddedToken struct {
	ID         *int64 `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized *bool  `json:"normalized"`
	Special    bool   `json:"special"`
}

type jsonModel struct {
	Type                    string           `json:"type"`
	Dropout                 *float64         `json:"dropout"`
	UnkToken                *string          `json:"unk_token"`
	ContinuingSubwordPrefix *string          `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string          `json:"end_of_word_suffix"`
	FuseUnk                 bool             `json:"fuse_unk"`
	ByteFallback            bool             `json:"byte_fallback"`
	IgnoreMerges            bool             `json:"ignore_merges"`
	Vocab                   json.RawMessage  `json:"vocab"`
	Merges                  json.RawMessage  `json:"merges"`
	vocab                   map[string]int64 // decoded Vocab
}

// component is a normalizer, pre-tokenizer, post-processor or decoder: a "type" and
// type-specific fields.
type component struct {
	Type string `json:"type"`
	// Sequence
	Normalizers   []json.RawMessage `json:"normalizers"`
	PreTokenizers []json.RawMessage `json:"pretokenizers"`
	Processors    []json.RawMessage `json:"processors"`
	Decoders      []json.RawMessage `json:"decoders"`
	// Prepend, Replace, Split, Strip, Metaspace, ByteLevel
	Prepend        string       `json:"prepend"`
	Pattern        *jsonPattern `json:"pattern"`
	Content        *string      `json:"content"`
	Behavior       string       `json:"behavior"`
	Invert         bool         `json:"invert"`
	StripLeft      bool         `json:"strip_left"`
	StripRight     bool         `json:"strip_right"`
	Start          int          `json:"start"`
	Stop           int          `json:"stop"`
	Replacement    *string      `json:"replacement"`
	PrependScheme  *string      `json:"prepend_scheme"`
	Split          *bool        `json:"split"`
	AddPrefixSpace *bool        `json:"add_prefix_space"`
	UseRegex       *bool        `json:"use_regex"`
	// TemplateProcessing
	Single        []templatePiece            `json:"single"`
	SpecialTokens map[string]templateSpecial `json:"special_tokens"`
}

type jsonPattern struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

type templatePiece struct {
	SpecialToken *struct {
		ID string `json:"id"`
	} `json:"SpecialToken"`
	Sequence *struct {
		ID string `json:"id"`
	} `json:"Sequence"`
}

type templateSpecial struct {
	ID  string  `json:"id"`
	IDs []int64 `json:"ids"`
}

// jsonConfig is the part of tokenizer_config.json that matters here.
type jsonConfig struct {
	AddBOSToken *bool           `json:"add_bos_token"`
	AddEOSToken *bool           `json:"add_eos_token"`
	BOSToken    json.RawMessage `json:"bos_token"`
	EOSToken    json.RawMessage `json:"eos_token"`
}

// FromJSON builds a Tokenizer from the contents of a Hugging Face tokenizer.json and,
// optionally (nil), its tokenizer_config.json, which supplies the BOS and EOS tokens
// and whether a BOS is added.
//
// The model must be BPE: byte-level (a ByteLevel pre-tokenizer, alone as in GPT-2 or
// after the Split of Llama 3 and Qwen2), or over characters with byte fallback
// (SentencePiece-style, as Llama 2 and TinyLlama). Other models (WordPiece, Unigram),
// pre-tokenizer regexes other than those of GPT-2, Llama 3 and Qwen2, and components
// this package does not implement give an error that names them.
func FromJSON(tokenizerJSON, tokenizerConfigJSON []byte) (*Tokenizer, error) {
	t, err := fromJSON(tokenizerJSON, tokenizerConfigJSON, nil)
	if err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	return t, nil
}

// fromJSON is FromJSON that also takes generation_config.json's eos_token_id. It
// builds the Tokenizer in the order its parts depend on one another: the vocabulary;
// the normalizer and the pre-tokenizer, which decides whether the model is
// byte-level; the model's byte tokens and merges; the decoder; and last BOS and EOS,
// which refer to tokens of the vocabulary.
func fromJSON(data, configData []byte, extraEOS []int32) (*Tokenizer, error) {
	j, m, err := decodeTokenizerJSON(data)
	if err != nil {
		return nil, err
	}
	t, vocab, err := newJSONVocabulary(m, j.AddedTokens)
	if err != nil {
		return nil, err
	}
	if err := t.parseNormalizer(j.Normalizer, 0); err != nil {
		return nil, fmt.Errorf("normalizer: %w", err)
	}
	byteLevel, err := t.parsePreTokenizer(j.PreTokenizer, 0, true)
	if err != nil {
		return nil, fmt.Errorf("pre_tokenizer: %w", err)
	}
	if err := t.setupJSONModel(m, vocab, byteLevel); err != nil {
		return nil, err
	}
	if err := t.parseDecoder(j.Decoder); err != nil {
		return nil, fmt.Errorf("decoder: %w", err)
	}
	t.buildMatchers()
	if err := t.setupJSONSpecials(j.PostProcessor, configData, extraEOS); err != nil {
		return nil, err
	}
	return t.Tokenizer, nil
}

// decodeTokenizerJSON decodes the document and its model, and checks that the model
// is one this package implements and has a vocab.
func decodeTokenizerJSON(data []byte) (*jsonTokenizer, *jsonModel, error) {
	var j jsonTokenizer
	if err := json.Unmarshal(data, &j); err != nil {
		return nil, nil, fmt.Errorf("not valid JSON: %w", err)
	}
	if isNull(j.Model) {
		return nil, nil, errors.New(`no "model"`)
	}
	var m jsonModel
	if err := json.Unmarshal(j.Model, &m); err != nil {
		return nil, nil, fmt.Errorf("model: %w", err)
	}
	if err := m.checkSupported(); err != nil {
		return nil, nil, err
	}
	if err := m.decodeVocab(); err != nil {
		return nil, nil, err
	}
	return &j, &m, nil
}

// checkSupported accepts plain BPE only: the options that change how BPE works
// (dropout, subword prefixes and suffixes) are refused rather than ignored. A model
// without a type but with merges is BPE.
func (m *jsonModel) checkSupported() error {
	if m.Type == "" && len(m.Merges) > 0 {
		m.Type = "BPE"
	}
	if m.Type != "BPE" {
		return fmt.Errorf("model type %q is not supported (only BPE)", m.Type)
	}
	if m.Dropout != nil && *m.Dropout != 0 {
		return fmt.Errorf("model: BPE dropout %v is not supported", *m.Dropout)
	}
	if m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "" {
		return fmt.Errorf("model: continuing_subword_prefix %q is not supported", *m.ContinuingSubwordPrefix)
	}
	if m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "" {
		return fmt.Errorf("model: end_of_word_suffix %q is not supported", *m.EndOfWordSuffix)
	}
	return nil
}

// decodeVocab decodes the model's vocab, an object of token ids, into m.vocab.
func (m *jsonModel) decodeVocab() error {
	if isNull(m.Vocab) {
		return errors.New(`model has no "vocab"`)
	}
	if err := json.Unmarshal(m.Vocab, &m.vocab); err != nil {
		return fmt.Errorf("model vocab is not an object of token ids: %w", err)
	}
	if len(m.vocab) == 0 {
		return errors.New("model vocab is empty")
	}
	return nil
}

// vocabEntry is a token of the model's vocab.
type vocabEntry struct {
	tok string
	id  int32
}

// modelVocab is the model's own vocab, without the added tokens: the entries in id
// order, and the ids by token text. The unknown token, the merges and the byte
// tokens are looked up in it.
type modelVocab struct {
	entries []vocabEntry
	ids     map[string]int32
}

// newJSONVocabulary starts a Tokenizer that holds the model's tokens and then the
// added tokens, which win an id they share with a model token.
func newJSONVocabulary(m *jsonModel, added []jsonAddedToken) (*builder, *modelVocab, error) {
	n, err := vocabSize(m.vocab, added)
	if err != nil {
		return nil, nil, err
	}
	t := newBuilder(n)
	v, err := t.setModelTokens(m.vocab)
	if err != nil {
		return nil, nil, err
	}
	if err := t.setAddedTokens(added); err != nil {
		return nil, nil, err
	}
	return t, v, nil
}

// vocabSize checks the ids of the model's and the added tokens and returns the
// number of ids they span. Ids much sparser than the tokens are refused, so that a
// small file cannot make the tokenizer allocate room for a huge vocabulary.
func vocabSize(vocab map[string]int64, added []jsonAddedToken) (int, error) {
	n := int64(0)
	for tok, id := range vocab {
		if id < 0 || id >= maxVocab {
			return 0, fmt.Errorf("model vocab: token %q has id %d, outside [0, %d)", tok, id, maxVocab)
		}
		n = max(n, id+1)
	}
	for i, a := range added {
		if a.ID == nil {
			return 0, fmt.Errorf("added_tokens[%d] (%q) has no id", i, a.Content)
		}
		if *a.ID < 0 || *a.ID >= maxVocab {
			return 0, fmt.Errorf("added_tokens[%d] (%q) has id %d, outside [0, %d)", i, a.Content, *a.ID, maxVocab)
		}
		if a.Content == "" {
			return 0, fmt.Errorf("added_tokens[%d] (id %d) is empty", i, *a.ID)
		}
		n = max(n, *a.ID+1)
	}
	if total := int64(len(vocab) + len(added)); n > 2*total+1024 {
		return 0, fmt.Errorf("ids are too sparse: the largest is %d for %d tokens", n-1, total)
	}
	return int(n), nil
}

// setModelTokens gives the model's tokens their ids, whose range vocabSize checked.
// It goes in id order, so that the report of an id given twice and the id map do not
// depend on the order of a Go map.
func (t *builder) setModelTokens(vocab map[string]int64) (*modelVocab, error) {
	entries := make([]vocabEntry, 0, len(vocab))
	for tok, id := range vocab {
		entries = append(entries, vocabEntry{tok, int32(id)})
	}
	sort.Slice(entries, func(a, b int) bool {
		ea, eb := entries[a], entries[b]
		return ea.id < eb.id || ea.id == eb.id && ea.tok < eb.tok
	})
	for i, e := range entries {
		if i > 0 && entries[i-1].id == e.id {
			return nil, fmt.Errorf("model vocab: id %d is given to both %q and %q", e.id, entries[i-1].tok, e.tok)
		}
		t.setToken(e.id, e.tok)
	}
	ids := make(map[string]int32, len(entries))
	for _, e := range entries {
		ids[e.tok] = e.id
	}
	return &modelVocab{entries: entries, ids: ids}, nil
}

// setAddedTokens gives the added tokens their ids, whose range vocabSize checked, and
// registers them to be split out of the text. An added token is normalized unless it
// is special, as in Hugging Face's library, or its "normalized" says otherwise.
func (t *builder) setAddedTokens(added []jsonAddedToken) error {
	seen := make(map[int32]string, len(added))
	for _, a := range added {
		id := int32(*a.ID)
		if prev, ok := seen[id]; ok {
			return fmt.Errorf("added_tokens: id %d is given to both %q and %q", id, prev, a.Content)
		}
		seen[id] = a.Content
		t.vocab[id] = a.Content
		t.attrs[id] |= attrPresent
		t.ids[a.Content] = id
		normalized := !a.Special
		if a.Normalized != nil {
			normalized = *a.Normalized
		}
		t.addAdded(addedToken{id: id, content: a.Content, special: a.Special, singleWord: a.SingleWord,
			lstrip: a.LStrip, rstrip: a.RStrip, normalized: normalized})
	}
	return nil
}

// setupJSONModel sets up the BPE model once the pre-tokenizer has said whether it is
// byte-level: its unknown token and options, the tokens for single bytes, and the
// merges.
func (t *builder) setupJSONModel(m *jsonModel, v *modelVocab, byteLevel bool) error {
	if m.UnkToken != nil && *m.UnkToken != "" {
		id, ok := v.ids[*m.UnkToken]
		if !ok {
			return fmt.Errorf("model: unk_token %q is not in the vocab", *m.UnkToken)
		}
		t.unk = id
	}
	t.ignoreMerges = m.IgnoreMerges
	t.fuseUnk = m.FuseUnk
	if byteLevel {
		t.setByteLevelModel(v)
	} else {
		t.setCharModel(v, m.ByteFallback)
	}
	if err := t.parseMerges(m.Merges, v.ids); err != nil {
		return fmt.Errorf("model merges: %w", err)
	}
	if t.model == modelCharBPE && len(t.pre.splits) == 0 {
		t.setMetaChunks(maps.Keys(v.ids))
	}
	return nil
}

// setByteLevelModel makes the model byte-level BPE: each token stands for the bytes
// its characters map to in GPT-2's byte table, and the initial symbols of a word are
// the tokens of its single bytes. The first id of a byte string is the one
// ignore_merges finds.
func (t *builder) setByteLevelModel(v *modelVocab) {
	t.model = modelByteBPE
	t.rawVocab = make(map[string]int32, len(v.entries))
	for _, e := range v.entries {
		if raw, ok := byteLevelBytes(e.tok); ok {
			if _, dup := t.rawVocab[raw]; !dup {
				t.rawVocab[raw] = e.id
			}
		}
	}
	for b := range 256 {
		if id, ok := v.ids[string(byteToRune[b])]; ok {
			t.byteIDs[b] = id
		}
	}
}

// setCharModel makes the model BPE over characters; with byte fallback, a character
// not in the vocab becomes its bytes' <0xXX> tokens, the first id of each.
func (t *builder) setCharModel(v *modelVocab, byteFallback bool) {
	t.model = modelCharBPE
	t.byteFallback = byteFallback
	if !byteFallback {
		return
	}
	for _, e := range v.entries {
		if b, ok := byteToken(e.tok); ok && t.byteIDs[b] < 0 {
			t.byteIDs[b] = e.id
		}
	}
}

// setupJSONSpecials sets BOS, EOS and whether each is added. tokenizer_config.json
// decides where it says something; the post-processor's template supplies the rest.
func (t *builder) setupJSONSpecials(post json.RawMessage, configData []byte, extraEOS []int32) error {
	cfg, err := decodeJSONConfig(configData)
	if err != nil {
		return err
	}
	prefix, suffix, err := t.parsePostProcessor(post, 0)
	if err != nil {
		return fmt.Errorf("post_processor: %w", err)
	}
	bos, err := t.configToken(cfg.BOSToken, "bos_token")
	if err != nil {
		return err
	}
	eos, err := t.configToken(cfg.EOSToken, "eos_token")
	if err != nil {
		return err
	}
	if bos < 0 && len(prefix) > 0 {
		bos = prefix[0]
	}
	if eos < 0 && len(suffix) > 0 {
		eos = suffix[len(suffix)-1]
	}
	if err := t.setSpecialSequences(cfg, bos, eos, prefix, suffix); err != nil {
		return err
	}
	for _, id := range extraEOS {
		if !t.valid(id) {
			return fmt.Errorf("generation_config.json: eos_token_id %d is not in the vocabulary", id)
		}
	}
	t.finishEOS(eos, extraEOS)
	return nil
}

// decodeJSONConfig decodes tokenizer_config.json; an empty one says nothing.
func decodeJSONConfig(data []byte) (*jsonConfig, error) {
	var cfg jsonConfig
	if len(bytes.TrimSpace(data)) > 0 {
		if err := json.Unmarshal(data, &cfg); err != nil {
			return nil, fmt.Errorf("tokenizer_config.json is not valid: %w", err)
		}
	}
	return &cfg, nil
}

// setSpecialSequences sets what AddBOS and AddEOS put around a text — the template's
// tokens, or else the single BOS or EOS — and whether the model adds them by
// default: as tokenizer_config.json says, or else where the template has tokens.
func (t *builder) setSpecialSequences(cfg *jsonConfig, bos, eos int32, prefix, suffix []int32) error {
	t.bos = bos
	t.bosSeq, t.eosSeq = prefix, suffix
	if len(t.bosSeq) == 0 && bos >= 0 {
		t.bosSeq = []int32{bos}
	}
	if len(t.eosSeq) == 0 && eos >= 0 {
		t.eosSeq = []int32{eos}
	}
	t.addBOS = len(prefix) > 0
	if cfg.AddBOSToken != nil {
		t.addBOS = *cfg.AddBOSToken
	}
	t.addEOS = len(suffix) > 0
	if cfg.AddEOSToken != nil {
		t.addEOS = *cfg.AddEOSToken
	}
	if t.addBOS && len(t.bosSeq) == 0 {
		return errors.New("tokenizer_config.json: add_bos_token is true but there is no bos_token")
	}
	if t.addEOS && len(t.eosSeq) == 0 {
		return errors.New("tokenizer_config.json: add_eos_token is true but there is no eos_token")
	}
	return nil
}

func isNull(m json.RawMessage) bool {
	m = bytes.TrimSpace(m)
	return len(m) == 0 || bytes.Equal(m, []byte("null"))
}

// configToken resolves a bos_token/eos_token of tokenizer_config.json: a string, an
// object with "content", or null. It returns -1 when there is none.
func (t *builder) configToken(raw json.RawMessage, key string) (int32, error) {
	if isNull(raw) {
		return -1, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		var obj struct {
			Content string `json:"content"`
		}
		if err := json.Unmarshal(raw, &obj); err != nil {
			return -1, fmt.Errorf("tokenizer_config.json: %s is neither a string nor a token object", key)
		}
		s = obj.Content
	}
	id, ok := t.ids[s]
	if !ok {
		return -1, fmt.Errorf("tokenizer_config.json: %s %q is not in the vocabulary", key, s)
	}
	return id, nil
}

// parseMerges reads merges as "a b" strings or [a, b] pairs, in rank order.
func (t *builder) parseMerges(raw json.RawMessage, ids map[string]int32) error {
	if isNull(raw) {
		t.merges = map[uint64]uint64{}
		return nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return errors.New("not a list")
	}
	t.merges = make(map[uint64]uint64, len(list))
	for rank, item := range list {
		var a, b string
		var s string
		var pair []string
		switch {
		case json.Unmarshal(item, &s) == nil:
			parts := strings.Split(s, " ")
			if len(parts) != 2 {
				return fmt.Errorf("merge %d %q is not two tokens separated by one space", rank, s)
			}
			a, b = parts[0], parts[1]
		case json.Unmarshal(item, &pair) == nil:
			if len(pair) != 2 {
				return fmt.Errorf("merge %d has %d tokens, not 2", rank, len(pair))
			}
			a, b = pair[0], pair[1]
		default:
			return fmt.Errorf("merge %d is neither a string nor a pair of strings", rank)
		}
		ia, ok := ids[a]
		if !ok {
			return fmt.Errorf("merge %d (%q %q): %q is not in the vocab", rank, a, b, a)
		}
		ib, ok := ids[b]
		if !ok {
			return fmt.Errorf("merge %d (%q %q): %q is not in the vocab", rank, a, b, b)
		}
		im, ok := ids[a+b]
		if !ok {
			return fmt.Errorf("merge %d (%q %q): the merged token %q is not in the vocab", rank, a, b, a+b)
		}
		key := uint64(uint32(ia))<<32 | uint64(uint32(ib))
		if _, dup := t.merges[key]; !dup { // the first (lowest) rank wins
			t.merges[key] = uint64(rank)<<32 | uint64(uint32(im))
		}
	}
	return nil
}

func parseComponent(raw json.RawMessage) (*component, error) {
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, err
	}
	return &c, nil
}

const maxDepth = 8

func (t *builder) parseNormalizer(raw json.RawMessage, depth int) error {
	if isNull(raw) {
		return nil
	}
	if depth > maxDepth {
		return errors.New("nested too deeply")
	}
	c, err := parseComponent(raw)
	if err != nil {
		return err
	}
	switch c.Type {
	case "Sequence":
		for _, sub := range c.Normalizers {
			if err := t.parseNormalizer(sub, depth+1); err != nil {
				return err
			}
		}
	case "NFC":
		t.norm.steps = append(t.norm.steps, normStep{kind: normNFC})
	case "NFD":
		t.norm.steps = append(t.norm.steps, normStep{kind: normNFD})
	case "NFKC":
		t.norm.steps = append(t.norm.steps, normStep{kind: normNFKC})
	case "NFKD":
		t.norm.steps = append(t.norm.steps, normStep{kind: normNFKD})
	case "Prepend":
		t.norm.steps = append(t.norm.steps, normStep{kind: normPrepend, a: c.Prepend})
	case "Replace":
		from, err := stringPattern(c.Pattern, "Replace")
		if err != nil {
			return err
		}
		to := ""
		if c.Content != nil {
			to = *c.Content
		}
		t.norm.steps = append(t.norm.steps, normStep{kind: normReplace, a: from, b: to})
	case "Strip":
		t.norm.steps = append(t.norm.steps, normStep{kind: normStrip, left: c.StripLeft, right: c.StripRight})
	default:
		return fmt.Errorf("normalizer type %q is not supported", c.Type)
	}
	return nil
}

func stringPattern(p *jsonPattern, what string) (string, error) {
	switch {
	case p == nil:
		return "", fmt.Errorf("%s has no pattern", what)
	case p.String != nil:
		return *p.String, nil
	case p.Regex != nil:
		return "", fmt.Errorf("%s with a regex pattern %q is not supported", what, *p.Regex)
	}
	return "", fmt.Errorf("%s pattern is neither String nor Regex", what)
}

// parsePreTokenizer reads the pre-tokenizer; it reports whether a ByteLevel step is
// there (which makes the model byte-level). first tells whether this step is the
// first of the chain: only the first may transform the whole section.
func (t *builder) parsePreTokenizer(raw json.RawMessage, depth int, first bool) (bool, error) {
	if isNull(raw) {
		return false, nil
	}
	if depth > maxDepth {
		return false, errors.New("nested too deeply")
	}
	c, err := parseComponent(raw)
	if err != nil {
		return false, err
	}
	switch c.Type {
	case "Sequence":
		byteLevel := false
		for i, sub := range c.PreTokenizers {
			bl, err := t.parsePreTokenizer(sub, depth+1, first && i == 0)
			if err != nil {
				return false, err
			}
			byteLevel = byteLevel || bl
		}
		return byteLevel, nil
	case "ByteLevel":
		return true, t.preByteLevel(c, first)
	case "Split":
		return false, t.preSplit(c)
	case "Metaspace":
		return false, t.preMetaspace(c, first)
	}
	return false, fmt.Errorf("pre-tokenizer type %q is not supported", c.Type)
}

// preByteLevel reads a ByteLevel pre-tokenizer: an optional space in front of the
// section, and the GPT-2 split unless use_regex is false.
func (t *builder) preByteLevel(c *component, first bool) error {
	if c.AddPrefixSpace != nil && *c.AddPrefixSpace {
		if !first {
			return errors.New("ByteLevel with add_prefix_space after another pre-tokenizer is not supported")
		}
		t.pre.prefixSpace = true
	}
	if c.UseRegex == nil || *c.UseRegex {
		t.pre.splits = append(t.pre.splits, splitGPT2)
	}
	return nil
}

// preSplit reads a Split pre-tokenizer. Go's regexp cannot run the regex patterns
// (they use lookahead), so only the known ones are accepted, each with its
// hand-written scanner; a String pattern (Gemma 3 splits on " ", MergedWithPrevious)
// is cut where the literal is.
func (t *builder) preSplit(c *component) error {
	if c.Pattern == nil || c.Pattern.Regex == nil && c.Pattern.String == nil {
		return errors.New("Split has neither a Regex nor a String pattern")
	}
	if c.Invert {
		return errors.New("Split with invert true is not supported")
	}
	if c.Pattern.Regex == nil {
		return t.preSplitString(c)
	}
	if !strings.EqualFold(c.Behavior, "Isolated") {
		return fmt.Errorf("Split with behavior %q is not supported (only Isolated)", c.Behavior)
	}
	var k splitKind
	switch *c.Pattern.Regex {
	case patternGPT2:
		k = splitGPT2
	case patternLlama3:
		k = splitLlama3
	case patternQwen2:
		k = splitQwen2
	default:
		return fmt.Errorf("Split regex %q is not supported (known: the GPT-2, Llama 3 and Qwen2 patterns)", *c.Pattern.Regex)
	}
	t.pre.splits = append(t.pre.splits, k)
	return nil
}

// preSplitString reads a Split on a literal string, with behavior MergedWithPrevious
// or Isolated; one literal per tokenizer.
func (t *builder) preSplitString(c *component) error {
	lit := *c.Pattern.String
	switch {
	case lit == "":
		return errors.New("Split with an empty String pattern")
	case t.pre.literal != "" && t.pre.literal != lit:
		return fmt.Errorf("a second Split on a String pattern (%q after %q) is not supported", lit, t.pre.literal)
	}
	var k splitKind
	switch strings.ToLower(c.Behavior) {
	case "mergedwithprevious":
		k = splitMergedPrev
	case "isolated":
		k = splitIsolated
	default:
		return fmt.Errorf("Split on a String with behavior %q is not supported (only MergedWithPrevious and Isolated)", c.Behavior)
	}
	t.pre.literal = lit
	t.pre.splits = append(t.pre.splits, k)
	return nil
}

// preMetaspace reads a Metaspace pre-tokenizer: spaces become the replacement
// character, which is also put in front as prepend_scheme (or the older
// add_prefix_space) says, and with split the section is cut before each one.
func (t *builder) preMetaspace(c *component, first bool) error {
	if !first {
		return errors.New("Metaspace after another pre-tokenizer is not supported")
	}
	repl := metaspaceReplacement(c)
	t.pre.meta, t.pre.metaRepl = true, repl
	t.pre.metaPrepend = prependAlways
	switch {
	case c.PrependScheme != nil:
		switch *c.PrependScheme {
		case "always":
		case "first":
			t.pre.metaPrepend = prependFirst
		case "never":
			t.pre.metaPrepend = prependNever
		default:
			return fmt.Errorf("Metaspace prepend_scheme %q is not known", *c.PrependScheme)
		}
	case c.AddPrefixSpace != nil && !*c.AddPrefixSpace:
		t.pre.metaPrepend = prependNever
	}
	if c.Split == nil || *c.Split {
		if repl != "▁" {
			return fmt.Errorf("Metaspace split with replacement %q is not supported", repl)
		}
		t.pre.splits = append(t.pre.splits, splitMetaspace)
	}
	return nil
}

// metaspaceReplacement is the character a Metaspace component puts for a space: its
// replacement, ▁ by default.
func metaspaceReplacement(c *component) string {
	if c.Replacement != nil && *c.Replacement != "" {
		return *c.Replacement
	}
	return "▁"
}

// parsePostProcessor returns the special tokens the template puts before and after
// a single sequence.
func (t *builder) parsePostProcessor(raw json.RawMessage, depth int) (prefix, suffix []int32, err error) {
	if isNull(raw) {
		return nil, nil, nil
	}
	if depth > maxDepth {
		return nil, nil, errors.New("nested too deeply")
	}
	c, err := parseComponent(raw)
	if err != nil {
		return nil, nil, err
	}
	switch c.Type {
	case "ByteLevel":
		return nil, nil, nil
	case "Sequence":
		for _, sub := range c.Processors {
			p, s, err := t.parsePostProcessor(sub, depth+1)
			if err != nil {
				return nil, nil, err
			}
			if len(p) > 0 || len(s) > 0 {
				prefix, suffix = p, s
			}
		}
		return prefix, suffix, nil
	case "TemplateProcessing":
		seenSeq := false
		for _, piece := range c.Single {
			switch {
			case piece.Sequence != nil:
				seenSeq = true
			case piece.SpecialToken != nil:
				ids, err := t.templateIDs(c, piece.SpecialToken.ID)
				if err != nil {
					return nil, nil, err
				}
				if seenSeq {
					suffix = append(suffix, ids...)
				} else {
					prefix = append(prefix, ids...)
				}
			}
		}
		return prefix, suffix, nil
	}
	return nil, nil, fmt.Errorf("post-processor type %q is not supported", c.Type)
}

func (t *builder) templateIDs(c *component, name string) ([]int32, error) {
	var out []int32
	if sp, ok := c.SpecialTokens[name]; ok && len(sp.IDs) > 0 {
		for _, id := range sp.IDs {
			if id < 0 || id >= int64(len(t.vocab)) || !t.valid(int32(id)) {
				return nil, fmt.Errorf("TemplateProcessing: special token %q has id %d, which is not in the vocabulary", name, id)
			}
			out = append(out, int32(id))
		}
		return out, nil
	}
	id, ok := t.ids[name]
	if !ok {
		return nil, fmt.Errorf("TemplateProcessing: special token %q is not in the vocabulary", name)
	}
	return []int32{id}, nil
}

// parseDecoder sets what each id decodes to.
func (t *builder) parseDecoder(raw json.RawMessage) error {
	if isNull(raw) {
		return errors.New("there is none; decoding needs one")
	}
	c, err := parseComponent(raw)
	if err != nil {
		return err
	}
	switch c.Type {
	case "ByteLevel":
		t.decodeByteLevel()
		return nil
	case "Metaspace":
		t.decodeMetaspace(c)
		return nil
	case "Sequence":
		seq, err := parseDecoderSequence(c.Decoders)
		if err != nil {
			return err
		}
		t.decodeSequence(seq)
		return nil
	}
	return fmt.Errorf("decoder type %q is not supported", c.Type)
}

// decodeByteLevel makes each token decode to the bytes its characters stand for in
// GPT-2's byte table.
func (t *builder) decodeByteLevel() {
	for id, tok := range t.vocab {
		if t.attrs[id]&attrPresent == 0 {
			continue
		}
		if raw, ok := byteLevelBytes(tok); ok {
			t.pieces[id] = raw
		} else {
			t.pieces[id] = tok // Hugging Face passes such tokens through
		}
	}
}

// decodeMetaspace makes the replacement character decode to a space, and removes the
// space put in front of the text unless the decoder says none was put there.
func (t *builder) decodeMetaspace(c *component) {
	repl := metaspaceReplacement(c)
	for id, tok := range t.vocab {
		t.pieces[id] = strings.ReplaceAll(tok, repl, " ")
	}
	strip := true
	if c.PrependScheme != nil && *c.PrependScheme == "never" || c.PrependScheme == nil && c.AddPrefixSpace != nil && !*c.AddPrefixSpace {
		strip = false
	}
	if strip {
		t.stripLeading = 1
	}
}

// decoderSequence is what a Sequence of decoders does, in the combinations of
// Replace, ByteFallback, Fuse and Strip that SentencePiece-style tokenizers use.
type decoderSequence struct {
	replFrom, replTo string // Replace: replFrom becomes replTo ("" for none)
	byteFallback     bool   // <0xXX> tokens decode to their byte
	strip            int    // Strip: leading spaces removed
}

// parseDecoderSequence reads the decoders of a Sequence.
func parseDecoderSequence(decoders []json.RawMessage) (decoderSequence, error) {
	var seq decoderSequence
	for _, sub := range decoders {
		d, err := parseComponent(sub)
		if err != nil {
			return seq, err
		}
		switch d.Type {
		case "Replace":
			from, err := stringPattern(d.Pattern, "Replace decoder")
			if err != nil {
				return seq, err
			}
			if seq.replFrom != "" {
				return seq, errors.New("more than one Replace decoder is not supported")
			}
			seq.replFrom = from
			if d.Content != nil {
				seq.replTo = *d.Content
			}
		case "ByteFallback":
			seq.byteFallback = true
		case "Fuse":
		case "Strip":
			if d.Content == nil || *d.Content != " " || d.Stop != 0 || d.Start < 0 {
				return seq, errors.New("Strip decoder is supported only for leading spaces")
			}
			seq.strip = d.Start
		default:
			return seq, fmt.Errorf("decoder type %q is not supported in a Sequence", d.Type)
		}
	}
	return seq, nil
}

// decodeSequence sets each token's decoded text as seq says.
func (t *builder) decodeSequence(seq decoderSequence) {
	for id, tok := range t.vocab {
		if t.attrs[id]&attrPresent == 0 {
			continue
		}
		if b, ok := byteToken(tok); ok && seq.byteFallback {
			t.pieces[id] = string([]byte{b})
			continue
		}
		if seq.replFrom != "" {
			tok = strings.ReplaceAll(tok, seq.replFrom, seq.replTo)
		}
		t.pieces[id] = tok
	}
	t.stripLeading = seq.strip
}
