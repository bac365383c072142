package synth

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/backend/cpu"
	"github.com/specula/specula/batch"
	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/format/gguf"
	"github.com/specula/specula/model/llama"
	"github.com/specula/specula/model/quantize"
)

// TestShapesMatchPublishedCounts: every shape has the parameter count its makers
// publish, to the weight.
func TestShapesMatchPublishedCounts(t *testing.T) {
	for _, s := range Shapes() {
		assert.Equal(t, s.Params, Count(s.Config), s.Name)
		got, err := Find(s.Name)
		require.NoError(t, err)
		assert.Equal(t, s.Name, got.Name)
	}
	_, err := Find("qwen2.5-13b")
	assert.ErrorContains(t, err, `unknown shape "qwen2.5-13b" (known: smollm2-135m,`)
}

// TestPlanTypes checks the mixes against what llama.cpp's llama-quantize writes for
// the real models (no importance matrix).
func TestPlanTypes(t *testing.T) {
	types := func(shape string, m quantize.Mix) map[string]dtype.DType {
		s, err := Find(shape)
		require.NoError(t, err)
		plan, err := Plan(s, m)
		require.NoError(t, err)
		out := map[string]dtype.DType{}
		for _, t := range plan {
			out[t.Name] = t.Type
		}
		return out
	}
	tests := []struct {
		shape string
		mix   quantize.Mix
		want  map[string]dtype.DType
	}{
		// 896-wide rows are not whole super-blocks: Q5_0 for Q4_K, Q8_0 for Q6_K.
		{"qwen2.5-0.5b", quantize.Q4_K_M, map[string]dtype.DType{
			"token_embd.weight": dtype.Q8_0, "blk.0.attn_q.weight": dtype.Q5_0, "blk.0.attn_k.weight": dtype.Q5_0,
			"blk.0.attn_v.weight": dtype.Q8_0, "blk.3.attn_v.weight": dtype.Q5_0, "blk.5.attn_v.weight": dtype.Q8_0,
			"blk.0.attn_output.weight": dtype.Q5_0, "blk.0.ffn_gate.weight": dtype.Q5_0, "blk.0.ffn_up.weight": dtype.Q5_0,
			"blk.0.ffn_down.weight": dtype.Q6_K, "blk.3.ffn_down.weight": dtype.Q4_K, "blk.23.ffn_down.weight": dtype.Q6_K,
			"blk.0.attn_q.bias": dtype.F32, "blk.0.attn_norm.weight": dtype.F32, "output_norm.weight": dtype.F32,
		}},
		{"qwen2.5-0.5b", quantize.Q5_K_M, map[string]dtype.DType{
			"token_embd.weight": dtype.Q8_0, "blk.0.attn_q.weight": dtype.Q5_1, "blk.3.attn_v.weight": dtype.Q5_1,
			"blk.2.attn_v.weight": dtype.Q8_0, "blk.3.ffn_down.weight": dtype.Q5_K, "blk.2.ffn_down.weight": dtype.Q6_K,
		}},
		{"qwen2.5-1.5b", quantize.Q4_K_M, map[string]dtype.DType{
			"token_embd.weight": dtype.Q6_K, "blk.0.attn_q.weight": dtype.Q4_K, "blk.0.attn_v.weight": dtype.Q6_K,
			"blk.3.attn_v.weight": dtype.Q4_K, "blk.5.attn_v.weight": dtype.Q6_K, "blk.27.ffn_down.weight": dtype.Q6_K,
			"blk.4.ffn_down.weight": dtype.Q4_K, "blk.4.ffn_gate.weight": dtype.Q4_K,
		}},
		{"qwen2.5-7b", quantize.Q4_K_M, map[string]dtype.DType{
			"output.weight": dtype.Q6_K, "token_embd.weight": dtype.Q4_K, "blk.0.ffn_down.weight": dtype.Q6_K,
		}},
		{"llama-3.2-1b", quantize.Q4_K_M, map[string]dtype.DType{
			"token_embd.weight": dtype.Q6_K, "rope_freqs.weight": dtype.F32,
			"blk.0.attn_v.weight": dtype.Q6_K, "blk.2.attn_v.weight": dtype.Q4_K, "blk.4.attn_v.weight": dtype.Q6_K,
		}},
		{"tinyllama-1.1b", quantize.Q4_0, map[string]dtype.DType{"output.weight": dtype.Q6_K, "token_embd.weight": dtype.Q4_0, "blk.0.attn_v.weight": dtype.Q4_0}},
		{"qwen2.5-0.5b", quantize.Q4_0, map[string]dtype.DType{"token_embd.weight": dtype.Q8_0, "blk.0.ffn_down.weight": dtype.Q4_0}},
		{"qwen2.5-1.5b", quantize.Q8_0, map[string]dtype.DType{"token_embd.weight": dtype.Q8_0, "blk.0.ffn_down.weight": dtype.Q8_0}},
		// 960-wide rows: fallbacks; 2560-wide ffn_down rows are whole super-blocks.
		{"smollm2-360m", quantize.Q4_K_M, map[string]dtype.DType{
			"token_embd.weight": dtype.Q8_0, "blk.0.attn_q.weight": dtype.Q5_0, "blk.0.attn_v.weight": dtype.Q8_0,
			"blk.4.attn_v.weight": dtype.Q5_0, "blk.0.ffn_down.weight": dtype.Q6_K, "blk.4.ffn_down.weight": dtype.Q4_K,
			"blk.31.ffn_down.weight": dtype.Q6_K, "blk.4.ffn_up.weight": dtype.Q5_0,
		}},
		{"qwen2.5-1.5b", quantize.Q6_K, map[string]dtype.DType{"token_embd.weight": dtype.Q6_K, "blk.5.attn_q.weight": dtype.Q6_K, "blk.4.ffn_down.weight": dtype.Q6_K}},
		{"qwen2.5-0.5b", quantize.Q6_K, map[string]dtype.DType{"token_embd.weight": dtype.Q8_0, "blk.5.attn_q.weight": dtype.Q8_0, "blk.4.ffn_down.weight": dtype.Q6_K}},
		{"tinyllama-1.1b", quantize.Q5_1, map[string]dtype.DType{"output.weight": dtype.Q6_K, "token_embd.weight": dtype.Q5_1, "blk.3.ffn_down.weight": dtype.Q5_1}},
		{"qwen2.5-1.5b", quantize.BF16, map[string]dtype.DType{"token_embd.weight": dtype.BF16, "blk.0.attn_k.bias": dtype.F32}},
	}
	for _, tt := range tests {
		got := types(tt.shape, tt.mix)
		for name, want := range tt.want {
			assert.Equal(t, want, got[name], "%s %s: %s", tt.shape, tt.mix, name)
		}
	}
	// Every layer: attn_v and ffn_down get more bits on 12 of 28 layers.
	got := types("qwen2.5-1.5b", quantize.Q4_K_M)
	n := 0
	for l := range 28 {
		if got[layerName(l, "attn_v.weight")] == dtype.Q6_K {
			n++
			assert.Equal(t, dtype.Q6_K, got[layerName(l, "ffn_down.weight")], "layer %d", l)
		}
	}
	assert.Equal(t, 14, n)
}

func layerName(l int, part string) string { return fmt.Sprintf("blk.%d.%s", l, part) }

// testVocab is the gocoder tokenizer shipped in the repository.
func testVocab(t *testing.T) *Vocab {
	v, err := VocabFrom(filepath.Join("..", "..", "models", "gocoder-xs-q8_0.gguf"))
	require.NoError(t, err)
	return v
}

// small is a shape small enough for a test, with rows of whole super-blocks and rows
// that are not (as Qwen2.5-0.5B's).
func small(dim int) Shape {
	return Shape{Name: "small", Of: "Small", Config: qwen25(dim, 2, 4, 2, 512, 9000, true)}
}

// TestWriteOpens writes small models in every mix, opens them, checks every tensor's
// type against the plan and the file's size against the tensors', and runs them.
func TestWriteOpens(t *testing.T) {
	vocab := testVocab(t)
	for _, dim := range []int{256, 384} {
		for _, m := range quantize.Mixes() {
			s := small(dim)
			path := filepath.Join(t.TempDir(), "m.gguf")
			require.NoError(t, WriteFile(path, s, m, vocab, 7), "%s dim %d", m, dim)
			plan, err := Plan(s, m)
			require.NoError(t, err)
			f, err := gguf.Open(path)
			require.NoError(t, err)
			var data int64
			for _, p := range plan {
				ft, ok := f.Tensor(p.Name)
				require.True(t, ok, p.Name)
				assert.Equal(t, p.Type, ft.Type, "%s dim %d: %s", m, dim, p.Name)
				assert.Equal(t, p.Dims, ft.Dims, p.Name)
				data += p.Bytes()
			}
			ft, _ := f.Uint("general.file_type")
			assert.Equal(t, uint64(m.FileType()), ft)
			eos, _ := f.Uint("tokenizer.ggml.eos_token_id")
			assert.Equal(t, uint64(len(vocab.tokens)), eos, "the first padding token: the same id in every shape")
			toks, _ := f.Strings("tokenizer.ggml.tokens")
			assert.Len(t, toks, 9000)
			require.NoError(t, f.Close())
			st, err := os.Stat(path)
			require.NoError(t, err)
			assert.InDelta(t, data, st.Size(), float64(len(plan)*32+300_000), "%s: file size against tensor bytes", m)

			mdl, err := llama.Open(path, cpu.Factory(1), llama.Options{})
			require.NoError(t, err, "%s dim %d", m, dim)
			checkRuns(t, mdl)
			require.NoError(t, mdl.Close())
		}
	}
}

// checkRuns forwards a few tokens and checks the logits are finite and not all equal.
func checkRuns(t *testing.T, m *llama.Model) {
	t.Helper()
	ctx := context.Background()
	seq, err := m.NewSequence(ctx)
	require.NoError(t, err)
	defer seq.Close()
	v := m.Info().VocabSize
	logits := make([]float32, 2*v)
	require.NoError(t, seq.Forward(ctx, batch.Batch{Tokens: []int32{1, 2, 3, 4}, Outputs: []int32{2, 3}}, logits))
	lo, hi := float32(math.Inf(1)), float32(math.Inf(-1))
	for _, x := range logits {
		require.False(t, math.IsNaN(float64(x)) || math.IsInf(float64(x), 0))
		lo, hi = min(lo, x), max(hi, x)
	}
	assert.Greater(t, hi-lo, float32(0.1))
}

// TestRealShapesLoad writes two-layer copies of every real shape up to 1.5B (the
// real widths, heads, rotary embeddings and biases, a small vocabulary) in the mixes
// real files come in, and opens and runs each: every tensor type those files hold,
// in the widths that make llama.cpp fall back from K-quants, loads and gives sane
// logits. (The 7B shape is left out for its size; its widths are whole super-blocks,
// which the 1.5B shape already covers.)
func TestRealShapesLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("writes and runs about 20 models of real width")
	}
	vocab := testVocab(t)
	for _, s := range Shapes() {
		if s.Params > 2e9 {
			continue
		}
		s.Config.Layers, s.Config.Vocab = 2, 9000
		for _, m := range []quantize.Mix{quantize.Q8_0, quantize.Q4_K_M, quantize.Q5_K_M, quantize.Q6_K} {
			path := filepath.Join(t.TempDir(), "m.gguf")
			require.NoError(t, WriteFile(path, s, m, vocab, 3), "%s %s", s.Name, m)
			mdl, err := llama.Open(path, cpu.Factory(1), llama.Options{})
			require.NoError(t, err, "%s %s", s.Name, m)
			assert.Equal(t, s.Config.Dim, mdl.Config().Dim)
			checkRuns(t, mdl)
			require.NoError(t, mdl.Close())
			require.NoError(t, os.Remove(path))
		}
	}
}

// TestVocabMetadata: how a vocabulary is padded to a shape's size and which end token
// the file gets — a byte-level vocabulary's first padding token, its own one where
// nothing is padded, a SentencePiece vocabulary's own one in every shape (scores
// padded with the lowest) — and the sizes refused.
func TestVocabMetadata(t *testing.T) {
	bpe := &Vocab{tokens: []string{"a", "b", "<eos>"}, types: []int32{1, 1, 3}, bos: -1, eos: 2}
	spm := &Vocab{tokens: []string{"<bos>", "<eos>", "▁a"}, types: []int32{3, 3, 1}, scores: []float32{-9, -9, -1}, bos: 0, eos: 1}
	noEOS := &Vocab{tokens: []string{"a", "b"}, types: []int32{1, 1}, bos: -1, eos: -1}
	for _, tc := range []struct {
		name    string
		v       *Vocab
		n       int
		eos     uint32
		scores  []float32
		wantErr string
	}{
		{name: "byte-level padded", v: bpe, n: 5, eos: 3},
		{name: "byte-level full", v: bpe, n: 3, eos: 2},
		{name: "sentencepiece padded", v: spm, n: 5, eos: 1, scores: []float32{-9, -9, -1, -9, -9}},
		{name: "sentencepiece full", v: spm, n: 3, eos: 1, scores: []float32{-9, -9, -1}},
		{name: "no end token, padded", v: noEOS, n: 3, eos: 2},
		{name: "no end token, full", v: noEOS, n: 2, wantErr: "no end-of-sequence token"},
		{name: "too large", v: bpe, n: 2, wantErr: "more than the shape's 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kv, err := tc.v.metadata(tc.n)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			got := map[string]any{}
			for _, e := range kv {
				got[e.Key] = e.Value.Any()
			}
			assert.Len(t, got["tokenizer.ggml.tokens"], tc.n)
			assert.Len(t, got["tokenizer.ggml.token_type"], tc.n)
			assert.Equal(t, tc.eos, got["tokenizer.ggml.eos_token_id"])
			if tc.scores == nil {
				assert.NotContains(t, got, "tokenizer.ggml.scores")
			} else {
				assert.Equal(t, tc.scores, got["tokenizer.ggml.scores"])
			}
		})
	}
}
