package synth

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/backend"
	"github.com/specula/specula/backend/cpu"
	"github.com/specula/specula/batch"
	"github.com/specula/specula/draft"
	"github.com/specula/specula/draft/lookup"
	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/format/gguf"
	"github.com/specula/specula/gpu"
	"github.com/specula/specula/internal/llamacpp"
	"github.com/specula/specula/internal/sharedtest"
	"github.com/specula/specula/internal/spectest"
	"github.com/specula/specula/model/llama"
	"github.com/specula/specula/model/quantize"
	"github.com/specula/specula/sampler"
	"github.com/specula/specula/spec"
	"github.com/specula/specula/target"
	"github.com/specula/specula/tokenizer"
)

// TestParityNewFamilies writes random-weight files of the families added since the
// Llama and Qwen2 ones — a few layers at the real widths, a vocabulary of 9000 — and
// compares specula's logits at every position of 128 random tokens with llama.cpp's
// on the same file: the bound on the largest logit difference is about twice the one
// measured, every argmax the same but at near-ties. Phi-4-mini's longrope runs in a
// context of 8192 positions (its long factors) and of 4096 (its short ones, the
// original context), the same size in both engines; llama.cpp's logits in the other
// context differ from specula's, so agreement says the same factors were chosen.
func TestParityNewFamilies(t *testing.T) {
	r := llamacpp.ForTest(t)
	for _, tc := range []struct {
		shape   string
		mix     quantize.Mix
		ctx     int // the context size in both engines; 0: specula's the file's, llama.cpp's the tokens'
		maxDiff float64
		layers  int // 3 when 0
		window  int // the shape's when 0
	}{
		{shape: "qwen3-0.6b", mix: quantize.F32, maxDiff: 1e-3},
		{shape: "qwen3-0.6b", mix: quantize.Q8_0, maxDiff: 0.2},
		{shape: "phi-3-mini", mix: quantize.F32, maxDiff: 1e-3},
		{shape: "phi-3-mini", mix: quantize.Q8_0, maxDiff: 0.2},
		{shape: "phi-4-mini", mix: quantize.F32, ctx: 8192, maxDiff: 1e-3},
		{shape: "phi-4-mini", mix: quantize.F32, ctx: 4096, maxDiff: 1e-3},
		{shape: "phi-4-mini", mix: quantize.Q8_0, ctx: 8192, maxDiff: 0.2},
		// Six layers: five sliding ones, windows shorter than the 128 tokens, and a
		// global one (the 4B's rotary frequencies scaled by 8). llama.cpp's GELU reads
		// its input and writes its output as float16 (a table of 65 536 values): most
		// of the 1.9e-3 measured.
		{shape: "gemma-3-1b", mix: quantize.F32, maxDiff: 4e-3, layers: 6, window: 48},
		{shape: "gemma-3-4b", mix: quantize.Q8_0, maxDiff: 0.2, layers: 6, window: 40},
	} {
		name := tc.shape + "/" + string(tc.mix)
		if tc.ctx > 0 {
			name += fmt.Sprintf("/ctx%d", tc.ctx)
		}
		t.Run(name, func(t *testing.T) {
			s, path := writeShape(t, tc.shape, fileSpec{layers: cmp.Or(tc.layers, 3), mix: tc.mix, seed: 5, window: tc.window})
			m, err := llama.Open(path, cpu.Factory(2), llama.Options{ContextLength: tc.ctx, KVBudget: 64 << 20})
			require.NoError(t, err)
			defer m.Close()
			c := s.Config
			long := c.RopeLongFactors != nil && tc.ctx > c.RopeOriginalContext
			if c.RopeLongFactors != nil {
				want := map[bool][]float32{true: c.RopeLongFactors, false: c.RopeShortFactors}[long]
				got := m.Config()
				require.Equal(t, want, got.RopeFactors(), "longrope factors in a context of %d", tc.ctx)
			}
			rng := rand.New(rand.NewPCG(11, 12))
			tokens := make([]int32, 128)
			for i := range tokens {
				tokens[i] = int32(rng.IntN(8192)) // the real tokens, not the padding
			}
			ref, err := r.LogitsInContext(context.Background(), path, tokens, 2, tc.ctx)
			require.NoError(t, err)
			ours := allLogits(t, m, tokens)
			p := llamacpp.Compare(ours, ref, c.Vocab)
			t.Logf("%s: %s", name, p)
			require.Less(t, p.MaxDiff, tc.maxDiff, "logits")
			require.Equal(t, p.Positions, p.Agree+p.NearTies, "argmax differs beyond near-ties")
			if c.RopeLongFactors != nil && tc.mix == quantize.F32 {
				other := map[bool]int{true: c.RopeOriginalContext, false: 2 * c.RopeOriginalContext}[long]
				ref, err := r.LogitsInContext(context.Background(), path, tokens, 2, other)
				require.NoError(t, err)
				q := llamacpp.Compare(ours, ref, c.Vocab)
				t.Logf("%s against llama.cpp in a context of %d (the other factors): %s", name, other, q)
				require.Greater(t, q.MaxDiff, 100*p.MaxDiff, "the other longrope factors give other logits")
			}
		})
	}
}

// TestNewFamiliesOnHostDevice: the CUDA backend's operations, run by its plain-Go
// host device, give the CPU backend's logits on the new families (their new
// operations included: Qwen3's per-head norms).
func TestNewFamiliesOnHostDevice(t *testing.T) {
	for _, shape := range newFamilies {
		t.Run(shape, func(t *testing.T) {
			s, path := writeShape(t, shape, fileSpec{layers: withGlobal(shape, 2), mix: quantize.F32, seed: 6, narrow: true, window: 3})
			tokens := []int32{5, 900, 17, 4000, 33, 8000, 2, 71}
			var logits [2][][]float32
			for i, f := range []backend.Factory{cpu.Factory(1), gpu.Factory(gpu.HostDevice(), gpu.BackendOptions{})} {
				m, err := llama.Open(path, f, llama.Options{KVBudget: 64 << 20})
				require.NoError(t, err)
				logits[i] = allLogits(t, m, tokens)
				require.NoError(t, m.Close())
			}
			p := llamacpp.Compare(logits[1], logits[0], s.Config.Vocab)
			t.Logf("%s, host device against the CPU backend: %s", shape, p)
			require.Less(t, p.MaxDiff, 1e-4)
			require.Equal(t, p.Positions, p.Agree)
		})
	}
}

// fileSpec says how writeShape writes a shape: its layers, mix and seed, narrowed or
// not, with a vocabulary (nil: the test vocabulary, padded to 9000 tokens, the
// shape's vocabulary size set to that).
type fileSpec struct {
	layers int
	window int // the sliding window of a shape that has one; 0: 16 positions
	// untied gives the file an output matrix of its own: random Gemma weights with
	// tied embeddings scaled by √Dim predict the last token again, at any temperature.
	untied bool
	mix    quantize.Mix
	seed   uint64
	narrow bool
	vocab  *Vocab
}

// writeShape writes the named shape as f says to a file of the test's temporary
// directory, and returns the shape written and the file's path. A shape with sliding
// layers gets a window of 16 positions unless f names one, so that the tests' short
// sequences reach past it.
func writeShape(t *testing.T, shape string, f fileSpec) (Shape, string) {
	t.Helper()
	s, err := Find(shape)
	require.NoError(t, err)
	s.Config.Layers = f.layers
	if s.Config.Sliding != nil {
		s.Config.Sliding = s.Config.Sliding[:f.layers]
	}
	if s.Config.SlidingWindow > 0 {
		s.Config.SlidingWindow = cmp.Or(f.window, 16)
	}
	if f.untied {
		s.Config.TiedEmbeddings = false
	}
	vocab := f.vocab
	if vocab == nil {
		vocab, s.Config.Vocab = testVocab(t), 9000
	}
	if f.narrow {
		narrow(&s.Config)
	}
	path := filepath.Join(t.TempDir(), "m.gguf")
	require.NoError(t, WriteFile(path, s, f.mix, vocab, f.seed))
	return s, path
}

// narrow makes a shape wider than 1024 that wide, for the size of its F32 files in the
// tests whose point is names, layout and operations rather than widths.
// A longrope shape keeps its heads (its factors are per rotary dimension) and takes
// fewer of them, in the same grouping.
func narrow(c *llama.Config) {
	if c.Dim <= 1024 {
		return
	}
	c.Dim, c.FFN = 1024, 1024
	if c.RopeLongFactors != nil {
		group := c.Heads / c.KVHeads
		c.Heads = 1024 / c.HeadDim / group * group
		c.KVHeads, c.Dim = c.Heads/group, c.Heads*c.HeadDim
		return
	}
	c.HeadDim, c.RopeDim = c.Dim/c.Heads, c.Dim/c.Heads
}

// newFamilies are the shapes of the families added since Llama and Qwen2, one each.
var newFamilies = []string{"qwen3-0.6b", "phi-3-mini", "phi-4-mini", "gemma-3-1b"}

// withGlobal is n layers, or for a shape with sliding layers at least the six that
// include its first global one (Gemma 3: five sliding, then one global).
func withGlobal(shape string, n int) int {
	if s, err := Find(shape); err == nil && s.Config.Sliding != nil {
		return max(n, 6)
	}
	return n
}

// allLogits returns the model's logits at every position of tokens, from one forward.
func allLogits(t *testing.T, m *llama.Model, tokens []int32) [][]float32 {
	ctx := context.Background()
	seq, err := m.NewSequence(ctx)
	require.NoError(t, err)
	defer seq.Close()
	v := m.Info().VocabSize
	outs := make([]int32, len(tokens))
	for i := range outs {
		outs[i] = int32(i)
	}
	flat := make([]float32, len(tokens)*v)
	require.NoError(t, seq.Forward(ctx, batch.Batch{Tokens: tokens, Outputs: outs}, flat))
	rows := make([][]float32, len(tokens))
	for i := range rows {
		rows[i] = flat[i*v : (i+1)*v]
	}
	return rows
}

// TestNewFamiliesLoadErrors: files of the new families with a tensor missing or of
// the wrong shape, longrope factors that are alone, of the wrong length or type, or
// not positive, or what the runtime does not implement (Gemma's logit soft-capping,
// an unknown rope scaling, Gemma 2), are refused with an error naming the tensor, the
// factors, the key or the architecture.
func TestNewFamiliesLoadErrors(t *testing.T) {
	good := map[string]string{}
	for _, shape := range newFamilies {
		_, good[shape] = writeShape(t, shape, fileSpec{layers: 1, mix: quantize.Q8_0, seed: 7, narrow: true})
	}
	keep := func(ts []gguf.TensorData) []gguf.TensorData { return ts }
	for _, tc := range []struct {
		name, shape string
		edit        func(ts []gguf.TensorData) []gguf.TensorData
		want        string
		kv          []gguf.KeyValue // metadata set besides the file's
	}{
		{"missing k norm", "qwen3-0.6b", func(ts []gguf.TensorData) []gguf.TensorData {
			return slices.DeleteFunc(ts, func(d gguf.TensorData) bool { return d.Name == "blk.0.attn_k_norm.weight" })
		}, `tensor "blk.0.attn_k_norm.weight": missing`, nil},
		{"q norm too short", "qwen3-0.6b", func(ts []gguf.TensorData) []gguf.TensorData {
			for i := range ts {
				if ts[i].Name == "blk.0.attn_q_norm.weight" {
					ts[i].Dims, ts[i].Data = []int64{64}, ts[i].Data[:4*64]
				}
			}
			return ts
		}, `tensor "blk.0.attn_q_norm.weight": shape [64], want [128]`, nil},
		{"phi-3 long factors alone", "phi-3-mini", func(ts []gguf.TensorData) []gguf.TensorData {
			f := make([]byte, 4*48)
			return append(ts, gguf.TensorData{Name: "rope_factors_long.weight", Type: dtype.F32, Dims: []int64{48}, Data: f})
		}, "longrope needs both rope_factors_long.weight and rope_factors_short.weight", nil},
		{"phi-4 long factors too short", "phi-4-mini", func(ts []gguf.TensorData) []gguf.TensorData {
			for i := range ts {
				if ts[i].Name == "rope_factors_long.weight" {
					ts[i].Dims, ts[i].Data = []int64{16}, ts[i].Data[:4*16]
				}
			}
			return ts
		}, "16 longrope long factors for 96 rotary dimensions (want 48)", nil},
		{"phi-4 short factors not F32", "phi-4-mini", func(ts []gguf.TensorData) []gguf.TensorData {
			for i := range ts {
				if ts[i].Name == "rope_factors_short.weight" {
					ts[i].Type, ts[i].Data = dtype.F16, ts[i].Data[:2*48]
				}
			}
			return ts
		}, `tensor "rope_factors_short.weight" must be a 1-D F32 vector`, nil},
		{"phi-4 zero factor", "phi-4-mini", func(ts []gguf.TensorData) []gguf.TensorData {
			for i := range ts {
				if ts[i].Name == "rope_factors_long.weight" {
					ts[i].Data = slices.Clone(ts[i].Data)
					clear(ts[i].Data[:4])
				}
			}
			return ts
		}, "rope frequency factors must be positive and finite", nil},
		{name: "phi-4 yarn scaling", shape: "phi-4-mini", edit: keep, want: `rope scaling "yarn" is not supported`,
			kv: []gguf.KeyValue{{Key: "phi3.rope.scaling.type", Value: gguf.String("yarn")}}},
		{"phi-3 split qkv", "phi-3-mini", func(ts []gguf.TensorData) []gguf.TensorData {
			return slices.DeleteFunc(ts, func(d gguf.TensorData) bool { return d.Name == "blk.0.attn_qkv.weight" })
		}, `tensor "blk.0.attn_qkv.weight": missing`, nil},
		{"gemma 3 post-norm missing", "gemma-3-1b", func(ts []gguf.TensorData) []gguf.TensorData {
			return slices.DeleteFunc(ts, func(d gguf.TensorData) bool { return d.Name == "blk.0.post_ffw_norm.weight" })
		}, `tensor "blk.0.post_ffw_norm.weight": missing`, nil},
		{"gemma 3 q norm too long", "gemma-3-1b", func(ts []gguf.TensorData) []gguf.TensorData {
			for i := range ts {
				if ts[i].Name == "blk.0.attn_q_norm.weight" {
					ts[i].Dims, ts[i].Data = []int64{512}, append(slices.Clone(ts[i].Data), ts[i].Data...)
				}
			}
			return ts
		}, `tensor "blk.0.attn_q_norm.weight": shape [512], want [256]`, nil},
		{"gemma 3 soft-capping", "gemma-3-1b", nil, "final logit soft-capping (30) is not supported",
			[]gguf.KeyValue{{Key: "gemma3.final_logit_softcapping", Value: gguf.Float32(30)}}},
		{"unknown rope scaling", "gemma-3-1b", nil, `rope scaling "yarn" is not supported`,
			[]gguf.KeyValue{{Key: "gemma3.rope.scaling.type", Value: gguf.String("yarn")}}},
		{"a key of the wrong type", "qwen3-0.6b", nil, "qwen3.attention.key_length",
			[]gguf.KeyValue{{Key: "qwen3.attention.key_length", Value: gguf.String("128")}}},
		{"gemma 3 soft-capping of the wrong type", "gemma-3-1b", nil, "gemma3.final_logit_softcapping",
			[]gguf.KeyValue{{Key: "gemma3.final_logit_softcapping", Value: gguf.String("30")}}},
		{"gemma 2", "gemma-3-1b", nil, `architecture "gemma2" is not supported`,
			[]gguf.KeyValue{{Key: "general.architecture", Value: gguf.String("gemma2")}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := gguf.Open(good[tc.shape])
			require.NoError(t, err)
			defer f.Close()
			var ts []gguf.TensorData
			for i := range f.Tensors {
				x := &f.Tensors[i]
				ts = append(ts, gguf.TensorData{Name: x.Name, Type: x.Type, Dims: slices.Clone(x.Dims), Data: f.Data(x)})
			}
			kv := slices.Clone(f.KV)
			for _, e := range tc.kv {
				kv = append(slices.DeleteFunc(kv, func(o gguf.KeyValue) bool { return o.Key == e.Key }), e)
			}
			if tc.edit != nil {
				ts = tc.edit(ts)
			}
			bad := filepath.Join(t.TempDir(), "bad.gguf")
			require.NoError(t, gguf.WriteFile(bad, func(w io.Writer) error { return gguf.Write(w, kv, ts, 0) }))
			_, err = llama.Open(bad, cpu.Factory(1), llama.Options{})
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// TestNewFamiliesGreedyIdentity: speculative greedy decoding on a target of each new
// family equals plain greedy decoding token for token, drafted by a model of the same
// family (fixed and adaptive K) and by prompt lookup in front of one — the
// batch-invariant forward pass on the new architectures.
func TestNewFamiliesGreedyIdentity(t *testing.T) {
	for _, shape := range newFamilies {
		t.Run(shape, func(t *testing.T) { checkGreedyIdentity(t, shape) })
	}
}

// checkGreedyIdentity is TestNewFamiliesGreedyIdentity for one shape.
func checkGreedyIdentity(t *testing.T, shape string) {
	open := func(layers int, seed uint64) *llama.Model {
		_, path := writeShape(t, shape, fileSpec{layers: layers, mix: quantize.Q8_0, seed: seed, untied: true})
		m, err := llama.Open(path, cpu.Factory(2), llama.Options{KVBudget: 64 << 20})
		require.NoError(t, err)
		t.Cleanup(func() { m.Close() })
		return m
	}
	// The draft is the target's twin (the same file: every draft accepted, many rows
	// verified per pass) or a one-layer model (most drafts rejected).
	tm, twin, small := open(withGlobal(shape, 3), 8), open(withGlobal(shape, 3), 8), open(1, 8)
	tgt, err := target.NewLocal(tm)
	require.NoError(t, err)
	plain, err := spec.New(tgt, nil, spec.Options{})
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(3, 4))
	prompt := make([]int32, 40)
	for i := range prompt {
		prompt[i] = int32(rng.IntN(8192))
	}
	copy(prompt[30:], prompt[10:20]) // something for prompt lookup to find
	req := spec.Request{Prompt: prompt, MaxTokens: 40}
	wants, err := plain.GenerateFunc(context.Background(), req, nil)
	require.NoError(t, err)
	want := wants[0]
	for _, c := range []struct {
		name  string
		draft *llama.Model
		k     int
		look  bool
	}{
		{"twin-k4", twin, 4, false}, {"twin-auto", twin, 0, false}, {"small-k4", small, 4, false},
		{"lookup+small-k6", small, 6, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, err := draft.NewSmallModel(c.draft)
			require.NoError(t, err)
			var dr draft.Drafter = d
			if c.look {
				dr = lookup.InFront(d)
			}
			dec, err := spec.New(tgt, dr, spec.Options{K: c.k})
			require.NoError(t, err)
			gots, err := dec.GenerateFunc(context.Background(), req, nil)
			require.NoError(t, err)
			got := gots[0]
			require.Equal(t, want.Tokens, got.Tokens)
			t.Logf("%s", got.Stats)
		})
	}
}

// TestNewFamiliesHFMatchesGGUF: the same weights as a Hugging Face directory
// (config.json of Qwen3ForCausalLM or Phi3ForCausalLM, model.safetensors with Hugging
// Face's tensor names) give the same logits as the GGUF file, bit for bit, and so does
// the directory converted back to GGUF by model/quantize.
func TestNewFamiliesHFMatchesGGUF(t *testing.T) {
	for _, shape := range newFamilies {
		t.Run(shape, func(t *testing.T) { checkHFMatchesGGUF(t, shape) })
	}
}

// checkHFMatchesGGUF is TestNewFamiliesHFMatchesGGUF for one shape.
func checkHFMatchesGGUF(t *testing.T, shape string) {
	s, path := writeShape(t, shape, fileSpec{layers: 1, mix: quantize.F32, seed: 9, narrow: true})
	dir := t.TempDir()
	writeHF(t, path, dir, s.Config)
	tokens := []int32{1, 500, 77, 8000, 4242, 3, 3, 9}
	var logits [2][][]float32
	for i, p := range []string{path, dir} {
		m, err := llama.Open(p, cpu.Factory(1), llama.Options{KVBudget: 64 << 20})
		require.NoError(t, err, p)
		assert.Equal(t, s.Config.HeadDim, m.Config().HeadDim)
		assert.Equal(t, s.Config.QKNorm, m.Config().QKNorm)
		assert.Equal(t, s.Config.Fused, m.Config().Fused)
		assert.Equal(t, s.Config.RopeDim, m.Config().RopeDim)
		assert.Equal(t, s.Config.RopeScale, m.Config().RopeScale)
		assert.Equal(t, s.Config.RopeLongFactors, m.Config().RopeLongFactors)
		assert.Equal(t, s.Config.RopeShortFactors, m.Config().RopeShortFactors)
		assert.Equal(t, s.Config.RopeOriginalContext, m.Config().RopeOriginalContext)
		logits[i] = allLogits(t, m, tokens)
		require.NoError(t, m.Close())
	}
	assert.Equal(t, logits[0], logits[1])

	// The directory converted to GGUF by model/quantize (F32: unchanged weights) gives
	// those logits too.
	converted := filepath.Join(t.TempDir(), "converted.gguf")
	_, err := quantize.File(context.Background(), dir, converted, quantize.F32)
	require.NoError(t, err)
	m, err := llama.Open(converted, cpu.Factory(1), llama.Options{KVBudget: 64 << 20})
	require.NoError(t, err)
	defer m.Close()
	assert.Equal(t, logits[0], allLogits(t, m, tokens), "converted by model/quantize")
	assertSameRope(t, path, converted)
}

// assertSameRope checks that the converted file has the rotary scaling of the synthetic
// one, which holds it as llama.cpp's converter writes it: the same rope.* keys, the
// same rope factor tensors.
func assertSameRope(t *testing.T, want, got string) {
	t.Helper()
	files := [2]*gguf.File{}
	for i, p := range []string{want, got} {
		f, err := gguf.Open(p)
		require.NoError(t, err)
		defer f.Close()
		files[i] = f
	}
	for _, e := range files[0].KV {
		if strings.Contains(e.Key, ".rope.") {
			v, ok := files[1].Value(e.Key)
			if assert.True(t, ok, "key %s", e.Key) {
				assert.Equal(t, e.Value.Any(), v.Any(), "key %s", e.Key)
			}
		}
	}
	for i := range files[0].Tensors {
		x := &files[0].Tensors[i]
		if strings.HasPrefix(x.Name, "rope_") {
			y, ok := files[1].Tensor(x.Name)
			if assert.True(t, ok, "tensor %s", x.Name) {
				assert.Equal(t, x.Type, y.Type, x.Name)
				assert.Equal(t, files[0].Data(x), files[1].Data(y), x.Name)
			}
		}
	}
}

// writeHF writes the F32 tensors of a synthetic GGUF file as a Hugging Face directory:
// config.json for a Qwen3 or Phi-3 model of shape c (partial rotary embeddings and
// longrope scaling included), model.safetensors under Hugging Face's names (shapes
// outermost first).
func writeHF(t *testing.T, ggufPath, dir string, c llama.Config) {
	t.Helper()
	f, err := gguf.Open(ggufPath)
	require.NoError(t, err)
	defer f.Close()
	layer := map[string]string{
		"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
		"attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm",
		"attn_k_norm": "self_attn.k_norm", "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj",
		"ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj", "attn_qkv": "self_attn.qkv_proj",
	}
	if c.Fused {
		layer["ffn_up"] = "mlp.gate_up_proj"
	}
	gemma := c.Arch == "gemma3"
	prefix := "model." // a multimodal Gemma 3's language model: language_model.model.
	if gemma {
		layer["ffn_norm"] = "pre_feedforward_layernorm"
		layer["post_attention_norm"] = "post_attention_layernorm"
		layer["post_ffw_norm"] = "post_feedforward_layernorm"
		prefix = "language_model.model."
	}
	archs := map[string]string{"qwen3": "Qwen3ForCausalLM", "phi3": "Phi3ForCausalLM", "gemma3": "Gemma3ForConditionalGeneration"}
	hfName := func(name string) string {
		switch name {
		case "token_embd.weight":
			return prefix + "embed_tokens.weight"
		case "output_norm.weight":
			return prefix + "norm.weight"
		case "output.weight":
			return "lm_head.weight"
		}
		var l int
		var part string
		_, err := fmt.Sscanf(strings.Replace(name, ".", " ", 2), "blk %d %s", &l, &part)
		require.NoError(t, err, name)
		base, _, _ := strings.Cut(part, ".")
		require.Contains(t, layer, base, name)
		return fmt.Sprintf("%slayers.%d.%s.weight", prefix, l, layer[base])
	}
	header := map[string]any{}
	var body []byte
	for i := range f.Tensors {
		x := &f.Tensors[i]
		if strings.HasPrefix(x.Name, "rope_factors_") {
			continue // in config.json
		}
		require.Equal(t, dtype.F32, x.Type, x.Name)
		shape := slices.Clone(x.Dims)
		slices.Reverse(shape)
		begin := len(body)
		data := f.Data(x)
		if gemma && strings.HasSuffix(x.Name, "norm.weight") {
			data = shiftF32(data, -1) // Hugging Face's Gemma norms hold w of (1 + w)
		}
		body = append(body, data...)
		header[hfName(x.Name)] = map[string]any{"dtype": "F32", "shape": shape, "data_offsets": []int{begin, len(body)}}
	}
	js, err := json.Marshal(header)
	require.NoError(t, err)
	for len(js)%8 != 0 {
		js = append(js, ' ')
	}
	st := binary.LittleEndian.AppendUint64(nil, uint64(len(js)))
	st = append(append(st, js...), body...)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "model.safetensors"), st, 0o644))
	cfg := map[string]any{
		"architectures": []string{archs[c.Arch]}, "model_type": c.Arch, "hidden_size": c.Dim,
		"intermediate_size": c.FFN, "num_attention_heads": c.Heads, "num_key_value_heads": c.KVHeads,
		"head_dim": c.HeadDim, "num_hidden_layers": c.Layers, "rms_norm_eps": c.NormEps, "rope_theta": c.RopeTheta,
		"vocab_size": c.Vocab, "max_position_embeddings": c.ContextLength, "tie_word_embeddings": c.TiedEmbeddings,
		"attention_bias": false, "hidden_act": "silu", "sliding_window": nil, "use_sliding_window": false,
	}
	if c.RopeDim != c.HeadDim {
		cfg["partial_rotary_factor"] = float64(c.RopeDim) / float64(c.HeadDim)
	}
	if c.RopeLongFactors != nil {
		// As Phi-3.5 and Phi-4-mini have it: the original context beside the longrope
		// factors, the attention factor computed from the two contexts.
		cfg["original_max_position_embeddings"] = c.RopeOriginalContext
		cfg["rope_scaling"] = map[string]any{"type": "longrope", "long_factor": c.RopeLongFactors, "short_factor": c.RopeShortFactors}
	}
	if gemma {
		delete(cfg, "hidden_act")
		cfg["hidden_activation"], cfg["query_pre_attn_scalar"] = "gelu_pytorch_tanh", c.HeadDim
		cfg["sliding_window"], cfg["sliding_window_pattern"], cfg["rope_local_base_freq"] = c.SlidingWindow, 6, c.LocalRopeTheta
		cfg["model_type"] = "gemma3_text"
		if c.RopeLinear > 1 {
			cfg["rope_scaling"] = map[string]any{"rope_type": "linear", "factor": c.RopeLinear}
		}
		cfg = map[string]any{"architectures": cfg["architectures"], "model_type": "gemma3", "text_config": cfg}
	}
	js, err = json.Marshal(cfg)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), js, 0o644))
}

// shiftF32 returns little-endian float32 values with d added to each.
func shiftF32(b []byte, d float32) []byte {
	out := make([]byte, len(b))
	for i := 0; i < len(b); i += 4 {
		v := math.Float32frombits(binary.LittleEndian.Uint32(b[i:])) + d
		binary.LittleEndian.PutUint32(out[i:], math.Float32bits(v))
	}
	return out
}

// TestRealVocabulary: a real-scale file written with a real tokenizer.json of
// ../shared/tokenizers — Qwen3's byte-level BPE, padded to the shape's 151 936;
// Gemma 3's SentencePiece-style BPE, scored from its merges, the 1B's 262 144 —
// loads in llama.cpp and in specula with the same logits (Gemma with six layers: the
// first global one with the five sliding ones, which llama.cpp's cache needs); its
// GGUF tokenizer encodes the tokenizer's golden texts to the ids the tokenizer.json
// gives, and llama.cpp's own tokenizer, reading the file, to the golden ids, with and
// without the tokens the model adds (special tokens in the text parsed). On more text
// (the tokenizer tests' corpus, the held-out Go prompts) llama.cpp's tokenizer gives
// the tokenizer.json's ids, special tokens parsed or not: for Gemma 3 that is the
// proof that scores derived from the merge ranks segment as the merges do; Qwen3's
// differences (llama.cpp leaves out the NFC normalization) are only counted.
func TestRealVocabulary(t *testing.T) {
	for _, tc := range []struct {
		tokenizer, shape string
		exact            bool // llama.cpp gives the tokenizer.json's ids for all the corpus
	}{
		{"qwen3", "qwen3-0.6b", false},
		{"gemma3", "gemma-3-1b", true},
	} {
		t.Run(tc.tokenizer, func(t *testing.T) {
			dir := sharedtest.Path(t, "tokenizers", tc.tokenizer)
			r := llamacpp.ForTest(t)
			vocab, err := VocabFrom(dir)
			require.NoError(t, err)
			s, path := writeShape(t, tc.shape, fileSpec{layers: withGlobal(tc.shape, 1), mix: quantize.Q8_0, seed: 10, vocab: vocab})
			g := sharedtest.ReadTokenizerGolden(t, tc.tokenizer)
			fromJSON, err := tokenizer.Load(dir)
			require.NoError(t, err)
			tokens := encodeBoth(t, fromJSON, path, g)
			checkLlamaTokenize(t, r, path, g)
			checkLlamaCorpus(t, r, path, fromJSON, tc.exact)
			m, err := llama.Open(path, cpu.Factory(2), llama.Options{KVBudget: 64 << 20})
			require.NoError(t, err)
			defer m.Close()
			assert.Equal(t, s.Config.Vocab, m.Config().Vocab)
			ref, err := r.Logits(context.Background(), path, tokens, 2)
			require.NoError(t, err)
			p := llamacpp.Compare(allLogits(t, m, tokens), ref, s.Config.Vocab)
			t.Logf("%s vocabulary, %d golden texts: %s", tc.tokenizer, len(g.Rows), p)
			require.Less(t, p.MaxDiff, 0.2)
			require.Equal(t, p.Positions, p.Agree+p.NearTies)
		})
	}
}

// encodeBoth checks that a tokenizer.json's tokenizer and the GGUF file at path
// encode the golden texts alike, and returns up to 96 of the ids.
func encodeBoth(t *testing.T, fromJSON *tokenizer.Tokenizer, path string, g sharedtest.TokenizerGolden) []int32 {
	t.Helper()
	fromGGUF, err := tokenizer.Load(path)
	require.NoError(t, err)
	var tokens []int32
	for _, row := range g.Rows {
		opts := tokenizer.EncodeOptions{ParseSpecial: true}
		ids := fromJSON.Encode(row.Text, opts)
		require.Equal(t, ids, fromGGUF.Encode(row.Text, opts), "%q", row.Text)
		tokens = append(tokens, ids...)
	}
	return tokens[:min(len(tokens), 96)]
}

// checkLlamaTokenize checks that llama.cpp tokenizes the golden texts, by the file at
// path, to the golden ids, without and with the tokens the model adds.
func checkLlamaTokenize(t *testing.T, r *llamacpp.Runner, path string, g sharedtest.TokenizerGolden) {
	t.Helper()
	texts := make([]string, len(g.Rows))
	for i, row := range g.Rows {
		texts[i] = row.Text
	}
	for _, add := range []bool{false, true} {
		got, err := r.Tokenize(context.Background(), path, texts, add, true)
		require.NoError(t, err)
		same := 0
		for i, row := range g.Rows {
			want := row.IDs
			if add {
				want = row.IDsWithSpecial
			}
			if assert.Equal(t, want, got[i], "llama.cpp's ids of %q, add_special %v", row.Text, add) {
				same++
			}
		}
		t.Logf("llama.cpp's tokenizer, add_special %v: %d of %d texts give the golden ids", add, same, len(g.Rows))
	}
}

// TestNewFamiliesSampledDistribution: sampled speculative decoding on a target of each
// new family, drafted by a smaller model of the family (so that drafts are accepted
// and rejected both), draws two-token continuations from the target's own
// distribution — temperature 0.5, top-k 20, computed from the target's logits — by a
// chi-square test over 1500 seeded draws (re-drawn once at α = 1e-3, as the spec tests
// do): the first token through the acceptance rule, the second after it. Gemma 3's
// sliding layers get a window of 3 positions, shorter than the sequences.
func TestNewFamiliesSampledDistribution(t *testing.T) {
	const draws = 1500
	for _, shape := range newFamilies {
		t.Run(shape, func(t *testing.T) {
			open := func(layers int) *llama.Model {
				_, path := writeShape(t, shape, fileSpec{layers: layers, mix: quantize.Q8_0, seed: 21, narrow: true, untied: true, window: 3})
				m, err := llama.Open(path, cpu.Factory(2), llama.Options{KVBudget: 64 << 20})
				require.NoError(t, err)
				t.Cleanup(func() { m.Close() })
				return m
			}
			// The draft is the target without its second layer (the same seed draws
			// the same embedding and first layer): close, not equal.
			tm, dm := open(2), open(1)
			tgt, err := target.NewLocal(tm)
			require.NoError(t, err)
			d, err := draft.NewSmallModel(dm)
			require.NoError(t, err)
			dec, err := spec.New(tgt, d, spec.Options{K: 3})
			require.NoError(t, err)
			logits := func(h []int32) []float32 { return allLogits(t, tm, h)[len(h)-1] }
			spectest.TwoTokens(t, dec, logits, tm.Info().VocabSize, []int32{17, 4000, 256, 9},
				sampler.Params{Temperature: 0.5, TopK: 20}, draws)
		})
	}
}

// checkLlamaCorpus compares llama.cpp's tokenization of the tokenizer tests' corpus
// and the held-out Go prompts, by the file at path, with fromJSON's, special tokens
// parsed and not; exact fails the test on a difference, else they are only counted.
func checkLlamaCorpus(t *testing.T, r *llamacpp.Runner, path string, fromJSON *tokenizer.Tokenizer, exact bool) {
	t.Helper()
	texts := sharedtest.CorpusTexts(t)
	for _, parse := range []bool{true, false} {
		got, err := r.Tokenize(context.Background(), path, texts, false, parse)
		require.NoError(t, err)
		same := 0
		for i, s := range texts {
			want := fromJSON.Encode(s, tokenizer.EncodeOptions{ParseSpecial: parse})
			switch {
			case slices.Equal(want, got[i]):
				same++
			case exact:
				t.Errorf("llama.cpp tokenizes %q (parse_special %v) to %v, the tokenizer.json to %v", s, parse, got[i], want)
			}
		}
		t.Logf("llama.cpp's tokenizer, parse_special %v: %d of %d corpus texts give the tokenizer.json's ids", parse, same, len(texts))
	}
}
