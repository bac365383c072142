package synth

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/format/hfquant"
	"github.com/specula/specula/format/safetensors"
)

// Format is a quantized Hugging Face checkpoint format WriteHF writes, as the
// common releases of a model in it store it.
type Format string

// The formats: 4-bit codes in groups of 128 inputs, embeddings, norms and biases in
// float16.
const (
	// AWQ is AutoAWQ's GEMM layout with zero points (quant_method awq).
	AWQ Format = "awq"
	// GPTQ is asymmetric GPTQ, checkpoint format gptq (v1), desc_act false.
	GPTQ Format = "gptq"
	// GPTQActOrder is GPTQ with desc_act true: a random permutation of the inputs
	// into groups (g_idx), as act-order quantization leaves them.
	GPTQActOrder Format = "gptq-act"
	// W4A16 is compressed-tensors pack-quantized, symmetric (llm-compressor's W4A16).
	W4A16 Format = "w4a16"
)

// Formats lists the formats.
func Formats() []Format { return []Format{AWQ, GPTQ, GPTQActOrder, W4A16} }

// ParseFormat returns the format of the given name.
func ParseFormat(name string) (Format, error) {
	for _, f := range Formats() {
		if strings.EqualFold(string(f), name) {
			return f, nil
		}
	}
	var names []string
	for _, f := range Formats() {
		names = append(names, string(f))
	}
	return "", fmt.Errorf("synth: unknown format %q (known: %s)", name, strings.Join(names, ", "))
}

// hfGroup is the group size of every format.
const hfGroup = 128

// quantizationConfig is config.json's quantization_config for the format, as
// AutoAWQ, AutoGPTQ and llm-compressor write it.
func (f Format) quantizationConfig() map[string]any {
	switch f {
	case AWQ:
		return map[string]any{"quant_method": "awq", "bits": 4, "group_size": hfGroup, "zero_point": true, "version": "gemm", "modules_to_not_convert": nil}
	case GPTQ, GPTQActOrder:
		return map[string]any{"quant_method": "gptq", "bits": 4, "group_size": hfGroup, "desc_act": f == GPTQActOrder, "sym": false,
			"checkpoint_format": "gptq", "damp_percent": 0.01, "static_groups": false, "true_sequential": true}
	}
	return map[string]any{
		"quant_method": "compressed-tensors", "format": "pack-quantized", "quantization_status": "compressed", "ignore": []string{"lm_head"},
		"config_groups": map[string]any{"group_0": map[string]any{
			"targets": []string{"Linear"}, "input_activations": nil, "output_activations": nil,
			"weights": map[string]any{"num_bits": 4, "type": "int", "symmetric": true, "strategy": "group", "group_size": hfGroup,
				"dynamic": false, "actorder": nil, "observer": "minmax"},
		}},
	}
}

// hfArch is the Hugging Face architecture of a shape WriteHF can write.
func hfArch(arch string) (string, bool) {
	a, ok := map[string]string{"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}[arch]
	return a, ok
}

// WriteHF writes a model of shape s, its linear layers quantized in format f, as a
// Hugging Face directory dir (created if need be): config.json with the format's
// quantization_config, the weights sharded as save_pretrained shards them
// (shardBytes a shard; 0: 2 GB) with model.safetensors.index.json, and the
// tokenizer.json (and tokenizer_config.json) of the Hugging Face directory tokenizer.
// The weights are random, with the statistics of Write's: each layer's dense values
// have a standard deviation near 1/√in, from 4-bit codes uniform in 0…15, zero points
// uniform (AWQ), as GPTQ's min-max quantizer sets them for normal values (GPTQ), or 8
// (symmetric W4A16), and float16 scales; the embedding and output layer are float16
// (as AWQ and GPTQ releases keep them), norms ones and biases small, in float16. It
// streams: one layer's codes are in memory at a time. Llama, Qwen2 and Qwen3 shapes
// only (the fused and Gemma ones have no such releases to copy).
func WriteHF(dir string, s Shape, f Format, tokenizer string, seed uint64, shardBytes int64) error {
	c := s.Config
	arch, ok := hfArch(c.Arch)
	if !ok || c.Fused {
		return fmt.Errorf("synth: %s: architecture %s has no quantized Hugging Face form here (llama, qwen2 and qwen3 do)", s.Name, c.Arch)
	}
	if _, err := ParseFormat(string(f)); err != nil {
		return err
	}
	if shardBytes <= 0 {
		shardBytes = 2 << 30
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	for _, name := range []string{"tokenizer.json", "tokenizer_config.json"} {
		b, err := os.ReadFile(filepath.Join(tokenizer, name))
		if err != nil && name == "tokenizer_config.json" {
			continue
		}
		if err != nil {
			return fmt.Errorf("synth: the tokenizer: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return fmt.Errorf("synth: %w", err)
		}
	}
	cfg := map[string]any{
		"architectures": []string{arch}, "model_type": c.Arch, "hidden_size": c.Dim, "intermediate_size": c.FFN,
		"num_attention_heads": c.Heads, "num_key_value_heads": c.KVHeads, "head_dim": c.HeadDim, "num_hidden_layers": c.Layers,
		"rms_norm_eps": c.NormEps, "rope_theta": c.RopeTheta, "vocab_size": c.Vocab, "max_position_embeddings": c.ContextLength,
		"tie_word_embeddings": c.TiedEmbeddings, "hidden_act": "silu", "torch_dtype": "float16", "attention_bias": c.QKVBias,
		"use_sliding_window": false, "sliding_window": nil, "quantization_config": f.quantizationConfig(),
	}
	if c.RopeFreqFactors != nil || c.RopeLongFactors != nil || c.SlidingWindow > 0 {
		return fmt.Errorf("synth: %s: rope scaling and sliding windows are not written to config.json here", s.Name)
	}
	js, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), append(js, '\n'), 0o644); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	entries, err := hfEntries(s, f, seed)
	if err != nil {
		return err
	}
	if _, err := safetensors.WriteDir(dir, entries, shardBytes, map[string]string{"format": "pt"}); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	return nil
}

// hfEntries lists the tensors of the model in Hugging Face's names and order.
func hfEntries(s Shape, f Format, seed uint64) ([]safetensors.Entry, error) {
	c := s.Config
	qd, kvd := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	var out []safetensors.Entry
	n := uint64(0)
	next := func() *rand.Rand { n++; return rand.New(rand.NewPCG(seed, n)) }
	half := func(name string, rows, cols int, sd float64, mean float32) {
		rng, shape := next(), []int64{int64(rows)}
		if cols > 0 {
			shape = append(shape, int64(cols))
		}
		n := rows * max(cols, 1)
		out = append(out, safetensors.Entry{Name: name, TypeName: "F16", Shape: shape, Size: 2 * int64(n),
			WriteTo: func(w io.Writer) error { return halfRows(w, rows, max(cols, 1), sd, mean, rng) }})
	}
	linear := func(name string, rows, cols int) error {
		e, err := quantEntries(name, f, rows, cols, next())
		out = append(out, e...)
		return err
	}
	half("model.embed_tokens.weight", c.Vocab, c.Dim, 1/math.Sqrt(float64(c.Dim)), 0)
	for l := range c.Layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		half(p+"input_layernorm.weight", c.Dim, 0, 0, 1)
		for _, m := range []struct {
			name       string
			rows, cols int
			bias       bool
		}{
			{"self_attn.q_proj", qd, c.Dim, c.QKVBias}, {"self_attn.k_proj", kvd, c.Dim, c.QKVBias}, {"self_attn.v_proj", kvd, c.Dim, c.QKVBias},
			{"self_attn.o_proj", c.Dim, qd, false},
			{"mlp.gate_proj", c.FFN, c.Dim, false}, {"mlp.up_proj", c.FFN, c.Dim, false}, {"mlp.down_proj", c.Dim, c.FFN, false},
		} {
			if err := linear(p+m.name, m.rows, m.cols); err != nil {
				return nil, err
			}
			if m.bias {
				half(p+m.name+".bias", m.rows, 0, 0.02, 0)
			}
		}
		if c.QKNorm {
			half(p+"self_attn.q_norm.weight", c.HeadDim, 0, 0, 1)
			half(p+"self_attn.k_norm.weight", c.HeadDim, 0, 0, 1)
		}
		half(p+"post_attention_layernorm.weight", c.Dim, 0, 0, 1)
	}
	half("model.norm.weight", c.Dim, 0, 0, 1)
	if !c.TiedEmbeddings {
		half("lm_head.weight", c.Vocab, c.Dim, 1/math.Sqrt(float64(c.Dim)), 0)
	}
	return out, nil
}

// halfRows writes rows × cols float16 values, normal of mean mean and deviation sd.
func halfRows(w io.Writer, rows, cols int, sd float64, mean float32, rng *rand.Rand) error {
	return floatRows(w, dtype.F16, rows, cols, sd, mean, rng)
}

// floatRows writes rows × cols values of the float type t (F16, BF16 or F32), normal
// of mean mean and deviation sd, a row at a time.
func floatRows(w io.Writer, t dtype.DType, rows, cols int, sd float64, mean float32, rng *rand.Rand) error {
	vals := make([]float32, cols)
	for range rows {
		for i := range vals {
			vals[i] = mean + float32(rng.NormFloat64()*sd)
		}
		b, err := dtype.Encode(t, vals)
		if err != nil {
			return err
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// quantEntries lists the tensors of one quantized linear layer of rows × cols
// (out × in). The layer is drawn and encoded when its first tensor is written, and
// each tensor's bytes dropped once written.
func quantEntries(prefix string, f Format, rows, cols int, rng *rand.Rand) ([]safetensors.Entry, error) {
	if rows%8 != 0 || cols%hfGroup != 0 {
		return nil, fmt.Errorf("synth: %s: %d × %d does not divide into words of 8 codes and groups of %d", prefix, rows, cols, hfGroup)
	}
	ng := cols / hfGroup
	type spec struct {
		suffix, typ string
		shape       []int64
	}
	var specs []spec
	switch f {
	case AWQ:
		specs = []spec{{".qweight", "I32", []int64{int64(cols), int64(rows / 8)}}, {".qzeros", "I32", []int64{int64(ng), int64(rows / 8)}},
			{".scales", "F16", []int64{int64(ng), int64(rows)}}}
	case GPTQ, GPTQActOrder:
		specs = []spec{{".g_idx", "I32", []int64{int64(cols)}}, {".qweight", "I32", []int64{int64(cols / 8), int64(rows)}},
			{".qzeros", "I32", []int64{int64(ng), int64(rows / 8)}}, {".scales", "F16", []int64{int64(ng), int64(rows)}}}
	case W4A16:
		specs = []spec{{".weight_packed", "I32", []int64{int64(rows), int64(cols / 8)}}, {".weight_scale", "F16", []int64{int64(rows), int64(ng)}},
			{".weight_shape", "I64", []int64{2}}}
	}
	var encoded hfquant.Tensors
	out := make([]safetensors.Entry, len(specs))
	for i, sp := range specs {
		n := int64(1)
		for _, d := range sp.shape {
			n *= d
		}
		bits, _ := safetensors.TypeBits(sp.typ)
		size := n * bits / 8
		out[i] = safetensors.Entry{Name: prefix + sp.suffix, TypeName: sp.typ, Shape: sp.shape, Size: size, WriteTo: func(w io.Writer) error {
			if encoded == nil {
				var err error
				if encoded, err = encodeRandom(f, rows, cols, rng); err != nil {
					return fmt.Errorf("%s: %w", prefix, err)
				}
			}
			t, ok := encoded[sp.suffix]
			if !ok || !slices.Equal(t.Shape, sp.shape) {
				return fmt.Errorf("%s%s: the encoder gave no tensor of shape %v", prefix, sp.suffix, sp.shape)
			}
			delete(encoded, sp.suffix)
			if len(encoded) == 0 {
				encoded = nil
			}
			_, err := w.Write(t.Data)
			return err
		}}
	}
	return out, nil
}

// zeroPool is how many groups gptqZeros draws zero points from.
const zeroPool = 4096

// encodeRandom draws a layer's codes, zero points and scales and encodes them.
func encodeRandom(f Format, rows, cols int, rng *rand.Rand) (hfquant.Tensors, error) {
	ng := cols / hfGroup
	c := hfquant.Codes{Rows: rows, Cols: cols, Groups: ng, Bits: 4, GroupSize: hfGroup,
		Q: make([]uint8, rows*cols), Zero: make([]uint8, rows*ng), Scale: make([]float32, rows*ng)}
	for i := 0; i < len(c.Q); i += 16 { // sixteen uniform 4-bit codes a draw
		u := rng.Uint64()
		for j := range min(16, len(c.Q)-i) {
			c.Q[i+j] = uint8(u >> (4 * j) & 15)
		}
	}
	var pool []uint8
	if f == GPTQ || f == GPTQActOrder {
		pool = gptqZeros(rng)
	}
	sd := 1 / math.Sqrt(float64(cols))
	for i := range c.Zero {
		switch f {
		case AWQ:
			c.Zero[i] = uint8(rng.IntN(16))
		case W4A16:
			c.Zero[i] = 8
		default:
			c.Zero[i] = max(pool[rng.IntN(len(pool))], 1) // v1 stores z − 1: not 0
		}
		// q uniform in 0…15: E[(q − z)²] = 85/4 + (7.5 − z)²; jittered by ±25 %.
		d := float64(c.Zero[i]) - 7.5
		s := sd / math.Sqrt(85.0/4+d*d) * (0.75 + 0.5*rng.Float64())
		c.Scale[i] = dtype.F16ToF32(dtype.F32ToF16(float32(s)))
	}
	switch f {
	case AWQ:
		return hfquant.EncodeAWQ(c)
	case W4A16:
		return hfquant.EncodeCompressed(c, true)
	case GPTQActOrder:
		// Act-order quantizes the inputs in a permuted order, 128 at a time: each group
		// is 128 inputs scattered over the row.
		c.GIdx = make([]int64, cols)
		for i := range c.GIdx {
			c.GIdx[i] = int64(i / hfGroup)
		}
		rng.Shuffle(cols, func(a, b int) { c.GIdx[a], c.GIdx[b] = c.GIdx[b], c.GIdx[a] })
	}
	return hfquant.EncodeGPTQ(c, true)
}

// gptqZeros returns zero points as GPTQ's asymmetric min-max quantizer sets them for
// groups of 128 normal values: scale (max − min)/15 over the range widened to hold 0,
// zero round(−min/scale).
func gptqZeros(rng *rand.Rand) []uint8 {
	out := make([]uint8, zeroPool)
	for g := range out {
		lo, hi := 0.0, 0.0
		for range hfGroup {
			v := rng.NormFloat64()
			lo, hi = min(lo, v), max(hi, v)
		}
		out[g] = uint8(math.Round(-lo / ((hi - lo) / 15)))
	}
	return out
}
