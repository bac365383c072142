package llama

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/backend/cpu"
	"github.com/specula/specula/batch"
	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/format/safetensors"
	"github.com/specula/specula/internal/headtest"
)

// TestEAGLE3LayerReference checks one step of a random EAGLE-3 head at position 0 —
// where attention over the one key is its value, so the step is the layer's matrices
// alone — against a float64 forward written here from the tensors, for both
// residuals: g itself (norm_before_residual false, the shared head's) and
// hidden_norm(g) (true).
func TestEAGLE3LayerReference(t *testing.T) {
	s := headtest.LlamaShape{Dim: 16, Heads: 4, KVHeads: 2, HeadDim: 4, FFN: 24, Vocab: 10, Layers: 4}
	root := t.TempDir()
	tdir := filepath.Join(root, "target")
	require.NoError(t, headtest.Llama(tdir, s, 3))
	draft := []int32{0, 2, 3, 7, 9}
	for _, before := range []bool{false, true} {
		edir := filepath.Join(root, map[bool]string{false: "after", true: "before"}[before])
		require.NoError(t, headtest.EAGLE3(edir, s, draft, []int{1, 2, 3}, nil, 7))
		cfgPath := filepath.Join(edir, "config.json")
		raw, err := os.ReadFile(cfgPath)
		require.NoError(t, err)
		var cfg map[string]any
		require.NoError(t, json.Unmarshal(raw, &cfg))
		cfg["norm_before_residual"] = before
		raw, err = json.Marshal(cfg)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(cfgPath, raw, 0o644))

		m, err := OpenEAGLE3(edir, tdir, cpu.Factory(1), Options{})
		require.NoError(t, err)
		d := s.Dim
		g := make([]float32, d)
		for i := range g {
			g[i] = float32(math.Sin(float64(3*i+1))) * 2
		}
		const tok = 5
		seq, err := m.NewSequence(context.Background())
		require.NoError(t, err)
		logits := make([]float32, len(draft))
		hidden := make([]float32, 2*d)
		require.NoError(t, seq.Forward(context.Background(), batch.Batch{Tokens: []int32{tok}, Inputs: g, Outputs: []int32{0},
			States: []int32{0}, StateLayers: []int32{0}, Hidden: hidden}, logits))
		require.NoError(t, seq.Close())
		require.NoError(t, m.Close())

		want, wantO := eagle3Ref(t, edir, tdir, s, tok, g, before)
		for i := range want {
			assert.InDelta(t, want[i], logits[i], 1e-4*math.Max(1, math.Abs(want[i])), "norm_before_residual %v: logit %d", before, i)
		}
		for i := range wantO {
			assert.InDelta(t, wantO[i], hidden[i], 1e-4*math.Max(1, math.Abs(wantO[i])), "norm_before_residual %v: o[%d]", before, i)
		}
	}
}

// eagle3Ref is the head's step at position 0 in float64: x = [input_layernorm(E[tok]),
// hidden_norm(g)], r = res + o_proj(v over the query heads), o = r + down(SiLU(gate(y))
// ⊙ up(y)) with y = post_attention_layernorm(r), logits = lm_head(norm(o)); res is g
// or, with before, hidden_norm(g).
func eagle3Ref(t *testing.T, edir, tdir string, s headtest.LlamaShape, tok int32, g []float32, before bool) (logits, o []float64) {
	read := func(dir, name string) []float64 {
		set, err := safetensors.OpenDir(dir)
		require.NoError(t, err)
		defer set.Close()
		tn, ok := set.Tensor(name)
		require.True(t, ok, name)
		v := make([]float32, tn.Elements())
		require.NoError(t, dtype.Dequantize(tn.DType, tn.Data, v))
		out := make([]float64, len(v))
		for i, x := range v {
			out[i] = float64(x)
		}
		return out
	}
	mv := func(w []float64, x []float64) []float64 {
		rows := len(w) / len(x)
		y := make([]float64, rows)
		for r := range rows {
			for c, xv := range x {
				y[r] += w[r*len(x)+c] * xv
			}
		}
		return y
	}
	rms := func(x, w []float64) []float64 {
		var ss float64
		for _, v := range x {
			ss += v * v
		}
		k := 1 / math.Sqrt(ss/float64(len(x))+1e-5)
		y := make([]float64, len(x))
		for i := range x {
			y[i] = x[i] * k * w[i]
		}
		return y
	}
	d := s.Dim
	e := read(tdir, "model.embed_tokens.weight")[int(tok)*d : int(tok+1)*d]
	g64 := make([]float64, d)
	for i, v := range g {
		g64[i] = float64(v)
	}
	p := "midlayer."
	hn := rms(g64, read(edir, p+"hidden_norm.weight"))
	x := append(rms(e, read(edir, p+"input_layernorm.weight")), hn...)
	v := mv(read(edir, p+"self_attn.v_proj.weight"), x)
	att := make([]float64, 0, s.Heads*s.HeadDim)
	for h := range s.Heads {
		kv := h / (s.Heads / s.KVHeads)
		att = append(att, v[kv*s.HeadDim:(kv+1)*s.HeadDim]...)
	}
	res := g64
	if before {
		res = hn
	}
	r := mv(read(edir, p+"self_attn.o_proj.weight"), att)
	for i := range r {
		r[i] += res[i]
	}
	y := rms(r, read(edir, p+"post_attention_layernorm.weight"))
	gate, up := mv(read(edir, p+"mlp.gate_proj.weight"), y), mv(read(edir, p+"mlp.up_proj.weight"), y)
	for i := range gate {
		gate[i] = gate[i] / (1 + math.Exp(-gate[i])) * up[i]
	}
	o = mv(read(edir, p+"mlp.down_proj.weight"), gate)
	for i := range o {
		o[i] += r[i]
	}
	return mv(read(edir, "lm_head.weight"), rms(o, read(edir, "norm.weight"))), o
}

// TestEAGLE3SpeculatorsLayout loads the same random head written in the speculators
// library's layout — its config under transformer_layer_config, the layer's tensors
// as layers.0.* (vLLM's names), its own embed_tokens.weight (the target's, copied) —
// and requires the logits of the vLLM layout's.
func TestEAGLE3SpeculatorsLayout(t *testing.T) {
	s := headtest.LlamaShape{Dim: 16, Heads: 4, KVHeads: 2, HeadDim: 4, FFN: 24, Vocab: 10, Layers: 4}
	root := t.TempDir()
	tdir, vdir, sdir := filepath.Join(root, "target"), filepath.Join(root, "vllm"), filepath.Join(root, "speculators")
	require.NoError(t, headtest.Llama(tdir, s, 3))
	require.NoError(t, headtest.EAGLE3(vdir, s, []int32{1, 2, 4, 8}, []int{1, 2, 3}, nil, 9))
	copyTensors := func(dir string, into map[string]headtest.Tensor, rename func(string) string) {
		set, err := safetensors.OpenDir(dir)
		require.NoError(t, err)
		defer set.Close()
		for _, n := range set.Names() {
			tn, _ := set.Tensor(n)
			into[rename(n)] = headtest.Tensor{DType: tn.TypeName, Shape: tn.Shape, Data: append([]byte(nil), tn.Data...)}
		}
	}
	ts := map[string]headtest.Tensor{}
	copyTensors(vdir, ts, func(n string) string {
		if len(n) > len("midlayer.") && n[:len("midlayer.")] == "midlayer." {
			return "layers.0." + n[len("midlayer."):]
		}
		return n
	})
	emb := map[string]headtest.Tensor{}
	copyTensors(tdir, emb, func(n string) string { return n })
	ts["embed_tokens.weight"] = emb["model.embed_tokens.weight"]
	raw, err := os.ReadFile(filepath.Join(vdir, "config.json"))
	require.NoError(t, err)
	var layer map[string]any
	require.NoError(t, json.Unmarshal(raw, &layer))
	top := map[string]any{"architectures": []string{"Eagle3Speculator"}, "speculators_model_type": "eagle3",
		"draft_vocab_size": layer["draft_vocab_size"], "eagle_aux_hidden_state_layer_ids": layer["eagle_aux_hidden_state_layer_ids"],
		"norm_before_residual": false, "target_hidden_size": s.Dim,
		"speculators_config": map[string]any{"algorithm": "eagle3", "default_proposal_method": "greedy",
			"verifier": map[string]any{"name_or_path": "target", "architectures": []string{"LlamaForCausalLM"}}}}
	delete(layer, "draft_vocab_size")
	delete(layer, "eagle_aux_hidden_state_layer_ids")
	layer["architectures"] = []string{"LlamaForCausalLM"}
	top["transformer_layer_config"] = layer
	require.NoError(t, headtest.Write(sdir, top, ts))

	step := func(dir string) []float32 {
		m, err := OpenEAGLE(dir, tdir, cpu.Factory(1), Options{})
		require.NoError(t, err)
		defer m.Close()
		assert.Equal(t, []int32{0, 1, 2}, m.AuxStateLayers())
		seq, err := m.NewSequence(context.Background())
		require.NoError(t, err)
		defer seq.Close()
		g := make([]float32, 2*3*s.Dim)
		for i := range g {
			g[i] = float32(math.Cos(float64(i)))
		}
		in := make([]float32, 2*s.Dim)
		require.NoError(t, m.Project(g, 2, in))
		logits := make([]float32, 2*4)
		require.NoError(t, seq.Forward(context.Background(), batch.Batch{Tokens: []int32{3, 9}, Inputs: in, Outputs: []int32{0, 1}}, logits))
		return logits
	}
	assert.Equal(t, step(vdir), step(sdir))
}
