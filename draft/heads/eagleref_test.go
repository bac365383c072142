package heads_test

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/specula/specula/format/gguf"
)

func jsonUnmarshal(raw []byte, v any) error { return json.Unmarshal(raw, v) }

// eagleRef is a float64 forward of gocoder-m's EAGLE layer from its formula: g = fc·[E[x],
// h], then one decoder layer without input norm (attention with rotate-half RoPE, θ
// 10000, 8 heads over 2 key/value heads of 64, then g + MLP(norm(g))), logits g·Eᵀ.
type eagleRef struct {
	fc, wq, wk, wv, wo, gate, up, down [][]float64
	post                               []float64
	emb                                [][]float64
}

func newEagleRef(t *testing.T, dir, targetPath string) *eagleRef {
	t.Helper()
	l := func(n string) [][]float64 { return refTensor(t, dir, "layers.0."+n) }
	r := &eagleRef{fc: refTensor(t, dir, "fc.weight"), wq: l("self_attn.q_proj.weight"), wk: l("self_attn.k_proj.weight"),
		wv: l("self_attn.v_proj.weight"), wo: l("self_attn.o_proj.weight"), gate: l("mlp.gate_proj.weight"),
		up: l("mlp.up_proj.weight"), down: l("mlp.down_proj.weight"), post: l("post_attention_layernorm.weight")[0]}
	f, err := gguf.Open(targetPath)
	require.NoError(t, err)
	defer f.Close()
	ti, ok := f.Tensor("token_embd.weight")
	require.True(t, ok)
	require.Equal(t, "F16", ti.Type.String())
	data := f.Data(ti)
	const d = 512
	r.emb = make([][]float64, len(data)/2/d)
	for i := range r.emb {
		r.emb[i] = make([]float64, d)
		for c := range d {
			r.emb[i][c] = f16(binary.LittleEndian.Uint16(data[2*(i*d+c):]))
		}
	}
	return r
}

// f16 decodes an IEEE half.
func f16(h uint16) float64 {
	sign, exp, frac := float64(1), int(h>>10&0x1f), float64(h&0x3ff)
	if h&0x8000 != 0 {
		sign = -1
	}
	switch exp {
	case 0:
		return sign * frac / 1024 * math.Pow(2, -14)
	case 31:
		return sign * math.Inf(1)
	}
	return sign * (1 + frac/1024) * math.Pow(2, float64(exp-15))
}

// last runs the layer over the pairs (tokens[j], states[j]) at positions j and returns
// the logits at the last.
func (r *eagleRef) last(tokens []int32, states [][]float32) []float64 {
	const d, heads, kvHeads, hd = 512, 8, 2, 64
	n := len(tokens)
	g := make([][]float64, n)
	q, k, v := make([][]float64, n), make([][]float64, n), make([][]float64, n)
	for j := range n {
		in := append(append([]float64(nil), r.emb[tokens[j]]...), f64(states[j])...)
		g[j] = matvec(r.fc, in)
		q[j], k[j], v[j] = matvec(r.wq, g[j]), matvec(r.wk, g[j]), matvec(r.wv, g[j])
		rope := func(x []float64) {
			for h := 0; h < len(x)/hd; h++ {
				for i := range hd / 2 {
					ang := float64(j) * math.Pow(10000, -float64(2*i)/hd)
					a, b := x[h*hd+i], x[h*hd+i+hd/2]
					x[h*hd+i], x[h*hd+i+hd/2] = a*math.Cos(ang)-b*math.Sin(ang), a*math.Sin(ang)+b*math.Cos(ang)
				}
			}
		}
		rope(q[j])
		rope(k[j])
	}
	j := n - 1
	att := make([]float64, heads*hd)
	for h := range heads {
		kh := h / (heads / kvHeads)
		sc := make([]float64, n)
		mx := math.Inf(-1)
		for p := range n {
			for i := range hd {
				sc[p] += q[j][h*hd+i] * k[p][kh*hd+i]
			}
			sc[p] /= math.Sqrt(hd)
			mx = math.Max(mx, sc[p])
		}
		var sum float64
		for p := range sc {
			sc[p] = math.Exp(sc[p] - mx)
			sum += sc[p]
		}
		for p := range n {
			for i := range hd {
				att[h*hd+i] += sc[p] / sum * v[p][kh*hd+i]
			}
		}
	}
	x := g[j]
	o := matvec(r.wo, att)
	for i := range x {
		x[i] += o[i]
	}
	var ss float64
	for _, val := range x {
		ss += val * val
	}
	s := 1 / math.Sqrt(ss/d+1e-5)
	nx := make([]float64, d)
	for i := range nx {
		nx[i] = x[i] * s * r.post[i]
	}
	gt, u := matvec(r.gate, nx), matvec(r.up, nx)
	for i := range gt {
		gt[i] = gt[i] / (1 + math.Exp(-gt[i])) * u[i]
	}
	dn := matvec(r.down, gt)
	for i := range x {
		x[i] += dn[i]
	}
	return matvec(r.emb, x)
}
