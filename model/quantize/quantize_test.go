package quantize

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/backend/cpu"
	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/format/gguf"
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
	require.NoError(t, seq.Forward(ctx, model.Batch{Tokens: prompt, Outputs: []int32{int32(len(prompt) - 1)}}, out))
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

			q, err := llama.Open(dst, llama.Options{Backend: cpu.Factory(0)})
			require.NoError(t, err)
			defer q.Close()
			orig, err := llama.Open(dir, llama.Options{Backend: cpu.Factory(0)})
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
	awq := sharedtest.Path(t, "models", "gocoder-m-awq")
	_, err = File(ctx, awq, dst, Q8_0)
	assert.ErrorContains(t, err, "config.json: quant_method awq: a quantized checkpoint cannot be converted to GGUF yet")
	assert.NoFileExists(t, dst, "nothing is left behind")
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
	orig, err := llama.Open(src, llama.Options{Backend: cpu.Factory(1)})
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

			q, err := llama.Open(dst, llama.Options{Backend: cpu.Factory(1)})
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
