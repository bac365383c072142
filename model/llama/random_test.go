package llama

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/internal/kernels"
)

// encodeWeights turns float32 values into bytes of type t.
func encodeWeights(t testing.TB, typ dtype.DType, w []float32) []byte {
	out, err := kernels.Encode(typ, w)
	require.NoError(t, err)
	return out
}

// randomModel builds a model with random weights of type typ.
func randomModel(t testing.TB, cfg Config, typ dtype.DType, seed uint64, opts Options) *Model {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 99))
	mat := func(rows, cols int, scale float64) *kernels.Matrix {
		w := make([]float32, rows*cols)
		for i := range w {
			w[i] = float32(rng.NormFloat64() * scale)
		}
		m, err := kernels.NewMatrix(typ, rows, cols, encodeWeights(t, typ, w))
		require.NoError(t, err)
		return m
	}
	vec := func(n int, mean, scale float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(mean + rng.NormFloat64()*scale)
		}
		return v
	}
	m := &Model{cfg: cfg, name: "random"}
	hd := cfg.HeadDim
	m.embed = mat(cfg.Vocab, cfg.Dim, 1)
	for range cfg.Layers {
		ly := layer{
			attnNorm: vec(cfg.Dim, 1, 0.1),
			wq:       mat(cfg.Heads*hd, cfg.Dim, 1/math.Sqrt(float64(cfg.Dim))),
			wk:       mat(cfg.KVHeads*hd, cfg.Dim, 1/math.Sqrt(float64(cfg.Dim))),
			wv:       mat(cfg.KVHeads*hd, cfg.Dim, 1/math.Sqrt(float64(cfg.Dim))),
			wo:       mat(cfg.Dim, cfg.Heads*hd, 1/math.Sqrt(float64(cfg.Heads*hd))),
			ffnNorm:  vec(cfg.Dim, 1, 0.1),
			wGate:    mat(cfg.FFN, cfg.Dim, 1/math.Sqrt(float64(cfg.Dim))),
			wUp:      mat(cfg.FFN, cfg.Dim, 1/math.Sqrt(float64(cfg.Dim))),
			wDown:    mat(cfg.Dim, cfg.FFN, 1/math.Sqrt(float64(cfg.FFN))),
		}
		if cfg.QKVBias {
			ly.bq, ly.bk, ly.bv = vec(cfg.Heads*hd, 0, 0.5), vec(cfg.KVHeads*hd, 0, 0.5), vec(cfg.KVHeads*hd, 0, 0.5)
		}
		m.layers = append(m.layers, ly)
	}
	m.outNorm = vec(cfg.Dim, 1, 0.1)
	if cfg.TiedEmbeddings {
		m.output = m.embed
	} else {
		m.output = mat(cfg.Vocab, cfg.Dim, 1/math.Sqrt(float64(cfg.Dim)))
	}
	require.NoError(t, m.finish(opts))
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// reference computes the logits at every position of toks in float64, one
// straightforward step after another, from the model's decoded weights.
func reference(t testing.TB, m *Model, toks []int32) [][]float64 {
	c := m.cfg
	T, hd := len(toks), c.HeadDim
	dec := func(mx *kernels.Matrix) [][]float64 {
		out := make([][]float64, mx.Rows)
		row := make([]float32, mx.Cols)
		buf := make([]byte, mx.RowBytes())
		for r := range out {
			require.NoError(t, mx.RowF32(r, row, buf))
			out[r] = make([]float64, mx.Cols)
			for i, v := range row {
				out[r][i] = float64(v)
			}
		}
		return out
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
	ropeRef := func(x []float64, pos int) {
		half := c.RopeDim / 2
		for j := range half {
			ang := float64(pos) * m.invFreq[j]
			cs, sn := math.Cos(ang), math.Sin(ang)
			a, b := 2*j, 2*j+1
			if c.RopeStyle == RopeHalf {
				a, b = j, j+half
			}
			x[a], x[b] = x[a]*cs-x[b]*sn, x[a]*sn+x[b]*cs
		}
	}
	emb := dec(m.embed)
	X := make([][]float64, T)
	for p, tok := range toks {
		X[p] = append([]float64(nil), emb[tok]...)
	}
	for _, ly := range m.layers {
		wq, wk, wv, wo := dec(ly.wq), dec(ly.wk), dec(ly.wv), dec(ly.wo)
		wg, wu, wd := dec(ly.wGate), dec(ly.wUp), dec(ly.wDown)
		Q, K, V := make([][]float64, T), make([][]float64, T), make([][]float64, T)
		for p := range T {
			xn := norm(X[p], ly.attnNorm)
			Q[p], K[p], V[p] = matvec(wq, xn), matvec(wk, xn), matvec(wv, xn)
			if ly.bq != nil {
				for i := range Q[p] {
					Q[p][i] += float64(ly.bq[i])
				}
				for i := range K[p] {
					K[p][i] += float64(ly.bk[i])
					V[p][i] += float64(ly.bv[i])
				}
			}
			for h := range c.Heads {
				ropeRef(Q[p][h*hd:(h+1)*hd], p)
			}
			for h := range c.KVHeads {
				ropeRef(K[p][h*hd:(h+1)*hd], p)
			}
		}
		for p := range T {
			att := make([]float64, c.Heads*hd)
			for h := range c.Heads {
				kvh := h / (c.Heads / c.KVHeads)
				sc := make([]float64, p+1)
				mx := math.Inf(-1)
				for j := 0; j <= p; j++ {
					for d := range hd {
						sc[j] += Q[p][h*hd+d] * K[j][kvh*hd+d]
					}
					sc[j] /= math.Sqrt(float64(hd))
					mx = math.Max(mx, sc[j])
				}
				var sum float64
				for j := range sc {
					sc[j] = math.Exp(sc[j] - mx)
					sum += sc[j]
				}
				for j := range sc {
					for d := range hd {
						att[h*hd+d] += sc[j] / sum * V[j][kvh*hd+d]
					}
				}
			}
			o := matvec(wo, att)
			for i := range X[p] {
				X[p][i] += o[i]
			}
			xn := norm(X[p], ly.ffnNorm)
			g, u := matvec(wg, xn), matvec(wu, xn)
			for i := range g {
				g[i] = g[i] / (1 + math.Exp(-g[i])) * u[i]
			}
			d := matvec(wd, g)
			for i := range X[p] {
				X[p][i] += d[i]
			}
		}
	}
	out := dec(m.output)
	logits := make([][]float64, T)
	for p := range T {
		logits[p] = matvec(out, norm(X[p], m.outNorm))
	}
	return logits
}
