package quantize

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/format/gguf"
	"github.com/specula/specula/format/safetensors"
	"github.com/specula/specula/model/llama"
)

// ggufName maps a Hugging Face tensor name of a model of architecture arch to its
// llama.cpp name.
func ggufName(name, arch string) (string, bool) {
	if arch == "gemma3" { // a multimodal model's language model, as a text model's
		for _, p := range []string{"language_model.model.", "model.language_model."} {
			if rest, ok := strings.CutPrefix(name, p); ok {
				name = "model." + rest
			}
		}
	}
	switch name {
	case "model.embed_tokens.weight":
		return "token_embd.weight", true
	case "model.norm.weight":
		return "output_norm.weight", true
	case "lm_head.weight":
		return "output.weight", true
	}
	m := layerName.FindStringSubmatch(name)
	if m == nil {
		return "", false
	}
	if arch == "gemma3" {
		if part, ok := gemma3Parts[m[2]]; ok {
			return "blk." + m[1] + "." + part, true
		}
	}
	part, ok := map[string]string{
		"input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
		"self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
		"self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
		"self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias", "self_attn.v_proj.bias": "attn_v.bias",
		"mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight",
		"self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight", // Qwen3
		"self_attn.qkv_proj.weight": "attn_qkv.weight", "mlp.gate_up_proj.weight": "ffn_up.weight", // Phi-3, fused
	}[m[2]]
	return "blk." + m[1] + "." + part, ok
}

// gemma3Parts are the layer tensors whose names Gemma 3 gives other meanings.
var gemma3Parts = map[string]string{
	"post_attention_layernorm.weight": "post_attention_norm.weight", "pre_feedforward_layernorm.weight": "ffn_norm.weight",
	"post_feedforward_layernorm.weight": "post_ffw_norm.weight",
}

var layerName = regexp.MustCompile(`^model\.layers\.(\d+)\.(.+)$`)

// permuteRows reorders the rows of each head from Hugging Face's rotate-half layout to
// llama.cpp's interleaved one: row h·d + 2i + j takes row h·d + j·d/2 + i.
func permuteRows(data []byte, heads, rows int) []byte {
	rowBytes := len(data) / rows
	hd := rows / heads
	out := make([]byte, len(data))
	for h := range heads {
		for i := range hd / 2 {
			for j := range 2 {
				dst, src := h*hd+2*i+j, h*hd+j*hd/2+i
				copy(out[dst*rowBytes:(dst+1)*rowBytes], data[src*rowBytes:(src+1)*rowBytes])
			}
		}
	}
	return out
}

// fromHF converts a Hugging Face directory.
func fromHF(ctx context.Context, dir string, m Mix, r *Report) ([]gguf.KeyValue, []gguf.TensorData, func() error, error) {
	c, err := llama.ReadHFConfig(dir)
	if err != nil {
		return nil, nil, nil, err
	}
	set, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, nil, nil, err
	}
	arch := c.Arch
	kv := append(c.GGUFMetadata(filepath.Base(dir)), FileTypeKV(m)...)
	tok, err := TokenizerKV(dir, c.Vocab)
	if err != nil {
		r.Notes = append(r.Notes, "tokenizer left out: "+err.Error())
	}
	kv = append(kv, tok...)

	p := plan{mix: m, layers: c.Layers, tied: c.TiedEmbeddings}
	// Rotary scaling as llama.cpp's converter stores it: llama3's divisors, longrope's
	// long and short factors.
	tensors := c.RopeTensors()
	for _, name := range set.Names() {
		if err := ctx.Err(); err != nil {
			set.Close()
			return nil, nil, nil, err
		}
		gname, ok := ggufName(name, arch)
		if !ok {
			if strings.HasSuffix(name, "rotary_emb.inv_freq") {
				continue // a buffer some checkpoints carry; recomputed from theta
			}
			if arch == "gemma3" && (strings.HasPrefix(name, "vision_tower.") || strings.HasPrefix(name, "multi_modal_projector.") ||
				strings.HasPrefix(name, "model.vision_tower.") || strings.HasPrefix(name, "model.multi_modal_projector.")) {
				continue // the vision part of a multimodal Gemma 3: not the language model's
			}
			set.Close()
			return nil, nil, nil, fmt.Errorf("tensor %q has no GGUF counterpart", name)
		}
		if gname == "output.weight" && c.TiedEmbeddings {
			continue
		}
		st, _ := set.Tensor(name)
		if !st.Supported() {
			set.Close()
			return nil, nil, nil, fmt.Errorf("tensor %q has unsupported dtype %s", name, st.TypeName)
		}
		data, typ := st.Data, st.DType
		if arch == "gemma3" && strings.HasSuffix(gname, "norm.weight") {
			// Gemma's norms multiply by (1 + w): llama.cpp's files hold 1 + w, in F32.
			if data, err = shiftedNorm(typ, data, st.Shape[0], 1); err != nil {
				set.Close()
				return nil, nil, nil, fmt.Errorf("tensor %q: %w", name, err)
			}
			typ = dtype.F32
		}
		// llama.cpp rotates llama Q and K in interleaved pairs: permute their rows.
		if arch == "llama" {
			heads := 0
			switch {
			case strings.HasSuffix(gname, "attn_q.weight") || strings.HasSuffix(gname, "attn_q.bias"):
				heads = c.Heads
			case strings.HasSuffix(gname, "attn_k.weight") || strings.HasSuffix(gname, "attn_k.bias"):
				heads = c.KVHeads
			}
			if heads > 0 {
				data = permuteRows(data, heads, int(st.Shape[0]))
			}
		}
		dims := make([]int64, len(st.Shape))
		for i, d := range st.Shape {
			dims[len(st.Shape)-1-i] = d
		}
		typ, out, err := p.convert(gname, typ, dims, data, r)
		if err != nil {
			set.Close()
			return nil, nil, nil, err
		}
		tensors = append(tensors, gguf.TensorData{Name: gname, Type: typ, Dims: dims, Data: out})
	}
	return kv, tensors, set.Close, nil
}

// shiftedNorm returns the n values of a norm with d added, as F32.
func shiftedNorm(t dtype.DType, data []byte, n int64, d float32) ([]byte, error) {
	v := make([]float32, n)
	if err := dtype.Dequantize(t, data, v); err != nil {
		return nil, err
	}
	for i := range v {
		v[i] += d
	}
	return dtype.Encode(dtype.F32, v)
}

// hfTokenizer is the part of a tokenizer.json a gpt2 GGUF tokenizer needs.
type hfTokenizer struct {
	Model struct {
		Type   string            `json:"type"`
		Vocab  map[string]int    `json:"vocab"`
		Merges []json.RawMessage `json:"merges"`
	} `json:"model"`
	AddedTokens []struct {
		ID      int    `json:"id"`
		Content string `json:"content"`
		Special bool   `json:"special"`
	} `json:"added_tokens"`
	PreTokenizer json.RawMessage `json:"pre_tokenizer"`
}

// size is the number of ids the tokenizer uses: one past the largest.
func (tj *hfTokenizer) size() int {
	n := 0
	for _, id := range tj.Model.Vocab {
		n = max(n, id+1)
	}
	for _, a := range tj.AddedTokens {
		n = max(n, a.ID+1)
	}
	return n
}

// TokenizerKV turns the byte-level BPE tokenizer.json of a Hugging Face directory
// (with its tokenizer_config.json and config.json where present) into GGUF tokenizer
// metadata for a model of vocab tokens (0: as many as the tokenizer has), as
// llama.cpp's converter writes it: the tokens, their types, the merges, the
// pre-tokenizer's name, the special ids, the chat template. Ids past the tokenizer's
// are unused padding tokens.
func TokenizerKV(dir string, vocab int) ([]gguf.KeyValue, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, err
	}
	var tj hfTokenizer
	if err := json.Unmarshal(raw, &tj); err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	if tj.Model.Type != "BPE" || !strings.Contains(string(tj.PreTokenizer), "ByteLevel") {
		return nil, errors.New("tokenizer.json is not a byte-level BPE tokenizer")
	}
	if vocab <= 0 {
		vocab = tj.size()
	}
	tokens := make([]string, vocab)
	types := make([]int32, vocab)
	for i := range tokens {
		tokens[i], types[i] = "[PAD"+strconv.Itoa(i)+"]", 5 // unused
	}
	set := func(id int, s string, typ int32) error {
		if id < 0 || id >= vocab {
			return fmt.Errorf("token %q has id %d outside the model's vocabulary of %d", s, id, vocab)
		}
		tokens[id], types[id] = s, typ
		return nil
	}
	for s, id := range tj.Model.Vocab {
		if err := set(id, s, 1); err != nil {
			return nil, err
		}
	}
	for _, a := range tj.AddedTokens {
		typ := int32(4) // user-defined
		if a.Special {
			typ = 3 // control
		}
		if err := set(a.ID, a.Content, typ); err != nil {
			return nil, err
		}
	}
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
	pre := ggufPre(string(tj.PreTokenizer))
	kv := []gguf.KeyValue{
		{Key: "tokenizer.ggml.model", Value: gguf.String("gpt2")},
		{Key: "tokenizer.ggml.pre", Value: gguf.String(pre)},
		{Key: "tokenizer.ggml.tokens", Value: gguf.Strings(tokens)},
		{Key: "tokenizer.ggml.token_type", Value: gguf.Int32s(types)},
		{Key: "tokenizer.ggml.merges", Value: gguf.Strings(merges)},
	}
	var cfg struct {
		BOS json.RawMessage `json:"bos_token_id"`
		EOS json.RawMessage `json:"eos_token_id"`
	}
	if raw, err := os.ReadFile(filepath.Join(dir, "config.json")); err == nil {
		_ = json.Unmarshal(raw, &cfg)
	}
	var tc struct {
		AddBOS       *bool           `json:"add_bos_token"`
		ChatTemplate string          `json:"chat_template"`
		BOS          json.RawMessage `json:"bos_token"`
		EOS          json.RawMessage `json:"eos_token"`
	}
	haveTC := false
	if raw, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json")); err == nil && json.Unmarshal(raw, &tc) == nil {
		haveTC = true
	}
	ids := func(s string) (int, bool) {
		id, ok := tj.Model.Vocab[s]
		for _, a := range tj.AddedTokens {
			if a.Content == s {
				id, ok = a.ID, true
			}
		}
		return id, ok
	}
	// The special ids of config.json, else the tokens tokenizer_config.json names.
	for _, e := range []struct {
		key      string
		id, text json.RawMessage
	}{{"tokenizer.ggml.bos_token_id", cfg.BOS, tc.BOS}, {"tokenizer.ggml.eos_token_id", cfg.EOS, tc.EOS}} {
		id, ok := firstID(e.id)
		if !ok {
			id, ok = ids(tokenText(e.text))
		}
		if ok {
			kv = append(kv, gguf.KeyValue{Key: e.key, Value: gguf.Uint32(uint32(id))})
		}
	}
	if haveTC {
		kv = append(kv, gguf.KeyValue{Key: "tokenizer.ggml.add_bos_token", Value: gguf.Bool(tc.AddBOS != nil && *tc.AddBOS)})
		if tc.ChatTemplate != "" {
			kv = append(kv, gguf.KeyValue{Key: "tokenizer.chat_template", Value: gguf.String(tc.ChatTemplate)})
		}
	}
	return kv, nil
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
