// Package headtest writes draft-head directories for tests: safetensors files with a
// config.json, random heads of any shape (for the exactness tests on small models), and
// copies of real checkpoints in other layouts.
package headtest

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
)

// Tensor is a tensor to write: its safetensors dtype name ("F32", "BF16", …), shape
// and little-endian bytes.
type Tensor struct {
	DType string
	Shape []int64
	Data  []byte
}

// F32 makes an F32 tensor of the given shape from values.
func F32(shape []int64, v []float32) Tensor {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return Tensor{DType: "F32", Shape: shape, Data: b}
}

// Write writes a directory: config.json with config, and model.safetensors with the
// tensors.
func Write(dir string, config any, tensors map[string]Tensor) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	raw, err := json.MarshalIndent(config, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "model.safetensors"), encode(tensors), 0o644)
}

// encode lays the tensors out as a safetensors file.
func encode(tensors map[string]Tensor) []byte {
	names := make([]string, 0, len(tensors))
	for n := range tensors {
		names = append(names, n)
	}
	sort.Strings(names)
	header := map[string]any{}
	var off int64
	var data []byte
	for _, n := range names {
		t := tensors[n]
		header[n] = map[string]any{"dtype": t.DType, "shape": t.Shape, "data_offsets": []int64{off, off + int64(len(t.Data))}}
		off += int64(len(t.Data))
		data = append(data, t.Data...)
	}
	h, err := json.Marshal(header)
	if err != nil {
		panic(fmt.Sprintf("headtest: %v", err)) // maps of plain values always encode
	}
	for len(h)%8 != 0 {
		h = append(h, ' ')
	}
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
	return append(append(out, h...), data...)
}

// Random makes n values uniform in ±scale.
func Random(rng *rand.Rand, n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32((rng.Float64()*2 - 1) * scale)
	}
	return v
}

// Medusa writes random Medusa heads in vLLM's layout: heads heads of layers residual
// blocks over states of hidden values, one shared output layer lm_heads.0.
func Medusa(dir string, hidden, vocab, heads, layers int, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 7))
	h, v := int64(hidden), int64(vocab)
	ts := map[string]Tensor{"lm_heads.0.weight": F32([]int64{v, h}, Random(rng, vocab*hidden, 2))}
	for k := range heads {
		for l := range layers {
			ts[fmt.Sprintf("blocks.%d.layers.%d.weight", k, l)] = F32([]int64{h, h}, Random(rng, hidden*hidden, 1))
			ts[fmt.Sprintf("blocks.%d.layers.%d.bias", k, l)] = F32([]int64{h}, Random(rng, hidden, 0.5))
		}
	}
	cfg := map[string]any{"model_type": "medusa", "hidden_size": hidden, "vocab_size": vocab, "num_heads": heads,
		"num_hidden_layers": layers, "medusa_fc_bias": true, "original_lm_head": true}
	return Write(dir, cfg, ts)
}

// MLPSpeculator writes a random tied MLPSpeculator reading states of dim values.
func MLPSpeculator(dir string, dim, inner, vocab, predict int, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 8))
	d, in, v := int64(dim), int64(inner), int64(vocab)
	ts := map[string]Tensor{
		"emb.0.weight":  F32([]int64{v, in}, Random(rng, vocab*inner, 1)),
		"proj.0.weight": F32([]int64{in, d}, Random(rng, inner*dim, 1)),
		"head.0.weight": F32([]int64{v, in}, Random(rng, vocab*inner, 3)),
		"ln.0.weight":   F32([]int64{in}, Random(rng, inner, 1)),
		"ln.0.bias":     F32([]int64{in}, Random(rng, inner, 0.3)),
	}
	if predict > 1 {
		ts["proj.1.weight"] = F32([]int64{in, in}, Random(rng, inner*inner, 1))
	}
	cfg := map[string]any{"model_type": "mlp_speculator", "emb_dim": dim, "inner_dim": inner, "vocab_size": vocab,
		"n_predict": predict, "tie_weights": true, "scale_input": true}
	return Write(dir, cfg, ts)
}

// LlamaShape is the shape of a tiny Llama model for tests.
type LlamaShape struct {
	Dim, Heads, KVHeads, HeadDim, FFN, Vocab, Layers int
}

// llamaConfig is the Hugging Face config.json of a Llama model of shape s.
func llamaConfig(s LlamaShape) map[string]any {
	return map[string]any{"architectures": []string{"LlamaForCausalLM"}, "model_type": "llama", "hidden_size": s.Dim,
		"intermediate_size": s.FFN, "num_attention_heads": s.Heads, "num_key_value_heads": s.KVHeads, "head_dim": s.HeadDim,
		"num_hidden_layers": s.Layers, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "vocab_size": s.Vocab,
		"max_position_embeddings": 256, "tie_word_embeddings": true, "hidden_act": "silu"}
}

// layerTensors adds random weights of a decoder layer under prefix, with or without its
// input norm.
func layerTensors(ts map[string]Tensor, rng *rand.Rand, s LlamaShape, prefix string, inputNorm bool) {
	d, q, kv, f := int64(s.Dim), int64(s.Heads*s.HeadDim), int64(s.KVHeads*s.HeadDim), int64(s.FFN)
	mat := func(name string, rows, cols int64) {
		ts[prefix+name] = F32([]int64{rows, cols}, Random(rng, int(rows*cols), 1.7/math.Sqrt(float64(cols))))
	}
	mat("self_attn.q_proj.weight", q, d)
	mat("self_attn.k_proj.weight", kv, d)
	mat("self_attn.v_proj.weight", kv, d)
	mat("self_attn.o_proj.weight", d, q)
	mat("mlp.gate_proj.weight", f, d)
	mat("mlp.up_proj.weight", f, d)
	mat("mlp.down_proj.weight", d, f)
	ts[prefix+"post_attention_layernorm.weight"] = F32([]int64{d}, norm(rng, s.Dim))
	if inputNorm {
		ts[prefix+"input_layernorm.weight"] = F32([]int64{d}, norm(rng, s.Dim))
	}
}

// norm makes norm weights near 1.
func norm(rng *rand.Rand, n int) []float32 {
	v := Random(rng, n, 0.1)
	for i := range v {
		v[i]++
	}
	return v
}

// Llama writes a random Llama model of shape s as a Hugging Face directory (tied
// embeddings), with embeddings large enough that its distributions are far from
// uniform.
func Llama(dir string, s LlamaShape, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 9))
	ts := map[string]Tensor{
		"model.embed_tokens.weight": F32([]int64{int64(s.Vocab), int64(s.Dim)}, Random(rng, s.Vocab*s.Dim, 2)),
	}
	for l := range s.Layers {
		layerTensors(ts, rng, s, fmt.Sprintf("model.layers.%d.", l), true)
	}
	ts["model.norm.weight"] = F32([]int64{int64(s.Dim)}, norm(rng, s.Dim))
	return Write(dir, llamaConfig(s), ts)
}

// EAGLE writes a one-layer EAGLE draft layer for targets of shape s, as vLLM's eagle
// method loads it, that guesses like a weak trained one: fc passes the target's state
// through (fc = [0 | I], plus noise) and the layer adds a small random change, so
// that it drafts the target's last distribution again.
func EAGLE(dir string, s LlamaShape, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 10))
	d := int64(s.Dim)
	fc := Random(rng, 2*s.Dim*s.Dim, 0.05)
	for i := range s.Dim {
		fc[i*2*s.Dim+s.Dim+i]++
	}
	ts := map[string]Tensor{"fc.weight": F32([]int64{d, 2 * d}, fc)}
	layerTensors(ts, rng, s, "layers.0.", false)
	// Drawn in the order of the names, so a seed gives one file.
	for _, name := range slices.Sorted(maps.Keys(ts)) {
		if t := ts[name]; name != "fc.weight" && len(t.Shape) == 2 {
			ts[name] = F32(t.Shape, Random(rng, int(t.Shape[0]*t.Shape[1]), 0.05))
		}
	}
	e := s
	e.Layers = 1
	return Write(dir, llamaConfig(e), ts)
}

// EAGLE3 writes a random EAGLE-3 head for targets of shape s in the layout vLLM loads
// as Eagle3LlamaForCausalLM: fc over the streams entering the target layers auxIDs
// (vLLM's meaning, named in the config), the layer under midlayer.*, its own lm_head
// over the draft vocabulary draft (ascending target ids), d2t and t2d. fc passes the
// last auxiliary state through (plus noise), the layer adds a small random change,
// and lm_head is the rows of embed (the target's tied output layer, Vocab × Dim;
// nil: random) at the draft ids, so that the head guesses like a weak trained one.
func EAGLE3(dir string, s LlamaShape, draft []int32, auxIDs []int, embed []float32, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 11))
	d, k := int64(s.Dim), int64(len(auxIDs))
	fc := Random(rng, int(d*k*d), 0.05)
	for i := range s.Dim {
		fc[i*int(k*d)+int((k-1)*d)+i]++
	}
	ts := map[string]Tensor{"fc.weight": F32([]int64{d, k * d}, fc)}
	wide := s
	wide.Dim = 2 * s.Dim // q, k, v read [embedding, hidden state]
	layerTensors(ts, rng, wide, "midlayer.", true)
	e := s
	layerTensors(ts, rng, e, "tmp.", false) // o, gate, up, down at the layer's width
	for _, n := range []string{"self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight", "post_attention_layernorm.weight"} {
		ts["midlayer."+n] = ts["tmp."+n]
	}
	for n := range ts {
		if len(n) > 4 && n[:4] == "tmp." {
			delete(ts, n)
		}
	}
	// Drawn in the order of the names, so a seed gives one file.
	for _, name := range slices.Sorted(maps.Keys(ts)) {
		if t := ts[name]; name != "fc.weight" && len(t.Shape) == 2 {
			ts[name] = F32(t.Shape, Random(rng, int(t.Shape[0]*t.Shape[1]), 0.05))
		}
	}
	ts["midlayer.input_layernorm.weight"] = F32([]int64{d}, norm(rng, s.Dim))
	ts["midlayer.hidden_norm.weight"] = F32([]int64{d}, norm(rng, s.Dim))
	ts["norm.weight"] = F32([]int64{d}, norm(rng, s.Dim))
	lm := Random(rng, len(draft)*s.Dim, 2)
	if embed != nil {
		for i, id := range draft {
			copy(lm[i*s.Dim:(i+1)*s.Dim], embed[int(id)*s.Dim:(int(id)+1)*s.Dim])
		}
	}
	ts["lm_head.weight"] = F32([]int64{int64(len(draft)), d}, lm)
	d2t := make([]byte, 8*len(draft))
	t2d := make([]byte, s.Vocab)
	for i, id := range draft {
		binary.LittleEndian.PutUint64(d2t[8*i:], uint64(int64(id)-int64(i)))
		t2d[id] = 1
	}
	ts["d2t"] = Tensor{DType: "I64", Shape: []int64{int64(len(draft))}, Data: d2t}
	ts["t2d"] = Tensor{DType: "BOOL", Shape: []int64{int64(s.Vocab)}, Data: t2d}
	e.Layers = 1
	cfg := llamaConfig(e)
	cfg["architectures"] = []string{"LlamaForCausalLMEagle3"}
	cfg["tie_word_embeddings"] = false
	cfg["draft_vocab_size"] = len(draft)
	cfg["eagle_aux_hidden_state_layer_ids"] = auxIDs
	return Write(dir, cfg, ts)
}
