package quantize

import (
	"context"
	"errors"
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

// fromHF converts a Hugging Face directory. A quantized checkpoint's linear layers
// are written as their exact Q4_0 or Q8_0 repacking (hfquant.Scheme.PackedAs), byte
// for byte what the runtime loads; a layer no GGUF type holds exactly is refused,
// naming it and why, unless o.Requantize, which quantizes its dense values by the
// mix's rules (lossy, and said so in the report's notes).
func fromHF(ctx context.Context, dir string, m Mix, o Options, r *Report) ([]gguf.KeyValue, []gguf.TensorData, func() error, error) {
	c, err := llama.ReadHFConfig(dir)
	if err != nil {
		return nil, nil, nil, err
	}
	q, err := hfquant.ReadConfig(dir)
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
	requantized := 0
	for _, name := range set.Names() {
		if err := ctx.Err(); err != nil {
			set.Close()
			return nil, nil, nil, err
		}
		layer := "" // the prefix of a quantized linear layer
		if q != nil {
			if prefix, packed, ok := q.LayerOf(set, name); ok {
				if !packed {
					continue // read with the layer's packed weight
				}
				layer, name = prefix, prefix+".weight"
			}
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
		var data []byte
		var typ dtype.DType
		var shape []int64
		var ql qlayer
		if layer != "" {
			if ql, err = quantizedLayer(q, set, layer, o); err != nil {
				set.Close()
				return nil, nil, nil, err
			}
			data, typ, shape = ql.data, ql.typ, ql.shape
			if ql.lossy {
				requantized++
			}
		} else {
			st, _ := set.Tensor(name)
			if !st.Supported() {
				set.Close()
				return nil, nil, nil, fmt.Errorf("tensor %q has unsupported dtype %s", name, st.TypeName)
			}
			data, typ, shape = st.Data, st.DType, st.Shape
		}
		if arch == "gemma3" && strings.HasSuffix(gname, "norm.weight") {
			if len(shape) != 1 {
				set.Close()
				return nil, nil, nil, fmt.Errorf("tensor %q: a norm of shape %v", name, shape)
			}
			// Gemma's norms multiply by (1 + w): llama.cpp's files hold 1 + w, in F32.
			if data, err = shiftedNorm(typ, data, shape[0], 1); err != nil {
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
				data = permuteRows(data, heads, int(shape[0]))
			}
		}
		dims := make([]int64, len(shape))
		for i, d := range shape {
			dims[len(shape)-1-i] = d
		}
		if ql.exact { // written as stored: the runtime's own repacking, byte for byte
			r.Exact++
			r.BytesIn += ql.stored
			r.BytesOut += int64(len(data))
			tensors = append(tensors, gguf.TensorData{Name: gname, Type: typ, Dims: dims, Data: data})
			continue
		}
		typ, out, err := p.convert(gname, typ, dims, data, r)
		if err != nil {
			set.Close()
			return nil, nil, nil, err
		}
		if ql.lossy { // counted as its dense F32 values: count the checkpoint's bytes
			r.BytesIn += ql.stored - int64(len(data))
		}
		tensors = append(tensors, gguf.TensorData{Name: gname, Type: typ, Dims: dims, Data: out})
	}
	if requantized > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("lossy: %d quantized layers that no GGUF type holds exactly were re-quantized from their dense values by the %s mix's rules", requantized, m))
	}
	return kv, tensors, set.Close, nil
}

// qlayer is a quantized linear layer as GGUF takes it.
type qlayer struct {
	typ    dtype.DType
	shape  []int64 // [out, in]
	data   []byte
	stored int64 // the bytes of the checkpoint's tensors
	exact  bool  // the exact Q4_0 or Q8_0 repacking, written as it is
	lossy  bool  // dense values, for the mix to quantize
}

// quantizedLayer returns the linear layer prefix of a quantized checkpoint as GGUF
// takes it: its exact Q4_0 or Q8_0 repacking, else, when o.Requantize, its dense
// values as F32 for the mix to quantize, else an error naming the layer and why no
// GGUF type holds it.
func quantizedLayer(q *hfquant.Scheme, set *safetensors.Set, prefix string, o Options) (qlayer, error) {
	pk, err := q.PackedAs(set, prefix, dtype.Q4_0, dtype.Q8_0)
	if err == nil {
		return qlayer{typ: pk.Type, shape: []int64{int64(pk.Rows), int64(pk.Cols)}, data: pk.Data, stored: pk.Stored, exact: true}, nil
	}
	if !errors.Is(err, hfquant.ErrNotExact) {
		return qlayer{}, err
	}
	if !o.Requantize {
		return qlayer{}, fmt.Errorf("quant_method %s: %w; no GGUF type holds this layer exactly (Options.Requantize, quantize's -requantize, converts it lossily by the mix's rules)", q.Method, err)
	}
	m, err := q.Dense(set, prefix)
	if err != nil {
		return qlayer{}, err
	}
	data, err := dtype.Encode(dtype.F32, m.Data)
	if err != nil {
		return qlayer{}, err
	}
	return qlayer{typ: dtype.F32, shape: []int64{int64(m.Rows), int64(m.Cols)}, data: data, stored: m.Stored, lossy: true}, nil
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
