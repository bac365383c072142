package quantize

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/backend/cpu"
	"github.com/specula/specula/batch"
	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/format/gguf"
	"github.com/specula/specula/format/hfquant"
	"github.com/specula/specula/internal/sharedtest"
	"github.com/specula/specula/model"
	"github.com/specula/specula/model/llama"
)

// TestMatchesLlamaCppQ8 quantises the F16 GGUF of gocoder-xs and compares it with the
// Q8_0 file llama.cpp's tools made from the float32 master weights: the same tensors,
// types and shapes, and in every block the same scale (within float16 rounding of the
// F16 copy) and codes at most one step apart.
func TestMatchesLlamaCppQ8(t *testing.T) {
	src := sharedtest.Path(t, "models", "gocoder-xs-f16.gguf")
	ref := sharedtest.Path(t, "models", "gocoder-xs-q8_0.gguf")
	dst := filepath.Join(t.TempDir(), "xs-q8.gguf")
	r, err := File(context.Background(), src, dst, Q8_0)
	require.NoError(t, err)
	t.Logf("%+v", r)
	got, err := gguf.Open(dst)
	require.NoError(t, err)
	defer got.Close()
	want, err := gguf.Open(ref)
	require.NoError(t, err)
	defer want.Close()
	require.Len(t, got.Tensors, len(want.Tensors))
	codes, same := 0, 0
	for i := range want.Tensors {
		wt := &want.Tensors[i]
		gt, ok := got.Tensor(wt.Name)
		require.True(t, ok, wt.Name)
		require.Equal(t, wt.Type, gt.Type, wt.Name)
		require.Equal(t, wt.Dims, gt.Dims, wt.Name)
		a, b := got.Data(gt), want.Data(wt)
		if wt.Type != dtype.Q8_0 {
			assert.True(t, bytes.Equal(a, b), wt.Name)
			continue
		}
		for blk := 0; blk < len(a)/34; blk++ {
			x, y := a[blk*34:(blk+1)*34], b[blk*34:(blk+1)*34]
			dx := dtype.F16ToF32(binary.LittleEndian.Uint16(x))
			dy := dtype.F16ToF32(binary.LittleEndian.Uint16(y))
			require.InDelta(t, dy, dx, 2e-3*math.Abs(float64(dy))+1e-9, "%s block %d scale", wt.Name, blk)
			for j := 2; j < 34; j++ {
				d := int(int8(x[j])) - int(int8(y[j]))
				require.LessOrEqual(t, max(d, -d), 1, "%s block %d code %d", wt.Name, blk, j-2)
				codes++
				if d == 0 {
					same++
				}
			}
		}
	}
	t.Logf("%.2f%% of %d codes identical to llama.cpp's, the rest one step apart", 100*float64(same)/float64(codes), codes)
	assert.Greater(t, float64(same)/float64(codes), 0.9)
	ft, err := got.Uint("general.file_type")
	require.NoError(t, err)
	assert.Equal(t, uint64(7), ft)
}

func logitsAfter(t *testing.T, m model.Model, prompt []int32) []float32 {
	ctx := context.Background()
	seq, err := m.NewSequence(ctx)
	require.NoError(t, err)
	defer seq.Close()
	out := make([]float32, m.Info().VocabSize)
	require.NoError(t, seq.Forward(ctx, batch.Batch{Tokens: prompt, Outputs: []int32{int32(len(prompt) - 1)}}, out))
	return out
}

// maxErr is the largest absolute logit difference relative to the largest logit.
func maxErr(a, b []float32) float64 {
	var worst, scale float64
	for i := range a {
		worst = math.Max(worst, math.Abs(float64(a[i]-b[i])))
		scale = math.Max(scale, math.Abs(float64(b[i])))
	}
	return worst / scale
}

// TestFromHFDirectory converts the safetensors copies (BF16 llama, F32 qwen2) and
// checks the result against the original: same tokenizer as llama.cpp's converter
// wrote, and logits close to the unquantised model's.
func TestFromHFDirectory(t *testing.T) {
	prompt := []int32{8191, 100, 2000, 37, 5, 900, 13, 42}
	for _, c := range []struct {
		dir, refGGUF string
		mix          Mix
		tol          float64
	}{
		{"gocoder-xs", "gocoder-xs-f16.gguf", Q8_0, 0.02},
		{"gocoder-xs", "gocoder-xs-f16.gguf", Q4_0, 0.15},
		{"gocoder-xs", "gocoder-xs-f16.gguf", Q4_K_M, 0.15},
		{"tiny-qwen2-random", "tiny-qwen2-random-f32.gguf", Q8_0, 0.05}, // random weights: flat logits
	} {
		t.Run(c.dir+"/"+string(c.mix), func(t *testing.T) {
			dir := sharedtest.Path(t, "models", c.dir)
			dst := filepath.Join(t.TempDir(), "out.gguf")
			r, err := File(context.Background(), dir, dst, c.mix)
			require.NoError(t, err)
			assert.Empty(t, r.Notes)
			t.Logf("converted %v, %d kept, %d → %d bytes", r.Types, r.Kept, r.BytesIn, r.BytesOut)

			q, err := llama.Open(dst, cpu.Factory(0), llama.Options{})
			require.NoError(t, err)
			defer q.Close()
			orig, err := llama.Open(dir, cpu.Factory(0), llama.Options{})
			require.NoError(t, err)
			defer orig.Close()
			e := maxErr(logitsAfter(t, q, prompt), logitsAfter(t, orig, prompt))
			t.Logf("logit error against the original: %.3g", e)
			assert.Less(t, e, c.tol)

			// The tokenizer metadata equals what llama.cpp's converter wrote.
			got, err := gguf.Open(dst)
			require.NoError(t, err)
			defer got.Close()
			want, err := gguf.Open(sharedtest.Path(t, "models", c.refGGUF))
			require.NoError(t, err)
			defer want.Close()
			for _, key := range []string{"tokenizer.ggml.tokens", "tokenizer.ggml.merges"} {
				g, err := got.Strings(key)
				require.NoError(t, err)
				w, err := want.Strings(key)
				require.NoError(t, err)
				assert.Equal(t, w, g, key)
			}
			g, _ := got.Int32s("tokenizer.ggml.token_type")
			w, _ := want.Int32s("tokenizer.ggml.token_type")
			assert.Equal(t, w, g)
		})
	}
}

func TestErrors(t *testing.T) {
	ctx := context.Background()
	dst := filepath.Join(t.TempDir(), "x.gguf")
	_, err := File(ctx, "/nonexistent/model", dst, Q8_0)
	assert.ErrorContains(t, err, "nonexistent")
	_, err = File(ctx, "/nonexistent/model", dst, "Q3_K_S")
	assert.ErrorContains(t, err, `unknown mix "Q3_K_S" (known: F32, F16,`)
	q8 := sharedtest.Path(t, "models", "gocoder-xs-q8_0.gguf")
	_, err = File(ctx, q8, dst, Q4_0)
	assert.ErrorContains(t, err, "only F32, F16 and BF16")
	assert.NoFileExists(t, dst, "nothing is left behind")
}

// modelGolden is the part of a shared checkpoint's known answers the conversion
// tests read.
type modelGolden struct {
	Cases []struct {
		PromptIDs []int32 `json:"prompt_ids"`
		GreedyIDs []int32 `json:"greedy_ids"`
	} `json:"cases"`
}

// greedyIDs continues a prompt greedily for n tokens.
func greedyIDs(t *testing.T, m model.Model, prompt []int32, n int) []int32 {
	ctx := context.Background()
	seq, err := m.NewSequence(ctx)
	require.NoError(t, err)
	defer seq.Close()
	logits := make([]float32, m.Info().VocabSize)
	var out []int32
	in := prompt
	for range n {
		require.NoError(t, seq.Forward(ctx, batch.Batch{Tokens: in, Outputs: []int32{int32(len(in) - 1)}}, logits))
		next := int32(0)
		for i, v := range logits {
			if v > logits[next] {
				next = int32(i)
			}
		}
		out = append(out, next)
		in = []int32{next}
	}
	return out
}

// TestFromQuantizedHF converts the shared quantized checkpoints whose layers a GGUF
// type holds exactly — compressed-tensors W4A16 to Q4_0, GPTQ v2 8-bit and AWQ to
// Q8_0 — with their float16 embeddings and norms kept (mix F16): every linear layer
// is the bytes the runtime itself loads from the directory, the converted file's
// logits equal the directory's, and its greedy continuations equal the known answers.
// Act-order GPTQ and FP8 are refused, naming the layer and why, and with Requantize
// convert lossily, close to the known answers.
func TestFromQuantizedHF(t *testing.T) {
	for _, c := range []struct {
		name       string
		requantize bool
		typ        dtype.DType // of the linear layers
		err        string
	}{
		{name: "gocoder-m-w4a16", typ: dtype.Q4_0},
		{name: "gocoder-s-gptq8", typ: dtype.Q8_0},
		{name: "gocoder-m-awq", typ: dtype.Q8_0},
		{name: "gocoder-m-gptq", err: "model.layers.0.mlp.down_proj: no exact repacking: act-order (g_idx)"},
		{name: "gocoder-s-fp8", err: "FP8 e4m3 values times a float32 block scale share no integer grid"},
		{name: "gocoder-m-gptq", requantize: true, typ: dtype.Q8_0},
		{name: "gocoder-s-fp8", requantize: true, typ: dtype.Q8_0},
	} {
		t.Run(fmt.Sprintf("%s/requantize=%v", c.name, c.requantize), func(t *testing.T) {
			dir := sharedtest.Path(t, "models", c.name)
			dst := filepath.Join(t.TempDir(), "out.gguf")
			mix := F16
			if c.requantize {
				mix = Q8_0
			}
			r, err := FileWith(context.Background(), dir, dst, mix, Options{Requantize: c.requantize})
			if c.err != "" {
				assert.ErrorContains(t, err, c.err)
				assert.ErrorContains(t, err, "no exact repacking")
				assert.ErrorContains(t, err, "no GGUF type holds this layer exactly")
				assert.ErrorIs(t, err, hfquant.ErrNotExact)
				assert.NoFileExists(t, dst, "nothing is left behind")
				t.Log(err)
				return
			}
			require.NoError(t, err)
			t.Logf("%d layers exact, converted %v, %d kept, %d → %d bytes, notes %q", r.Exact, r.Types, r.Kept, r.BytesIn, r.BytesOut, r.Notes)
			out, err := gguf.Open(dst)
			require.NoError(t, err)
			defer out.Close()
			down, ok := out.Tensor("blk.0.ffn_down.weight")
			require.True(t, ok)
			assert.Equal(t, c.typ, down.Type)

			q, err := llama.Open(dst, cpu.Factory(2), llama.Options{})
			require.NoError(t, err)
			defer q.Close()
			var g modelGolden
			raw, err := os.ReadFile(sharedtest.Path(t, "models", c.name+".golden.json"))
			require.NoError(t, err)
			require.NoError(t, json.Unmarshal(raw, &g))
			if c.requantize {
				assert.Zero(t, r.Exact)
				require.Len(t, r.Notes, 1)
				assert.Contains(t, r.Notes[0], "lossy")
				// Lossy: the first case's first tokens, not every token, are checked.
				ids := greedyIDs(t, q, g.Cases[0].PromptIDs, 4)
				assert.Equal(t, g.Cases[0].GreedyIDs[:4], ids, "greedy continuation, requantized")
				return
			}
			assert.Positive(t, r.Exact)
			assert.Empty(t, r.Notes)
			// Every linear layer is the bytes the runtime loads from the directory (Q and
			// K with their rows permuted for llama.cpp's interleaved rotary pairs).
			hc, err := llama.ReadHFConfig(dir)
			require.NoError(t, err)
			tensors, err := llama.OpenTensors(dir)
			require.NoError(t, err)
			defer tensors.Close()
			layers := 0
			for l := range hc.Layers {
				for hf, gg := range map[string]string{"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
					"self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"} {
					typ, shape, want, ok := tensors.Lookup(fmt.Sprintf("model.layers.%d.%s.weight", l, hf))
					require.True(t, ok)
					got, ok := out.Tensor(fmt.Sprintf("blk.%d.%s.weight", l, gg))
					require.True(t, ok)
					require.Equal(t, c.typ, got.Type)
					if typ == dtype.Q4_Z || typ == dtype.Q4_Z128 { // AWQ runs as Q4_Z128 (or Q4_Z); the file holds its exact Q8_0 copy
						want, err = dtype.ZToQ8_0(typ, want)
						require.NoError(t, err)
						typ = dtype.Q8_0
					}
					require.Equal(t, c.typ, typ)
					switch gg {
					case "attn_q":
						want = permuteRows(want, hc.Heads, int(shape[0]))
					case "attn_k":
						want = permuteRows(want, hc.KVHeads, int(shape[0]))
					}
					require.True(t, bytes.Equal(want, out.Data(got)), "blk.%d.%s: the bytes the runtime loads", l, gg)
					layers++
				}
			}
			assert.Equal(t, r.Exact, layers)

			// The directory and the file compute the same products, but llama.cpp's
			// interleaved rotary layout sums a head's dot products in another order:
			// the logits differ in the last bits, which the 8-bit rounding of the
			// integer kernels' activations carries to about 1e-3 (measured: at most
			// 1.2e-3 of the largest logit), and greedy decoding agrees with the known
			// answers except at a near-tie late in a continuation (gocoder-s-gptq8: 30 of
			// 32 tokens on one prompt). Bit-for-bit equality, where no permutation intervenes (qwen2),
			// is checked in model/synth (TestWriteHFConverted).
			orig, err := llama.Open(dir, cpu.Factory(2), llama.Options{})
			require.NoError(t, err)
			defer orig.Close()
			for _, gc := range g.Cases {
				prompt := gc.PromptIDs
				e := maxErr(logitsAfter(t, q, prompt), logitsAfter(t, orig, prompt))
				ids := greedyIDs(t, q, prompt, len(gc.GreedyIDs))
				agree := 0
				for agree < len(ids) && ids[agree] == gc.GreedyIDs[agree] {
					agree++
				}
				t.Logf("%d prompt tokens: logits within %.3g of the largest; greedy agrees with the known answer for %d of %d tokens", len(prompt), e, agree, len(ids))
				assert.Less(t, e, 3e-3)
				assert.GreaterOrEqual(t, agree, 24)
			}
		})
	}
}

func TestPermuteRows(t *testing.T) {
	// Two heads of 4 rows, one byte each: rotate-half pairs (0,2), (1,3) become
	// adjacent: 0 2 1 3.
	got := permuteRows([]byte{0, 1, 2, 3, 4, 5, 6, 7}, 2, 8)
	assert.Equal(t, []byte{0, 2, 1, 3, 4, 6, 5, 7}, got)
}

// TestEveryMix converts the F16 gocoder-s to every mix and checks the file: each
// matrix has the type the mix's rules give it, every other tensor is unchanged, the
// file type is llama.cpp's, and the model's logits stay close to the F16 model's.
func TestEveryMix(t *testing.T) {
	src := sharedtest.Path(t, "models", "gocoder-s-f16.gguf")
	prompt := []int32{8191, 100, 2000, 37, 5, 900, 13, 42}
	orig, err := llama.Open(src, cpu.Factory(1), llama.Options{})
	require.NoError(t, err)
	defer orig.Close()
	want := logitsAfter(t, orig, prompt)
	in, err := gguf.Open(src)
	require.NoError(t, err)
	defer in.Close()
	layers := orig.Config().Layers
	_, untied := in.Tensor("output.weight")
	for _, mix := range Mixes() {
		t.Run(string(mix), func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "out.gguf")
			r, err := File(context.Background(), src, dst, mix)
			require.NoError(t, err)
			out, err := gguf.Open(dst)
			require.NoError(t, err)
			defer out.Close()
			seen := map[dtype.DType]bool{}
			for i := range in.Tensors {
				tn := &in.Tensors[i]
				got, ok := out.Tensor(tn.Name)
				require.True(t, ok, tn.Name)
				want := tn.Type
				if Matrix(tn.Name, tn.Dims) {
					want = mix.Type(tn.Name, tn.Dims[0], layers, !untied)
				}
				assert.Equal(t, want, got.Type, tn.Name)
				seen[got.Type] = true
			}
			if mix == Q4_K_M || mix == Q5_K_M {
				assert.True(t, seen[dtype.Q6_K], "%s gives some matrices Q6_K", mix)
			}
			ft, err := out.Uint("general.file_type")
			require.NoError(t, err)
			assert.Equal(t, uint64(mix.FileType()), ft)
			if mix.Quantized() {
				assert.Less(t, r.BytesOut, r.BytesIn)
			}

			q, err := llama.Open(dst, cpu.Factory(1), llama.Options{})
			require.NoError(t, err)
			defer q.Close()
			e := maxErr(logitsAfter(t, q, prompt), want)
			t.Logf("%s: converted %v, logit error against F16 %.3g", mix, r.Types, e)
			assert.Less(t, e, 0.15)
		})
	}
}

func TestParseMix(t *testing.T) {
	for _, m := range Mixes() {
		got, err := ParseMix(strings.ToLower(string(m)))
		require.NoError(t, err)
		assert.Equal(t, m, got)
	}
	_, err := ParseMix("q3_k_m")
	assert.ErrorContains(t, err, `unknown mix "q3_k_m"`)
}
