package heads_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/backend"
	"github.com/specula/specula/backend/cpu"
	"github.com/specula/specula/batch"
	"github.com/specula/specula/draft"
	"github.com/specula/specula/draft/heads"
	"github.com/specula/specula/draft/lookup"
	"github.com/specula/specula/format/safetensors"
	"github.com/specula/specula/internal/headtest"
	"github.com/specula/specula/internal/sharedtest"
	"github.com/specula/specula/model"
	"github.com/specula/specula/model/llama"
	"github.com/specula/specula/sampler"
	"github.com/specula/specula/spec"
	"github.com/specula/specula/target"
)

// Held-out prompts (the ends of two Go files the models never saw).
var (
	promptA = []int32{326, 301, 3532, 46, 1505, 108, 814, 46, 10, 9, 295, 259, 46, 1067, 5685, 2114, 40, 311, 44, 2843,
		41, 671, 281, 116, 46, 3421, 374, 354, 266, 256, 9, 311, 46, 3421, 277, 2843, 10, 9, 125, 10}
	promptB = []int32{295, 259, 2846, 48, 368, 354, 266, 308, 9, 537, 46, 3603, 1864, 40, 116, 2436, 44, 279, 403, 1785,
		385, 308, 9, 1217, 742, 46, 6339, 1864, 297, 10}
)

// gocoderM opens the target the shared heads were trained for, the shared F16
// gocoder-m, on a CPU pool of two threads as an engine does: the pool closes after
// the target, which closes after the heads on it.
func gocoderM(t testing.TB) (*llama.Model, string) {
	t.Helper()
	path := sharedtest.Path(t, "models", "gocoder-m-f16.gguf")
	pool := cpu.NewPool(2)
	t.Cleanup(func() { _ = pool.Close() })
	m, err := llama.Open(path, pool.Factory(), llama.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	return m, path
}

// onTarget returns the options of a head drafting for the target m, loaded from
// path, with the given tree: the target's backend, and EAGLE layers loaded on the
// target's threads with its context length.
func onTarget(m *llama.Model, path string, tree draft.TreeShape) heads.Options {
	factory := threadsOf(m)
	return heads.Options{Backend: m.Backend(), Tree: tree, OpenEAGLE: func(dir string) (heads.Layer, error) {
		return llama.OpenEAGLE(dir, path, factory, llama.Options{ContextLength: m.Info().ContextLength})
	}}
}

// threadsOf is the factory of CPU backends on the threads of m's (CPU) backend: what
// an EAGLE layer for m runs on.
func threadsOf(m *llama.Model) backend.Factory { return m.Backend().(*cpu.Backend).Pool().Factory() }

// states forwards toks through m and returns the final hidden state at every position.
func states(t testing.TB, m *llama.Model, toks []int32) [][]float32 {
	t.Helper()
	s, err := m.NewSequence(context.Background())
	require.NoError(t, err)
	defer s.Close()
	d := m.Info().HiddenSize
	idx := make([]int32, len(toks))
	for i := range idx {
		idx[i] = int32(i)
	}
	h := make([]float32, len(toks)*d)
	require.NoError(t, s.Forward(context.Background(), batch.Batch{Tokens: toks, States: idx, Hidden: h}, nil))
	out := make([][]float32, len(toks))
	for i := range out {
		out[i] = h[i*d : (i+1)*d]
	}
	return out
}

// refTensor reads a tensor of a head directory as float64 rows, decoding BF16, F16
// or F32 itself.
func refTensor(t *testing.T, dir, name string) [][]float64 {
	t.Helper()
	set, err := safetensors.OpenDir(dir)
	require.NoError(t, err)
	defer set.Close()
	ts, ok := set.Tensor(name)
	require.True(t, ok, "tensor %s", name)
	cols := int(ts.Shape[len(ts.Shape)-1])
	n := len(ts.Data) / 2
	val := func(i int) float64 {
		switch ts.DType.String() {
		case "BF16":
			return float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(ts.Data[2*i:])) << 16))
		case "F32":
			return float64(math.Float32frombits(binary.LittleEndian.Uint32(ts.Data[4*i:])))
		}
		t.Fatalf("tensor %s: type %s", name, ts.DType)
		return 0
	}
	if ts.DType.String() == "F32" {
		n = len(ts.Data) / 4
	}
	out := make([][]float64, n/cols)
	for r := range out {
		out[r] = make([]float64, cols)
		for c := range cols {
			out[r][c] = val(r*cols + c)
		}
	}
	return out
}

func matvec(w [][]float64, x []float64) []float64 {
	y := make([]float64, len(w))
	for r, row := range w {
		for c, v := range row {
			y[r] += v * x[c]
		}
	}
	return y
}

func argmax64(x []float64) int32 {
	best := 0
	for i := range x {
		if x[i] > x[best] {
			best = i
		}
	}
	return int32(best)
}

func f64(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

// gap is how far apart a reference's two best logits are: a head may choose either of
// a near tie.
func gap(x []float64) float64 {
	a, b := math.Inf(-1), math.Inf(-1)
	for _, v := range x {
		if v > a {
			a, b = v, a
		} else if v > b {
			b = v
		}
	}
	return a - b
}

// firstToken asks a head drafter for one greedy token after history, told the
// target's states of the whole history.
func firstToken(t *testing.T, d draft.Drafter, history []int32, st [][]float32) int32 {
	t.Helper()
	s, err := d.Start(context.Background(), draft.Request{Prompt: history[:1], VocabSize: 8192, MaxK: 4, MaxLen: 64})
	require.NoError(t, err)
	defer s.Close()
	ss := s.(draft.StateSession)
	require.NoError(t, ss.Observe(history[1:], st[:len(history)-1]))
	var p draft.Proposal
	require.NoError(t, s.Propose(context.Background(), history, 1, &p))
	require.Len(t, p.Tokens, 1)
	return p.Tokens[0]
}

// TestHeadsMatchReference checks each shared head's first drafted token at positions
// of held-out code against a float64 forward of the head written here from its formula
// (the README of ../shared/models), reading the checkpoint's tensors itself.
func TestHeadsMatchReference(t *testing.T) {
	m, path := gocoderM(t)
	toks := append(append([]int32(nil), promptA...), promptB...)
	st := states(t, m, toks)
	positions := []int{5, 12, 19, 27, 33, 41, 48, 56, 63}

	t.Run("MLPSpeculator", func(t *testing.T) {
		dir := sharedtest.Path(t, "models", "gocoder-m-mlp-speculator")
		h, err := heads.OpenMLPSpeculator(dir, m.Info(), heads.Options{Backend: m.Backend()})
		require.NoError(t, err)
		defer h.Close()
		proj0, emb, head := refTensor(t, dir, "proj.0.weight"), refTensor(t, dir, "emb.0.weight"), refTensor(t, dir, "head.0.weight")
		lnw, lnb := refTensor(t, dir, "ln.0.weight"), refTensor(t, dir, "ln.0.bias")
		sw := math.Pow(0.5, 0.5/3)
		ew := math.Sqrt((1 - sw*sw) * 512 / 2)
		rms := func(x []float64) float64 {
			var s float64
			for _, v := range x {
				s += v * v
			}
			return 1 / math.Sqrt(s/float64(len(x))+1e-6)
		}
		compared := 0
		for _, pos := range positions {
			h0 := f64(st[pos])
			r := rms(h0) / math.Sqrt2
			for i := range h0 {
				h0[i] *= r
			}
			z := matvec(proj0, h0)
			for i := range z {
				z[i] = sw*z[i] + ew*emb[toks[pos+1]][i]
			}
			r = rms(z)
			for i := range z {
				x := z[i]*r*lnw[0][i] + lnb[0][i]
				z[i] = 0.5 * x * (1 + math.Erf(x/math.Sqrt2))
			}
			logits := matvec(head, z)
			got := firstToken(t, h, toks[:pos+2], st)
			if gap(logits) > 1e-2 {
				assert.Equal(t, argmax64(logits), got, "position %d", pos)
				compared++
			}
		}
		assert.GreaterOrEqual(t, compared, 3, "positions compared (the others are near ties)")
	})
	t.Run("Medusa", func(t *testing.T) {
		dir := sharedtest.Path(t, "models", "gocoder-m-medusa")
		h, err := heads.OpenMedusa(dir, m.Info(), heads.Options{Backend: m.Backend()})
		require.NoError(t, err)
		defer h.Close()
		w, b, lm := refTensor(t, dir, "blocks.0.layers.0.weight"), refTensor(t, dir, "blocks.0.layers.0.bias"), refTensor(t, dir, "lm_heads.0.weight")
		compared := 0
		for _, pos := range positions {
			x := f64(st[pos])
			y := matvec(w, x)
			for i := range x {
				v := y[i] + b[0][i]
				x[i] += v / (1 + math.Exp(-v))
			}
			logits := matvec(lm, x)
			got := firstToken(t, h, toks[:pos+2], st)
			if gap(logits) > 1e-2 {
				assert.Equal(t, argmax64(logits), got, "position %d", pos)
				compared++
			}
		}
		assert.GreaterOrEqual(t, compared, 3, "positions compared (the others are near ties)")
	})
	t.Run("EAGLE", func(t *testing.T) {
		dir := sharedtest.Path(t, "models", "gocoder-m-eagle")
		layer, err := llama.OpenEAGLE(dir, path, threadsOf(m), llama.Options{})
		require.NoError(t, err)
		defer layer.Close()
		e, err := heads.NewEAGLE(layer, m.Info(), draft.TreeShape{})
		require.NoError(t, err)
		ref := newEagleRef(t, dir, path)
		compared := 0
		for _, pos := range positions[:4] {
			logits := ref.last(toks[1:pos+2], st[:pos+1])
			got := firstToken(t, e, toks[:pos+2], st)
			if gap(logits) > 1e-2 {
				assert.Equal(t, argmax64(logits), got, "position %d", pos)
				compared++
			}
		}
		assert.GreaterOrEqual(t, compared, 3, "positions compared (the others are near ties)")
	})
}

// TestUntiedCopiesDraftAlike writes an untied copy of each tied shared checkpoint — an
// MLPSpeculator with emb.i, proj.i, head.i and ln.i per stage, Medusa with one output
// layer per head, and Medusa in the original repository's layout — by repeating its
// tensors, and checks that each copy proposes what the original does, greedy and
// sampled.
func TestUntiedCopiesDraftAlike(t *testing.T) {
	m, _ := gocoderM(t)
	toks := promptA
	st := states(t, m, toks)
	copyDir := func(src string, cfg map[string]any, rename func(name string) []string) string {
		set, err := safetensors.OpenDir(src)
		require.NoError(t, err)
		defer set.Close()
		out := map[string]headtest.Tensor{}
		for _, name := range set.Names() {
			ts, _ := set.Tensor(name)
			for _, n := range rename(name) {
				out[n] = headtest.Tensor{DType: ts.DType.String(), Shape: ts.Shape, Data: ts.Data}
			}
		}
		dir := filepath.Join(t.TempDir(), filepath.Base(src))
		require.NoError(t, headtest.Write(dir, cfg, out))
		return dir
	}
	readCfg := func(dir string) map[string]any {
		var c map[string]any
		raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
		require.NoError(t, err)
		require.NoError(t, jsonUnmarshal(raw, &c))
		return c
	}
	mlp := sharedtest.Path(t, "models", "gocoder-m-mlp-speculator")
	mcfg := readCfg(mlp)
	mcfg["tie_weights"] = false
	untiedMLP := copyDir(mlp, mcfg, func(name string) []string {
		var stem string
		for _, p := range []string{"emb", "head", "ln"} {
			if len(name) > len(p) && name[:len(p)+1] == p+"." {
				stem = p
			}
		}
		if stem != "" { // emb.0 → emb.0, emb.1, emb.2
			rest := name[len(stem)+2:]
			return []string{stem + ".0" + rest, stem + ".1" + rest, stem + ".2" + rest}
		}
		if name == "proj.1.weight" {
			return []string{"proj.1.weight", "proj.2.weight"}
		}
		return []string{name}
	})
	medusa := sharedtest.Path(t, "models", "gocoder-m-medusa")
	ucfg := readCfg(medusa)
	ucfg["original_lm_head"] = false
	untiedMedusa := copyDir(medusa, ucfg, func(name string) []string {
		if name == "lm_heads.0.weight" {
			return []string{"lm_heads.0.weight", "lm_heads.1.weight", "lm_heads.2.weight", "lm_heads.3.weight"}
		}
		return []string{name}
	})
	originalMedusa := copyDir(medusa, readCfg(medusa), func(name string) []string {
		var k, l int
		if n, _ := fmt.Sscanf(name, "blocks.%d.layers.%d.weight", &k, &l); n == 2 && strings.HasSuffix(name, ".weight") {
			return []string{strconv.Itoa(k) + "." + strconv.Itoa(l) + ".linear.weight"}
		}
		if n, _ := fmt.Sscanf(name, "blocks.%d.layers.%d.bias", &k, &l); n == 2 && strings.HasSuffix(name, ".bias") {
			return []string{strconv.Itoa(k) + "." + strconv.Itoa(l) + ".linear.bias"}
		}
		return []string{"0.1.weight", "1.1.weight", "2.1.weight", "3.1.weight"} // lm_heads.0, one per head
	})
	for _, c := range []struct{ name, orig, copy string }{
		{"MLPSpeculator untied", mlp, untiedMLP},
		{"Medusa untied", medusa, untiedMedusa},
		{"Medusa original layout", medusa, originalMedusa},
	} {
		t.Run(c.name, func(t *testing.T) {
			open := func(dir string) draft.Drafter {
				d, closer, err := heads.Open(dir, m.Info(), heads.Options{Backend: m.Backend()})
				require.NoError(t, err)
				t.Cleanup(func() { _ = closer.Close() })
				return d
			}
			a, b := open(c.orig), open(c.copy)
			for _, temp := range []float64{0, 0.8} {
				for _, pos := range []int{8, 17, 30} {
					pa, pb := proposeHead(t, a, toks[:pos+2], st, temp), proposeHead(t, b, toks[:pos+2], st, temp)
					assert.Equal(t, pa.Tokens, pb.Tokens, "T=%v position %d", temp, pos)
					assert.Equal(t, pa.Dists, pb.Dists, "T=%v position %d", temp, pos)
				}
			}
		})
	}
}

// proposeHead asks d for 3 tokens after history at temperature temp (seed 1).
func proposeHead(t *testing.T, d draft.Drafter, history []int32, st [][]float32, temp float64) draft.Proposal {
	t.Helper()
	return proposeK(t, d, 8192, 3, history, st, temp)
}

// proposeK asks d, for a target of vocab tokens, for k tokens after history, told
// the target's states of the history, at temperature temp (seed 1).
func proposeK(t *testing.T, d draft.Drafter, vocab, k int, history []int32, st [][]float32, temp float64) draft.Proposal {
	t.Helper()
	s, err := d.Start(context.Background(), draft.Request{Prompt: history[:1], VocabSize: vocab, MaxK: k, MaxLen: 64,
		Sampling: sampler.Params{Temperature: temp, Seed: 1}})
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.(draft.StateSession).Observe(history[1:], st[:len(history)-1]))
	var p draft.Proposal
	require.NoError(t, s.Propose(context.Background(), history, k, &p))
	out := draft.Proposal{Tokens: append([]int32(nil), p.Tokens...)}
	for _, q := range p.Dists {
		out.Dists = append(out.Dists, append([]float32(nil), q...))
	}
	return out
}

// TestHeadsGreedyIdentity decodes held-out prompts greedily with gocoder-m drafted by
// each shared head — chains, and trees for Medusa and EAGLE — and requires the plain
// greedy output, token for token.
func TestHeadsGreedyIdentity(t *testing.T) {
	m, path := gocoderM(t)
	tgt, err := target.NewLocal(m)
	require.NoError(t, err)
	plain, err := spec.New(tgt, nil, spec.Options{})
	require.NoError(t, err)
	tree := draft.TreeShape{Width: 2, Depth: 3, MaxNodes: 8}
	for _, c := range []struct {
		name, dir string
		tree      draft.TreeShape
		k         int
		adaptive  bool
	}{
		{"mlp", "gocoder-m-mlp-speculator", draft.TreeShape{}, 3, false},
		{"medusa", "gocoder-m-medusa", draft.TreeShape{}, 4, false},
		{"medusa-tree", "gocoder-m-medusa", tree, 8, false},
		{"eagle", "gocoder-m-eagle", draft.TreeShape{}, 4, false},
		{"eagle-tree", "gocoder-m-eagle", tree, 8, false},
		{"eagle-adaptive", "gocoder-m-eagle", draft.TreeShape{}, 8, true},
		{"medusa-adaptive", "gocoder-m-medusa", draft.TreeShape{}, 4, true},
		{"eagle3", "gocoder-m-eagle3", draft.TreeShape{}, 4, false},
		{"eagle3-tree", "gocoder-m-eagle3", tree, 8, false},
		{"eagle3-adaptive", "gocoder-m-eagle3", draft.TreeShape{}, 8, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, closer, err := heads.Open(sharedtest.Path(t, "models", c.dir), m.Info(), onTarget(m, path, c.tree))
			require.NoError(t, err)
			defer closer.Close()
			if c.adaptive {
				d = lookup.InFront(d)
			}
			dec, err := spec.New(tgt, d, spec.Options{K: c.k, Adaptive: c.adaptive})
			require.NoError(t, err)
			for _, prompt := range [][]int32{promptA, promptB} {
				req := spec.Request{Prompt: prompt, MaxTokens: 32}
				wants, err := plain.GenerateFunc(context.Background(), req, nil)
				require.NoError(t, err)
				want := wants[0]
				gots, err := dec.GenerateFunc(context.Background(), req, nil)
				require.NoError(t, err)
				got := gots[0]
				assert.Equal(t, want.Tokens, got.Tokens)
				assert.Positive(t, got.Stats.Accepted, "the head's drafts were accepted")
				t.Logf("prompt of %d: %s", len(prompt), got.Stats.String())
			}
		})
	}
}

// TestHeadErrors checks that heads refuse targets they do not fit, naming both.
func TestHeadErrors(t *testing.T) {
	dir := sharedtest.Path(t, "models", "gocoder-m-medusa")
	_, err := heads.OpenMedusa(dir, model.Info{Name: "small", VocabSize: 8192, HiddenSize: 256}, heads.Options{})
	assert.ErrorContains(t, err, "hidden states of 512 values; target \"small\" has 256")
	_, err = heads.OpenMedusa(dir, model.Info{Name: "other", VocabSize: 32000, HiddenSize: 512}, heads.Options{})
	assert.ErrorContains(t, err, "vocabulary of 8192; target \"other\" has 32000")
	_, err = heads.OpenMedusa(dir, model.Info{Name: "markov", VocabSize: 8192}, heads.Options{})
	assert.ErrorContains(t, err, "gives none")
	_, err = heads.OpenMLPSpeculator(dir, model.Info{VocabSize: 8192, HiddenSize: 512}, heads.Options{})
	assert.ErrorContains(t, err, `model_type "medusa", want mlp_speculator`)
	_, _, err = heads.Open(t.TempDir(), model.Info{}, heads.Options{})
	assert.ErrorContains(t, err, "config.json")
}
