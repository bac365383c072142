package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/specula/specula/format/dtype"
)

// encode turns float32 weights into the bytes of type t.
func encode(t testing.TB, typ dtype.DType, w []float32) []byte {
	out, err := dtype.Encode(typ, w)
	require.NoError(t, err)
	return out
}

func randVec(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}

// TestMulMatchesReference multiplies random matrices of the float types and awkward
// shape with 1 to 17 activation rows, and compares with float64 products of the
// decoded weights. (The quantised types: TestIntMulMatchesReference.)
func TestMulMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, typ := range []dtype.DType{dtype.F32, dtype.F16, dtype.BF16} {
		colsList := []int{32, 64, 96, 512, 1408, 8, 13, 100, 7}
		for _, cols := range colsList {
			for _, n := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 17} {
				rows := 1 + rng.IntN(70)
				name := fmt.Sprintf("%s/%dx%d/n=%d", typ, rows, cols, n)
				wf := randVec(rng, rows*cols)
				data := encode(t, typ, wf)
				m, err := NewMatrix(typ, rows, cols, data)
				require.NoError(t, err, name)
				deq := make([]float32, rows*cols)
				require.NoError(t, dtype.Dequantize(typ, data, deq))
				x := randVec(rng, n*cols)
				var a Act
				a.Reset(x, n, cols)
				require.NoError(t, a.Prepare(typ))
				ldy := rows + 3
				y := make([]float32, n*ldy)
				// Two halves, as two workers would.
				m.Mul(&a, y, ldy, 0, rows/2)
				m.Mul(&a, y, ldy, rows/2, rows)
				tol := 1e-5
				for tt := range n {
					for r := range rows {
						var want, mag float64
						for c := range cols {
							p := float64(deq[r*cols+c]) * float64(x[tt*cols+c])
							want += p
							mag += math.Abs(p)
						}
						got := float64(y[tt*ldy+r])
						if math.Abs(got-want) > tol*mag+1e-6 {
							t.Fatalf("%s: y[%d][%d] = %v, want %v (scale %v)", name, tt, r, got, want, mag)
						}
					}
				}
			}
		}
	}
}

func TestNewMatrixErrors(t *testing.T) {
	buf := make([]byte, 68)
	_, err := NewMatrix(dtype.Q8_0, 1, 64, buf)
	require.NoError(t, err)
	for _, c := range []struct {
		typ        dtype.DType
		rows, cols int
		data       []byte
		want       string
	}{
		{dtype.Q2_K, 1, 256, make([]byte, 84), "not supported"},
		{dtype.Q8_0, 1, 48, buf, "whole number"},
		{dtype.Q4_K, 1, 128, make([]byte, 72), "whole number"},
		{dtype.Q6_K, 2, 256, make([]byte, 210), "needs 420 bytes"},
		{dtype.Q4_Z128, 1, 192, make([]byte, 68), "whole number"},
		{dtype.Q8_0, 2, 64, buf, "needs 136 bytes"},
		{dtype.F32, 0, 4, nil, "matrix of 0"},
	} {
		_, err := NewMatrix(c.typ, c.rows, c.cols, c.data)
		require.ErrorContains(t, err, c.want)
	}
	var a Act
	a.Reset(make([]float32, 40), 1, 40)
	require.ErrorContains(t, a.Prepare(dtype.Q8_0), "whole number")
	a.Reset(make([]float32, 160), 1, 160)
	require.NoError(t, a.Prepare(dtype.Q8_0))
	require.ErrorContains(t, a.Prepare(dtype.Q4_K), "whole number")
	require.ErrorContains(t, a.Prepare(dtype.Q6_K), "whole number")
	require.ErrorContains(t, a.Prepare(dtype.Q4_Z128), "whole number")
	// F8_E4M3_B128's blocks are 128 values too, but its kernels read the floats:
	// nothing is quantised for it, while Q4_Z128 quantises per 128.
	a.Reset(make([]float32, 256), 1, 256)
	require.NoError(t, a.Prepare(dtype.F8_E4M3_B128))
	require.False(t, a.q128.ok)
	require.NoError(t, a.Prepare(dtype.Q4_Z128))
	require.True(t, a.q128.ok)
	require.False(t, a.q32.ok || a.q256.ok)
}

// TestAssemblyUsesAVX2Registers guards the generated code: AVX2 has 16 vector
// registers, and avo silently allocates the EVEX-only ones beyond them when a kernel
// keeps too much live, which would fault on AVX2 machines.
func TestAssemblyUsesAVX2Registers(t *testing.T) {
	src, err := os.ReadFile("dot_amd64.s")
	require.NoError(t, err)
	bad := regexp.MustCompile(`\b([XY](1[6-9]|2[0-9]|3[01])|Z[0-9]+|K[0-7])\b`)
	for i, line := range strings.Split(string(src), "\n") {
		if m := bad.FindString(line); m != "" {
			t.Fatalf("dot_amd64.s:%d uses %s: %s", i+1, m, strings.TrimSpace(line))
		}
	}
}
