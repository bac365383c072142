package gpu

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/backend"
	"github.com/specula/specula/backend/cpu"
	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/kvcache"
)

// permBackends are the backends the permuted-product tests run on: the CPU backend,
// the device backend on the host device, and on the GPU where there is one.
func permBackends(t *testing.T) map[string]func(t *testing.T, s backend.Shape) backend.Backend {
	return map[string]func(t *testing.T, s backend.Shape) backend.Backend{
		"cpu": func(_ *testing.T, s backend.Shape) backend.Backend { return cpu.New(s, 2) },
		"host": func(t *testing.T, s backend.Shape) backend.Backend {
			b, err := NewBackend(HostDevice(), s, BackendOptions{})
			require.NoError(t, err)
			return b
		},
		"gpu": func(t *testing.T, s backend.Shape) backend.Backend {
			b, err := NewBackend(openGPU(t), s, BackendOptions{})
			require.NoError(t, err)
			return b
		},
	}
}

// mulRows runs one pass that loads the rows x (Dim values each) into XN, multiplies
// them by w into X (after x0 in X when add: MulAdd), and returns X's rows.
func mulRows(t *testing.T, be backend.Backend, s backend.Shape, w backend.Matrix, x []float32, add bool) []float32 {
	t.Helper()
	n := len(x) / s.Dim
	p := backend.Plan{Dim: s.Dim, Tokens: make([]int32, n), Inputs: x, ExtraOff: make([]int32, n+1)}
	out := make([]float32, n*s.Dim)
	for r := range n {
		p.States = append(p.States, backend.State{Row: r, Layer: 0, Dst: out[r*s.Dim : (r+1)*s.Dim]})
	}
	err := be.Run(context.Background(), &p, backend.LayersFunc(func(_ context.Context, ps backend.Pass) error {
		ps.Load(backend.XN)
		if add {
			ps.Load(backend.X)
			ps.MulAdd(backend.X, backend.XN, w)
		} else {
			ps.Mul(backend.X, backend.XN, w)
		}
		ps.Save(0)
		return nil
	}))
	require.NoError(t, err)
	return out
}

// TestPermutedProduct checks products with matrices whose columns are permuted
// (backend.Tensor.Perm, an act-order layer sorted by group), on every backend, for
// one and several rows, single and fused parts with equal and different column
// orders: bit for bit the product of the same blocks with the input permuted by hand,
// and within the 8-bit activation rounding the product of the unpermuted dense matrix.
func TestPermutedProduct(t *testing.T) {
	s := testShape(backend.RopeHalf) // Dim 64: X = XN · Wᵀ with Dim output rows in all
	rng := rand.New(rand.NewPCG(3, 4))
	randPerm := func() []int32 {
		p := make([]int32, s.Dim)
		for i, v := range rng.Perm(s.Dim) {
			p[i] = int32(v)
		}
		return p
	}
	p1, p2 := randPerm(), randPerm()
	cases := []struct {
		name  string
		rows  []int     // rows of each part, summing to Dim
		perms [][]int32 // each part's column order
	}{
		{"one part", []int{64}, [][]int32{p1}},
		{"fused, equal orders", []int{32, 16, 16}, [][]int32{p1, p1, p1}},
		{"fused, different orders", []int{32, 16, 16}, [][]int32{p1, p2, p1}},
		{"fused, one in input order", []int{32, 32}, [][]int32{nil, p2}},
	}
	for name, open := range permBackends(t) {
		for _, typ := range []dtype.DType{dtype.Q8_0, dtype.F32} {
			for _, c := range cases {
				for _, n := range []int{1, 3, 11} {
					t.Run(fmt.Sprintf("%s/%s/%s/rows%d", name, typ, c.name, n), func(t *testing.T) {
						be := open(t, s)
						t.Cleanup(func() { _ = be.Close() })
						_, err := be.KV(backend.KVSpec{BlockSize: kvcache.DefaultBlockSize, Budget: 1 << 20})
						require.NoError(t, err)
						checkPermuted(t, be, s, typ, c.rows, c.perms, n, rng)
					})
				}
			}
		}
	}
}

// checkPermuted makes the parts (random blocks of typ, in permuted column order),
// multiplies n random rows by them, and checks the product as TestPermutedProduct
// says.
func checkPermuted(t *testing.T, be backend.Backend, s backend.Shape, typ dtype.DType, rows []int, perms [][]int32, n int, rng *rand.Rand) {
	parts, dense := randomParts(t, typ, nil, rows, s.Dim, perms, rng) // dense: each part's values in input order
	plain := make([]backend.Tensor, len(parts))
	for k, p := range parts {
		plain[k], plain[k].Perm = p, nil
	}
	w, err := be.Matrix(parts...)
	require.NoError(t, err)
	x := make([]float32, n*s.Dim)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	for _, add := range []bool{false, true} {
		got := mulRows(t, be, s, w, x, add)
		off := 0
		for k, r := range rows {
			// The same blocks, one part alone, on the rows permuted by hand.
			pw, err := be.Matrix(plain[k])
			require.NoError(t, err)
			xp := append([]float32(nil), x...)
			if perms[k] != nil {
				for t := range n {
					for j, i := range perms[k] {
						xp[t*s.Dim+j] = x[t*s.Dim+int(i)]
					}
				}
			}
			ref := make([]float32, n*s.Dim)
			if r == s.Dim {
				ref = mulRows(t, be, s, pw, xp, false)
			} else { // a part narrower than X: pad it with zero rows to Dim outputs
				padded := plain[k]
				rb := len(padded.Data) / r
				padded.Data = append(append([]byte(nil), padded.Data...), make([]byte, (s.Dim-r)*rb)...)
				if typ == dtype.Q8_0 {
					for b := r * rb; b < len(padded.Data); b += 34 {
						padded.Data[b], padded.Data[b+1] = 0, 0
					}
				}
				padded.Rows = s.Dim
				pw, err = be.Matrix(padded)
				require.NoError(t, err)
				ref = mulRows(t, be, s, pw, xp, false)
			}
			for tt := range n {
				for o := range r {
					g := got[tt*s.Dim+off+o]
					want := ref[tt*s.Dim+o]
					var exact, bound float64
					for i := range s.Dim {
						p := float64(dense[k][o*s.Dim+i]) * float64(x[tt*s.Dim+i])
						exact += p
						bound += math.Abs(p)
					}
					if add {
						want += x[tt*s.Dim+off+o]
						exact += float64(x[tt*s.Dim+off+o])
					}
					require.Equal(t, math.Float32bits(want), math.Float32bits(g), "row %d part %d output %d: %v, by hand %v", tt, k, o, g, want)
					assert.InDelta(t, exact, float64(g), 1e-2*bound+1e-6, "row %d part %d output %d vs the dense product", tt, k, o)
				}
			}
			off += r
		}
	}
}

// TestPermutedRefusals checks that a column order that is no permutation is refused
// at Matrix, naming the tensor, and that an embedding table or output matrix with
// one fails the pass, on the CPU backend and the host device.
func TestPermutedRefusals(t *testing.T) {
	s := testShape(backend.RopeHalf)
	data := make([]byte, 34*2)
	for name, open := range permBackends(t) {
		if name == "gpu" {
			continue
		}
		t.Run(name, func(t *testing.T) {
			be := open(t, s)
			t.Cleanup(func() { _ = be.Close() })
			for _, perm := range [][]int32{{0, 1}, make([]int32, 64), append([]int32{64}, make([]int32, 63)...), append([]int32{-1}, make([]int32, 63)...)} {
				_, err := be.Matrix(backend.Tensor{Name: "bad.weight", Type: dtype.Q8_0, Rows: 1, Cols: 64, Data: data, Perm: perm})
				require.Error(t, err)
				assert.Contains(t, err.Error(), `"bad.weight"`)
			}
			perm := make([]int32, 64)
			for i := range perm {
				perm[i] = int32(63 - i)
			}
			table, err := be.Matrix(backend.Tensor{Name: "table", Type: dtype.Q8_0, Rows: 1, Cols: 64, Data: data, Perm: perm})
			require.NoError(t, err)
			_, err = be.KV(backend.KVSpec{BlockSize: kvcache.DefaultBlockSize, Budget: 1 << 20})
			require.NoError(t, err)
			for _, op := range []func(ps backend.Pass){
				func(ps backend.Pass) { ps.Embed(backend.X, table) },
				func(ps backend.Pass) { ps.Final(nil, table) },
			} {
				logits := make([]float32, 1)
				p := backend.Plan{Dim: s.Dim, Tokens: []int32{0}, ExtraOff: make([]int32, 2), Outputs: []backend.Output{{Row: 0, Logits: logits}}}
				err := be.Run(context.Background(), &p, backend.LayersFunc(func(_ context.Context, ps backend.Pass) error {
					op(ps)
					return nil
				}))
				require.Error(t, err)
				assert.Contains(t, err.Error(), "permuted")
			}
		})
	}
}
