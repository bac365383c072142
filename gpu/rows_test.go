package gpu

import (
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

// randomParts makes the parts of a matrix of cols columns, one of each number of rows,
// random values of type typ, or of types[k] for part k when types is given (the column
// order perms[k], when given), and returns them with each part's values as the
// backend sees them, in input order.
func randomParts(t *testing.T, typ dtype.DType, types []dtype.DType, rows []int, cols int, perms [][]int32, rng *rand.Rand) ([]backend.Tensor, [][]float32) {
	var parts []backend.Tensor
	var dense [][]float32
	for k, r := range rows {
		if types != nil {
			typ = types[k]
		}
		v := make([]float32, r*cols)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * 0.1)
		}
		data := encode(t, typ, v)
		require.NoError(t, dtype.Dequantize(typ, data, v))
		var perm []int32
		if perms != nil {
			perm = perms[k]
		}
		d := v
		if perm != nil {
			d = make([]float32, len(v))
			for o := range r {
				for j, i := range perm {
					d[o*cols+int(i)] = v[o*cols+j]
				}
			}
		}
		parts = append(parts, backend.Tensor{Name: fmt.Sprintf("part%d", k), Type: typ, Rows: r, Cols: cols, Data: data, Perm: perm})
		dense = append(dense, d)
	}
	return parts, dense
}

// TestMulRows checks MulRows, the product of host rows outside a pass, on every
// backend, for every weight type, one and several rows, matrices of one part and of
// several (at awkward sizes), in input order and with columns permuted: within the
// rounding of the 8-bit activations (the float types within float32 rounding) of the
// definition, y[t·rows + r] = Σ_c W[r, c]·x[t·cols + c] summed in float64; and for a
// matrix of Dim rows, bit for bit what a pass's Mul gives.
func TestMulRows(t *testing.T) {
	s := testShape(backend.RopeHalf) // Dim 64
	rng := rand.New(rand.NewPCG(5, 6))
	perm := func(n int) []int32 {
		p := make([]int32, n)
		for i, v := range rng.Perm(n) {
			p[i] = int32(v)
		}
		return p
	}
	p96 := perm(96)
	mixed := []dtype.DType{dtype.F16, dtype.Q8_0, dtype.F32} // the last part the case's type
	cases := []struct {
		name  string
		rows  []int
		cols  int
		perms [][]int32
		types []dtype.DType // per part; nil: the case's type
		float bool          // only for the float types: cols is no whole number of blocks
	}{
		{"Dim rows", []int{64}, 64, nil, nil, false},
		{"one row", []int{1}, 96, nil, nil, false},
		{"odd rows", []int{37}, 160, nil, nil, false},
		{"fused", []int{13, 5, 30}, 96, nil, nil, false},
		{"fused, permuted", []int{13, 5}, 96, [][]int32{p96, nil}, nil, false},
		{"fused, mixed types", []int{13, 5, 30}, 96, nil, mixed, false},
		{"odd columns", []int{11}, 45, nil, nil, true},
	}
	for name, open := range permBackends(t) {
		for _, typ := range weightTypes {
			float := typ == dtype.F32 || typ == dtype.F16 || typ == dtype.BF16
			for _, c := range cases {
				if c.float && !float {
					continue
				}
				t.Run(fmt.Sprintf("%s/%s/%s", name, typ, c.name), func(t *testing.T) {
					be := open(t, s)
					t.Cleanup(func() { _ = be.Close() })
					types := c.types
					if types != nil {
						types = append(types[:len(types)-1:len(types)-1], typ)
					}
					parts, dense := randomParts(t, typ, types, c.rows, c.cols, c.perms, rng)
					w, err := be.Matrix(parts...)
					require.NoError(t, err)
					tol := 1e-2 // the activations' 8-bit blocks
					if float && types == nil {
						tol = 1e-5
					}
					asPass := w.Rows() == s.Dim && c.cols == s.Dim // a pass's Mul takes it too
					if asPass {
						_, err := be.KV(backend.KVSpec{BlockSize: kvcache.DefaultBlockSize, Budget: 1 << 20})
						require.NoError(t, err)
					}
					for _, n := range []int{1, 3, 11} {
						x := make([]float32, n*c.cols)
						for i := range x {
							x[i] = float32(rng.NormFloat64())
						}
						y := make([]float32, n*w.Rows())
						require.NoError(t, be.MulRows(w, x, n, y))
						off := 0
						for k, r := range c.rows {
							for tt := range n {
								for o := range r {
									var exact, bound float64
									for i := range c.cols {
										p := float64(dense[k][o*c.cols+i]) * float64(x[tt*c.cols+i])
										exact += p
										bound += math.Abs(p)
									}
									require.InDelta(t, exact, float64(y[tt*w.Rows()+off+o]), tol*bound+1e-6, "row %d part %d output %d", tt, k, o)
								}
							}
							off += r
						}
						if asPass {
							assert.Equal(t, mulRows(t, be, s, w, x, false), y, "MulRows is a pass's Mul, bit for bit")
						}
					}
				})
			}
		}
	}
}

// TestEmbedRow checks EmbedRow on every backend and weight type: each row of a
// table of one part or several (of one type, and of several), decoded exactly as the
// values its blocks hold.
func TestEmbedRow(t *testing.T) {
	s := testShape(backend.RopeHalf)
	rng := rand.New(rand.NewPCG(7, 8))
	for name, open := range permBackends(t) {
		for _, typ := range weightTypes {
			for _, c := range []struct {
				rows  []int
				types []dtype.DType
			}{{[]int{9}, nil}, {[]int{3, 1, 5}, nil}, {[]int{3, 1, 5}, []dtype.DType{dtype.F16, dtype.Q8_0, typ}}} {
				rows := c.rows
				t.Run(fmt.Sprintf("%s/%s/parts%d/mixed%v", name, typ, len(rows), c.types != nil), func(t *testing.T) {
					be := open(t, s)
					t.Cleanup(func() { _ = be.Close() })
					parts, dense := randomParts(t, typ, c.types, rows, 96, nil, rng)
					w, err := be.Matrix(parts...)
					require.NoError(t, err)
					dst := make([]float32, 96)
					i := 0
					for k, r := range rows {
						for o := range r {
							require.NoError(t, be.EmbedRow(w, i, dst))
							assert.Equal(t, dense[k][o*96:(o+1)*96], dst, "row %d", i)
							i++
						}
					}
				})
			}
		}
	}
}

// TestRowsRefusals checks that MulRows and EmbedRow refuse, on the CPU backend and
// the host device, buffers of the wrong lengths, rows outside the table, a permuted
// table, and another backend's matrix.
func TestRowsRefusals(t *testing.T) {
	s := testShape(backend.RopeHalf)
	rng := rand.New(rand.NewPCG(9, 10))
	parts, _ := randomParts(t, dtype.Q8_0, nil, []int{4}, 64, nil, rng)
	permuted, _ := randomParts(t, dtype.Q8_0, nil, []int{4}, 64, [][]int32{make([]int32, 64)}, rng)
	for i := range permuted[0].Perm {
		permuted[0].Perm[i] = int32(63 - i)
	}
	other := cpu.New(s, 1)
	defer other.Close()
	foreign, err := other.Matrix(parts...)
	require.NoError(t, err)
	for name, open := range permBackends(t) {
		if name == "gpu" {
			continue
		}
		t.Run(name, func(t *testing.T) {
			be := open(t, s)
			t.Cleanup(func() { _ = be.Close() })
			w, err := be.Matrix(parts...)
			require.NoError(t, err)
			pw, err := be.Matrix(permuted...)
			require.NoError(t, err)
			x, y := make([]float32, 2*64), make([]float32, 2*4)
			require.NoError(t, be.MulRows(w, x, 2, y))
			require.NoError(t, be.MulRows(w, nil, 0, nil), "no rows")
			assert.ErrorContains(t, be.MulRows(w, x[:63], 1, y[:4]), "inputs")
			assert.ErrorContains(t, be.MulRows(w, x, 2, y[:7]), "outputs")
			assert.ErrorContains(t, be.MulRows(w, x, -1, y), "rows")
			dst := make([]float32, 64)
			require.NoError(t, be.EmbedRow(w, 3, dst))
			assert.ErrorContains(t, be.EmbedRow(w, 4, dst), "row 4 of a table of 4 rows")
			assert.ErrorContains(t, be.EmbedRow(w, -1, dst), "row -1")
			assert.ErrorContains(t, be.EmbedRow(w, 0, dst[:63]), "a row of 64 values into 63")
			assert.ErrorContains(t, be.EmbedRow(pw, 0, dst), "permuted")
			if name != "cpu" {
				assert.ErrorContains(t, be.MulRows(foreign, x, 2, y), "another backend")
				assert.ErrorContains(t, be.EmbedRow(foreign, 0, dst), "another backend")
			}
		})
	}
}
