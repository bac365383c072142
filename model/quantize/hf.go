package quantize

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/format/gguf"
	"github.com/specula/specula/format/hfquant"
	"github.com/specula/specula/format/safetensors"
	"github.com/specula/specula/model/llama"
)

// ggufName maps a Hugging Face tensor name of a model of architecture arch to its
// llama.cpp name.
func ggufName(name, arch string) (string, bool) {
	if arch == "gemma3" { // a multimodal model's language model, as a text model's
		for _, p := range llama.LanguageModelPrefixes() {
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
		if part, ok := gemma3Part(m[2]); ok {
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

// gemma3Part maps the layer tensors whose names Gemma 3 gives other meanings.
func gemma3Part(name string) (string, bool) {
	switch name {
	case "post_attention_layernorm.weight":
		return "post_attention_norm.weight", true
	case "pre_feedforward_layernorm.weight":
		return "ffn_norm.weight", true
	case "post_feedforward_layernorm.weight":
		return "post_ffw_norm.weight", true
	}
	return "", false
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
	if q, err := hfquant.ReadConfig(dir); err != nil || q != nil {
		if err == nil {
			err = fmt.Errorf("%s: quant_method %s: a quantized checkpoint cannot be converted to GGUF yet (llama.Open loads it)", q.Source, q.Method)
		}
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
			if len(st.Shape) != 1 {
				set.Close()
				return nil, nil, nil, fmt.Errorf("tensor %q: a norm of shape %v", name, st.Shape)
			}
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
