package llama

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/specula/specula/backend"
	"github.com/specula/specula/format/dtype"
)

// encodeWeights turns float32 values into bytes of type t.
func encodeWeights(t testing.TB, typ dtype.DType, w []float32) []byte {
	out, err := dtype.Encode(typ, w)
	require.NoError(t, err)
	return out
}

// memTensor is a tensor of a memSource.
type memTensor struct {
	typ   dtype.DType
	shape []int64
	data  []byte
}

// memSource is a tensor source in memory, for models made up by the tests.
type memSource map[string]memTensor

func (s memSource) lookup(name string) (dtype.DType, []int64, []byte, bool) {
	t, ok := s[name]
	return t.typ, t.shape, t.data, ok
}
func (s memSource) mapped() bool { return false }
func (s memSource) size() int64 {
	var n int64
	for _, t := range s {
		n += int64(len(t.data))
	}
	return n
}

type nopCloser struct{}

func (nopCloser) Close() error { return nil }

// randomTensors makes the tensors of a model of shape cfg with random weights of type
// typ (norms and biases F32), under GGUF names.
func randomTensors(t testing.TB, cfg Config, typ dtype.DType, seed uint64) memSource {
	rng := rand.New(rand.NewPCG(seed, 99))
	src := memSource{}
	mat := func(name string, rows, cols int, scale float64) {
		w := make([]float32, rows*cols)
		for i := range w {
			w[i] = float32(rng.NormFloat64() * scale)
		}
		src[name] = memTensor{typ, []int64{int64(rows), int64(cols)}, encodeWeights(t, typ, w)}
	}
	vec := func(name string, n int, mean, scale float64) {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(mean + rng.NormFloat64()*scale)
		}
		src[name] = memTensor{dtype.F32, []int64{int64(n)}, encodeWeights(t, dtype.F32, v)}
	}
	n := GGUFNames()
	hd := cfg.HeadDim
	mat(n.Embed, cfg.Vocab, cfg.Dim, 1)
	for i := range cfg.Layers {
		name := func(p string) string { return n.Layer(i, p) }
		vec(name("attn_norm"), cfg.Dim, 1, 0.1)
		mat(name("q"), cfg.Heads*hd, cfg.Dim, 1/math.Sqrt(float64(cfg.Dim)))
		mat(name("k"), cfg.KVHeads*hd, cfg.Dim, 1/math.Sqrt(float64(cfg.Dim)))
		mat(name("v"), cfg.KVHeads*hd, cfg.Dim, 1/math.Sqrt(float64(cfg.Dim)))
		mat(name("o"), cfg.Dim, cfg.Heads*hd, 1/math.Sqrt(float64(cfg.Heads*hd)))
		vec(name("ffn_norm"), cfg.Dim, 1, 0.1)
		mat(name("gate"), cfg.FFN, cfg.Dim, 1/math.Sqrt(float64(cfg.Dim)))
		mat(name("up"), cfg.FFN, cfg.Dim, 1/math.Sqrt(float64(cfg.Dim)))
		mat(name("down"), cfg.Dim, cfg.FFN, 1/math.Sqrt(float64(cfg.FFN)))
		if cfg.QKVBias {
			vec(name("q_bias"), cfg.Heads*hd, 0, 0.5)
			vec(name("k_bias"), cfg.KVHeads*hd, 0, 0.5)
			vec(name("v_bias"), cfg.KVHeads*hd, 0, 0.5)
		}
		if cfg.QKNorm {
			vec(name("q_norm"), hd, 1, 0.2)
			vec(name("k_norm"), hd, 1, 0.2)
		}
		if cfg.PostNorms {
			vec(name("post_attn_norm"), cfg.Dim, 1, 0.2)
			vec(name("post_ffn_norm"), cfg.Dim, 1, 0.2)
		}
	}
	vec(n.OutNorm, cfg.Dim, 1, 0.1)
	if !cfg.TiedEmbeddings {
		mat(n.Output, cfg.Vocab, cfg.Dim, 1/math.Sqrt(float64(cfg.Dim)))
	}
	return src
}

// randomTensorsOf returns the tensors of a model of shape cfg with random weights, as
// Open would see them.
func randomTensorsOf(t testing.TB, cfg Config, typ dtype.DType, seed uint64) *Tensors {
	return &Tensors{Config: cfg, Name: "random", Names: GGUFNames(), src: randomTensors(t, cfg, typ, seed),
		file: "random", closer: nopCloser{}}
}

// randomModel builds a model with random weights of type typ.
func randomModel(t testing.TB, cfg Config, typ dtype.DType, seed uint64, b backend.Factory, opts Options) *Model {
	t.Helper()
	m, err := build(randomTensorsOf(t, cfg, typ, seed), b, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// reference computes the logits at every position of toks in float64, one
// straightforward step after another, from the decoded weights of src.
func reference(t testing.TB, m *Model, src memSource, toks []int32) [][]float64 {
	c := m.cfg
	T, hd := len(toks), c.HeadDim
	n := GGUFNames()
	dec := func(name string) [][]float64 {
		tn := src[name]
		rows, cols := int(tn.shape[0]), int(tn.shape[1])
		vals := make([]float32, rows*cols)
		require.NoError(t, dtype.Dequantize(tn.typ, tn.data, vals))
		out := make([][]float64, rows)
		for r := range out {
			out[r] = make([]float64, cols)
			for i, v := range vals[r*cols : (r+1)*cols] {
				out[r][i] = float64(v)
			}
		}
		return out
	}
	vec := func(name string) []float32 {
		tn, ok := src[name]
		if !ok {
			return nil
		}
		v := make([]float32, tn.shape[0])
		require.NoError(t, dtype.Dequantize(tn.typ, tn.data, v))
		return v
	}
	matvec := func(w [][]float64, x []float64) []float64 {
		y := make([]float64, len(w))
		for r := range w {
			for i, v := range x {
				y[r] += w[r][i] * v
			}
		}
		return y
	}
	norm := func(x []float64, w []float32) []float64 {
		var ss float64
		for _, v := range x {
			ss += v * v
		}
		s := 1 / math.Sqrt(ss/float64(len(x))+float64(c.NormEps))
		y := make([]float64, len(x))
		for i := range x {
			y[i] = x[i] * s * float64(w[i])
		}
		return y
	}
	ropeRef := func(x []float64, pos int, invFreq []float64) {
		half := c.RopeDim / 2
		for j := range half {
			ang := float64(pos) * invFreq[j]
			cs, sn := math.Cos(ang), math.Sin(ang)
			a, b := 2*j, 2*j+1
			if c.RopeStyle == RopeHalf {
				a, b = j, j+half
			}
			x[a], x[b] = x[a]*cs-x[b]*sn, x[a]*sn+x[b]*cs
		}
	}
	headNorm := func(x []float64, w []float32) {
		if w != nil {
			copy(x, norm(x, w))
		}
	}
	gate := func(g float64) float64 {
		if c.Activation == backend.GELUTanh {
			return 0.5 * g * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(g+0.044715*g*g*g)))
		}
		return g / (1 + math.Exp(-g))
	}
	// addOut adds a sublayer's output to the residual stream, normalised first when
	// there is a post-norm.
	addOut := func(x, o []float64, post []float32) {
		if post != nil {
			o = norm(o, post)
		}
		for i := range x {
			x[i] += o[i]
		}
	}
	scale := 1 / math.Sqrt(float64(hd))
	if c.AttnScale != 0 {
		scale = float64(c.AttnScale)
	}
	emb := dec(n.Embed)
	X := make([][]float64, T)
	for p, tok := range toks {
		X[p] = append([]float64(nil), emb[tok]...)
		if c.EmbedScale != 0 {
			for i := range X[p] {
				X[p][i] *= float64(c.EmbedScale)
			}
		}
	}
	for l := range c.Layers {
		name := func(p string) string { return n.Layer(l, p) }
		wq, wk, wv, wo := dec(name("q")), dec(name("k")), dec(name("v")), dec(name("o"))
		wg, wu, wd := dec(name("gate")), dec(name("up")), dec(name("down"))
		attnNorm, ffnNorm := vec(name("attn_norm")), vec(name("ffn_norm"))
		bq, bk, bv := vec(name("q_bias")), vec(name("k_bias")), vec(name("v_bias"))
		qn, kn := vec(name("q_norm")), vec(name("k_norm"))
		postAttn, postFFN := vec(name("post_attn_norm")), vec(name("post_ffn_norm"))
		invFreq, window := m.invFreq, T
		if c.IsSliding(l) {
			window = c.SlidingWindow
			if c.LocalRopeTheta > 0 {
				invFreq = c.LocalInvFreqs()
			}
		}
		Q, K, V := make([][]float64, T), make([][]float64, T), make([][]float64, T)
		for p := range T {
			xn := norm(X[p], attnNorm)
			Q[p], K[p], V[p] = matvec(wq, xn), matvec(wk, xn), matvec(wv, xn)
			if bq != nil {
				for i := range Q[p] {
					Q[p][i] += float64(bq[i])
				}
				for i := range K[p] {
					K[p][i] += float64(bk[i])
					V[p][i] += float64(bv[i])
				}
			}
			for h := range c.Heads {
				headNorm(Q[p][h*hd:(h+1)*hd], qn)
				ropeRef(Q[p][h*hd:(h+1)*hd], p, invFreq)
			}
			for h := range c.KVHeads {
				headNorm(K[p][h*hd:(h+1)*hd], kn)
				ropeRef(K[p][h*hd:(h+1)*hd], p, invFreq)
			}
		}
		for p := range T {
			att := make([]float64, c.Heads*hd)
			for h := range c.Heads {
				kvh := h / (c.Heads / c.KVHeads)
				lo := max(0, p-window+1) // the window: positions lo … p
				sc := make([]float64, p+1)
				mx := math.Inf(-1)
				for j := lo; j <= p; j++ {
					for d := range hd {
						sc[j] += Q[p][h*hd+d] * K[j][kvh*hd+d]
					}
					sc[j] *= scale
					mx = math.Max(mx, sc[j])
				}
				var sum float64
				for j := lo; j <= p; j++ {
					sc[j] = math.Exp(sc[j] - mx)
					sum += sc[j]
				}
				for j := lo; j <= p; j++ {
					for d := range hd {
						att[h*hd+d] += sc[j] / sum * V[j][kvh*hd+d]
					}
				}
			}
			addOut(X[p], matvec(wo, att), postAttn)
			xn := norm(X[p], ffnNorm)
			g, u := matvec(wg, xn), matvec(wu, xn)
			for i := range g {
				g[i] = gate(g[i]) * u[i]
			}
			addOut(X[p], matvec(wd, g), postFFN)
		}
	}
	outName := n.Output
	if c.TiedEmbeddings {
		outName = n.Embed
	}
	out := dec(outName)
	outNorm := vec(n.OutNorm)
	logits := make([][]float64, T)
	for p := range T {
		logits[p] = matvec(out, norm(X[p], outNorm))
	}
	return logits
}
