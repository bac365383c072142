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

	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/format/safetensors"
)

// DefaultDraftVocab is the draft vocabulary of the published EAGLE-3 heads of 7B–8B
// targets (yuhuili/EAGLE3-LLaMA3.1-Instruct-8B, the Qwen2.5-7B ports): 32 000 ids.
const DefaultDraftVocab = 32000

// EAGLE3Params is the number of weights of an EAGLE-3 head for a target of shape c
// with a draft vocabulary of draftVocab: fc over three hidden states, one decoder
// layer whose attention reads 2H, its norms, the final norm and the output layer
// over the draft vocabulary (d2t and t2d, the vocabulary maps, not counted).
func EAGLE3Params(c Shape, draftVocab int) int64 {
	h, qd, kvd, f := int64(c.Config.Dim), int64(c.Config.Heads*c.Config.HeadDim), int64(c.Config.KVHeads*c.Config.HeadDim), int64(c.Config.FFN)
	return 3*h*h + 2*h*(qd+2*kvd) + qd*h + 3*h*f + 4*h + int64(draftVocab)*h
}

// WriteEAGLE3 writes to dir an EAGLE-3 draft head for a target of shape s, as vLLM
// (Eagle3LlamaForCausalLM) and SGLang (LlamaForCausalLMEagle3) load one and as the
// published heads store it: config.json (architectures LlamaForCausalLMEagle3, one
// hidden layer of the target's attention and MLP shape, draft_vocab_size,
// tie_word_embeddings false, no biases) and model.safetensors in EAGLE's own names —
// fc.weight [H, 3H]; midlayer.{input_layernorm,hidden_norm,post_attention_layernorm}
// weights; midlayer.self_attn.{q,k,v}_proj over 2H and o_proj; midlayer.mlp's gate,
// up and down; norm.weight; lm_head.weight [draftVocab, H]; d2t (I64: target id =
// draft id + d2t[id]) and t2d (BOOL over the target's vocabulary). No embedding: the
// head shares the target's. The weights are random BF16 (deviation 1/√in, norms
// ones) and the draft vocabulary draftVocab ids drawn at random from the target's,
// sorted (the first kept: the real ones hold the most frequent ids, special tokens
// among them); for timing, as the rest of the package.
func WriteEAGLE3(dir string, s Shape, draftVocab int, seed uint64) error {
	c := s.Config
	if draftVocab <= 0 || draftVocab > c.Vocab {
		return fmt.Errorf("synth: %s: a draft vocabulary of %d ids, not in 1…%d", s.Name, draftVocab, c.Vocab)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	cfg := map[string]any{
		"architectures": []string{"LlamaForCausalLMEagle3"}, "model_type": "llama", "hidden_size": c.Dim,
		"intermediate_size": c.FFN, "num_attention_heads": c.Heads, "num_key_value_heads": c.KVHeads, "head_dim": c.HeadDim,
		"num_hidden_layers": 1, "rms_norm_eps": c.NormEps, "rope_theta": c.RopeTheta, "vocab_size": c.Vocab,
		"draft_vocab_size": draftVocab, "max_position_embeddings": c.ContextLength, "tie_word_embeddings": false,
		"hidden_act": "silu", "torch_dtype": "bfloat16", "attention_bias": false,
	}
	js, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), append(js, '\n'), 0o644); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	entries := eagle3Entries(s, draftVocab, seed)
	if _, err := safetensors.WriteDir(dir, entries, math.MaxInt64, map[string]string{"format": "pt"}); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	return nil
}

// eagle3Entries lists an EAGLE-3 head's tensors in the order EAGLE writes them.
func eagle3Entries(s Shape, draftVocab int, seed uint64) []safetensors.Entry {
	c := s.Config
	h, qd, kvd := c.Dim, c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	var out []safetensors.Entry
	n := uint64(0)
	next := func() *rand.Rand { n++; return rand.New(rand.NewPCG(seed, n)) }
	bf16 := func(name string, rows, cols int, sd float64, mean float32) {
		rng, shape := next(), []int64{int64(rows)}
		if cols > 0 {
			shape = append(shape, int64(cols))
		}
		out = append(out, safetensors.Entry{Name: name, TypeName: "BF16", Shape: shape, Size: 2 * int64(rows*max(cols, 1)),
			WriteTo: func(w io.Writer) error { return floatRows(w, dtype.BF16, rows, max(cols, 1), sd, mean, rng) }})
	}
	linear := func(name string, rows, cols int) { bf16(name, rows, cols, 1/math.Sqrt(float64(cols)), 0) }
	d2t, t2d := draftVocabMaps(c.Vocab, draftVocab, next())
	out = append(out, safetensors.Entry{Name: "d2t", TypeName: "I64", Shape: []int64{int64(draftVocab)}, Data: d2t})
	linear("fc.weight", h, 3*h)
	bf16("midlayer.hidden_norm.weight", h, 0, 0, 1)
	bf16("midlayer.input_layernorm.weight", h, 0, 0, 1)
	linear("midlayer.self_attn.q_proj.weight", qd, 2*h)
	linear("midlayer.self_attn.k_proj.weight", kvd, 2*h)
	linear("midlayer.self_attn.v_proj.weight", kvd, 2*h)
	linear("midlayer.self_attn.o_proj.weight", h, qd)
	bf16("midlayer.post_attention_layernorm.weight", h, 0, 0, 1)
	linear("midlayer.mlp.gate_proj.weight", c.FFN, h)
	linear("midlayer.mlp.up_proj.weight", c.FFN, h)
	linear("midlayer.mlp.down_proj.weight", h, c.FFN)
	bf16("norm.weight", h, 0, 0, 1)
	linear("lm_head.weight", draftVocab, h)
	out = append(out, safetensors.Entry{Name: "t2d", TypeName: "BOOL", Shape: []int64{int64(c.Vocab)}, Data: t2d})
	return out
}

// draftVocabMaps draws a sorted draft vocabulary of n of the target's vocab ids (id 0
// always among them) and returns its maps as EAGLE-3 stores them: d2t, n int64 offsets
// (little-endian) with target id = draft id + d2t[draft id], and t2d, a byte per
// target id, 1 for the ids in the draft vocabulary.
func draftVocabMaps(vocab, n int, rng *rand.Rand) (d2t, t2d []byte) {
	ids := append([]int{0}, rng.Perm(vocab - 1)[:n-1]...)
	for i := 1; i < len(ids); i++ {
		ids[i]++ // the permutation is of 1…vocab−1
	}
	slices.Sort(ids)
	d2t, t2d = make([]byte, 8*n), make([]byte, vocab)
	for i, id := range ids {
		off := uint64(int64(id - i))
		for b := range 8 {
			d2t[8*i+b] = byte(off >> (8 * b))
		}
		t2d[id] = 1
	}
	return d2t, t2d
}
