package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/specula/specula/format/dtype"
)

// f8Bytes makes rows × cols (a multiple of 128) F8_E4M3_B128 values: random non-NaN
// codes, every one of the 254 among them in each row of 1536, and scales of the sizes
// checkpoints have (about 1e-4 to 1e-2) with a few awkward ones: a float32 subnormal,
// the largest below dtype.F8MaxScale, a power of two, zero and negative zero.
func f8Bytes(rng *rand.Rand, rows, cols int) []byte {
	awkward := []float32{1e-40, math.Nextafter32(dtype.F8MaxScale, 0), 0.0078125, 0, float32(math.Copysign(0, -1))}
	const bb = 132
	out := make([]byte, rows*cols/128*bb)
	for b := range rows * cols / 128 {
		s := float32(math.Exp(rng.Float64()*4.6 - 9.2))
		if rng.IntN(12) == 0 {
			s = awkward[rng.IntN(len(awkward))]
		}
		binary.LittleEndian.PutUint32(out[b*bb:], math.Float32bits(s))
		for j := range 128 {
			c := byte(rng.IntN(256))
			if c&0x7f == 0x7f {
				c ^= 1
			}
			out[b*bb+4+j] = c
		}
	}
	return out
}

// f8Pair makes an F8_E4M3_B128 matrix and the F32 matrix of its decoded values.
func f8Pair(t testing.TB, rng *rand.Rand, rows, cols int) (f8, f32 *Matrix) {
	data := f8Bytes(rng, rows, cols)
	vals := make([]float32, rows*cols)
	require.NoError(t, dtype.Dequantize(dtype.F8_E4M3_B128, data, vals))
	f8, err := NewMatrix(dtype.F8_E4M3_B128, rows, cols, data)
	require.NoError(t, err)
	f32, err = NewMatrix(dtype.F32, rows, cols, encode(t, dtype.F32, vals))
	require.NoError(t, err)
	return f8, f32
}

// TestF8MulMatchesF32: the product of an F8_E4M3_B128 matrix is, bit for bit, the
// product of the F32 matrix of its decoded values (dtype.Dequantize) — the same sums
// of the same weights — for 1 to 17 activation rows, matrices that end inside a row
// group, and row ranges cut as workers cut them; at whatever kernel level runs
// (SPECULA_CPU caps it).
func TestF8MulMatchesF32(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for _, shape := range [][2]int{{16, 128}, {37, 384}, {70, 1536}, {1, 256}} {
		rows, cols := shape[0], shape[1]
		f8, f32 := f8Pair(t, rng, rows, cols)
		for _, n := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 17} {
			name := fmt.Sprintf("%dx%d/n=%d", rows, cols, n)
			x := randVec(rng, n*cols)
			ldy := rows + 3
			got, want := make([]float32, n*ldy), make([]float32, n*ldy)
			for _, mul := range []struct {
				m *Matrix
				y []float32
			}{{f8, got}, {f32, want}} {
				var a Act
				a.Reset(x, n, cols)
				require.NoError(t, a.Prepare(mul.m.Type), name)
				mul.m.Mul(&a, mul.y, ldy, 0, rows/2)
				mul.m.Mul(&a, mul.y, ldy, rows/2, rows)
			}
			for i := range got {
				require.Equal(t, math.Float32bits(want[i]), math.Float32bits(got[i]), "%s: output %d: F8 %v, F32 %v", name, i, got[i], want[i])
			}
		}
	}
}

// TestF8RowF32: a row read back from the repacked matrix decodes to the row's values,
// bit for bit (the scale's folded 2⁸ undone exactly).
func TestF8RowF32(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	const rows, cols = 21, 384
	data := f8Bytes(rng, rows, cols)
	m, err := NewMatrix(dtype.F8_E4M3_B128, rows, cols, data)
	require.NoError(t, err)
	want := make([]float32, rows*cols)
	require.NoError(t, dtype.Dequantize(dtype.F8_E4M3_B128, data, want))
	buf, got := make([]byte, m.RowBytes()), make([]float32, cols)
	for r := range rows {
		require.NoError(t, m.RowF32(r, got, buf))
		require.Equal(t, data[r*m.RowBytes():(r+1)*m.RowBytes()], buf, "row %d bytes", r)
		for c := range cols {
			require.Equal(t, math.Float32bits(want[r*cols+c]), math.Float32bits(got[c]), "row %d col %d", r, c)
		}
	}
}

// TestF8NewMatrixErrors: what the products cannot take exactly is refused.
func TestF8NewMatrixErrors(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 26))
	for _, c := range []struct {
		name       string
		rows, cols int
		edit       func(d []byte)
		want       string
	}{
		{"NaN code", 2, 256, func(d []byte) { d[3*132+4+5] = 0xff }, "value 389: NaN code 0xff"},
		{"huge scale", 1, 128, func(d []byte) { binary.LittleEndian.PutUint32(d, math.Float32bits(dtype.F8MaxScale)) }, "beyond the products' range"},
		{"short row", 1, 100, nil, "whole number of 128-value blocks"},
	} {
		t.Run(c.name, func(t *testing.T) {
			data := f8Bytes(rng, c.rows, max(128, c.cols))
			if c.edit != nil {
				c.edit(data)
			}
			_, err := NewMatrix(dtype.F8_E4M3_B128, c.rows, c.cols, data)
			require.ErrorContains(t, err, c.want)
		})
	}
	var a Act
	a.Reset(make([]float32, 200), 1, 200)
	require.ErrorContains(t, a.Prepare(dtype.F8_E4M3_B128), "whole number")
}
