package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/specula/specula/format/dtype"
)

// quantTypes are the repacked weight types.
var quantTypes = []dtype.DType{dtype.Q8_0, dtype.Q4_0, dtype.Q4_1, dtype.Q4_Z, dtype.Q4_Z128, dtype.Q5_0, dtype.Q5_1, dtype.Q4_K, dtype.Q5_K, dtype.Q6_K}

// randRows returns rows × cols random weights of type t, with a spread of block
// scales (rows of tiny and of large values) and some all-zero blocks.
func randRows(rng *rand.Rand, t dtype.DType, rows, cols int) []byte {
	if t == dtype.Q4_Z || t == dtype.Q4_Z128 {
		return randZ(rng, t, rows, cols)
	}
	w := randVec(rng, rows*cols)
	for r := range rows {
		scale := float32(math.Exp(rng.NormFloat64()))
		for c := range cols {
			w[r*cols+c] *= scale
		}
	}
	if rows*cols >= 512 {
		clear(w[256:288])
	}
	b, err := dtype.Encode(t, w)
	if err != nil {
		panic(err)
	}
	return b
}

// randZ returns rows × cols random weights of Q4_Z or Q4_Z128, which have no
// quantizer from floats: random codes and zeros (the extremes 0 and 15 among them), a
// spread of row scales, and some all-zero blocks (every code its zero).
func randZ(rng *rand.Rand, t dtype.DType, rows, cols int) []byte {
	per, size := t.BlockSize(), t.BlockBytes()
	nb := cols / per
	out := make([]byte, rows*nb*size)
	codes := make([]uint8, per)
	encode := dtype.EncodeQ4_Z
	if t == dtype.Q4_Z128 {
		encode = dtype.EncodeQ4_Z128
	}
	for r := range rows {
		scale := math.Exp(rng.NormFloat64()) / 8
		for b := range nb {
			z := uint8(rng.IntN(16))
			for j := range codes {
				codes[j] = uint8(rng.IntN(16))
			}
			if rng.IntN(8) == 0 {
				for j := range codes {
					codes[j] = z
				}
			}
			d := dtype.F32ToF16(float32(scale * (0.5 + rng.Float64())))
			if err := encode(out[(r*nb+b)*size:], d, z, codes); err != nil {
				panic(err)
			}
		}
	}
	return out
}

// TestRepackRoundTrip: every row of a repacked matrix comes back as llama.cpp's
// blocks, byte for byte, in groups cut short or not.
func TestRepackRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for _, typ := range quantTypes {
		cols := 2 * kBlock
		for _, rows := range []int{1, 15, 16, 17, 40} {
			data := randRows(rng, typ, rows, cols)
			rb := len(data) / rows
			m, err := NewMatrix(typ, rows, cols, data)
			require.NoError(t, err)
			buf := make([]byte, m.RowBytes())
			out := make([]float32, cols)
			want := make([]float32, cols)
			for r := range rows {
				unpackRow(typ, m.Data, m.blocks, r, buf)
				require.Equal(t, data[r*rb:(r+1)*rb], buf, "%s rows %d: row %d", typ, rows, r)
				require.NoError(t, m.RowF32(r, out, buf))
				require.NoError(t, dtype.Dequantize(typ, data[r*rb:(r+1)*rb], want))
				require.Equal(t, want, out)
			}
		}
	}
}

// quantizedAct returns the activations as the integer kernels see them: each row's
// blocks quantised, decoded back to floats.
func quantizedAct(x []float32, n, cols, block int) []float32 {
	out := make([]float32, len(x))
	codes := make([]int8, block)
	side := make([]uint32, side256Words)
	for i := 0; i < n*cols; i += block {
		quantizeBlock(x[i:i+block], codes, side[:sideWords(block)])
		d := sideF(side[sideD])
		for j, c := range codes {
			out[i+j] = d * float32(c)
		}
	}
	return out
}

// TestIntMulMatchesReference multiplies random matrices of every quantised type, of
// row counts that cut groups short and batches of 1 to 13 rows, computed in two row
// ranges that split a group (as two workers would), and compares with float64
// products of the decoded weights and the decoded 8-bit activations: the kernels'
// integer sums are exact, so only float32 rounding separates them. Against the
// activations before quantisation the products agree to the quantisation's error.
func TestIntMulMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, typ := range quantTypes {
		colsList := []int{32, 64, 896}
		switch typ.BlockSize() {
		case kBlock:
			colsList = []int{256, 768}
		case z128Block:
			colsList = []int{128, 384, 896}
		}
		for _, cols := range colsList {
			for _, n := range []int{1, 2, 3, 4, 5, 8, 9, 13} {
				rows := 1 + rng.IntN(50)
				name := fmt.Sprintf("%s/%dx%d/n=%d", typ, rows, cols, n)
				data := randRows(rng, typ, rows, cols)
				m, err := NewMatrix(typ, rows, cols, data)
				require.NoError(t, err, name)
				deq := make([]float32, rows*cols)
				require.NoError(t, dtype.Dequantize(typ, data, deq))
				x := randVec(rng, n*cols)
				xq := quantizedAct(x, n, cols, max(typ.BlockSize(), q8Block))
				var a Act
				a.Reset(x, n, cols)
				require.NoError(t, a.Prepare(typ))
				ldy := rows + 3
				y := make([]float32, n*ldy)
				cut := rows / 3
				m.Mul(&a, y, ldy, 0, cut)
				m.Mul(&a, y, ldy, cut, rows)
				for tt := range n {
					for r := range rows {
						var want, mag, exact, emag float64
						for c := range cols {
							w := float64(deq[r*cols+c])
							want += w * float64(xq[tt*cols+c])
							mag += math.Abs(w * float64(xq[tt*cols+c]))
							exact += w * float64(x[tt*cols+c])
							emag += math.Abs(w * float64(x[tt*cols+c]))
						}
						got := float64(y[tt*ldy+r])
						if math.Abs(got-want) > 2e-6*mag+1e-7 {
							t.Fatalf("%s: y[%d][%d] = %v, want %v (scale %v)", name, tt, r, got, want, mag)
						}
						if math.Abs(got-exact) > 0.02*emag+1e-6 {
							t.Fatalf("%s: y[%d][%d] = %v, against unquantised activations %v (scale %v)", name, tt, r, got, exact, emag)
						}
					}
				}
			}
		}
	}
}

// TestIntMulBatchInvariance: a row's product is the same, bit for bit, alone or in a
// batch of up to 13, whatever its place in the batch, for every weight type.
func TestIntMulBatchInvariance(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, typ := range append([]dtype.DType{dtype.F32, dtype.F16, dtype.BF16}, quantTypes...) {
		cols := 512
		rows := 37
		m, err := NewMatrix(typ, rows, cols, randRows(rng, typ, rows, cols))
		require.NoError(t, err)
		const n = 13
		x := randVec(rng, n*cols)
		var all Act
		all.Reset(x, n, cols)
		require.NoError(t, all.Prepare(typ))
		batch := make([]float32, n*rows)
		m.Mul(&all, batch, rows, 0, rows)
		for tt := range n {
			var one Act
			one.Reset(x[tt*cols:(tt+1)*cols], 1, cols)
			require.NoError(t, one.Prepare(typ))
			alone := make([]float32, rows)
			m.Mul(&one, alone, rows, 0, rows)
			for r := range rows {
				require.Equal(t, math.Float32bits(alone[r]), math.Float32bits(batch[tt*rows+r]), "%s row %d of batch row %d", typ, r, tt)
			}
		}
	}
}

// TestQ4_ZIsQ4_0WithZero8: Q4_0 is Q4_Z with every zero 8, and the kernels compute
// the two the same way (the exact Σ(q − z)·x, then the same float32 steps), so a
// Q4_0 matrix and its Q4_Z copy give the same bits, for every batch size.
func TestQ4_ZIsQ4_0WithZero8(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	rows, cols := 37, 896
	q4 := randRows(rng, dtype.Q4_0, rows, cols)
	qz := make([]byte, len(q4)/18*20)
	for b := range len(q4) / 18 {
		blk, out := q4[18*b:18*b+18], qz[20*b:20*b+20]
		copy(out, blk[:2])
		out[2] = 8
		copy(out[4:], blk[2:])
	}
	a, err := NewMatrix(dtype.Q4_0, rows, cols, q4)
	require.NoError(t, err)
	z, err := NewMatrix(dtype.Q4_Z, rows, cols, qz)
	require.NoError(t, err)
	for _, n := range []int{1, 2, 3, 4, 5, 8, 9} {
		x := randVec(rng, n*cols)
		var act Act
		act.Reset(x, n, cols)
		require.NoError(t, act.Prepare(dtype.Q4_Z))
		ya, yz := make([]float32, n*rows), make([]float32, n*rows)
		a.Mul(&act, ya, rows, 0, rows)
		z.Mul(&act, yz, rows, 0, rows)
		for i := range ya {
			require.Equal(t, math.Float32bits(ya[i]), math.Float32bits(yz[i]), "n=%d value %d", n, i)
		}
	}
}

// TestQ4_ZIsQ8_0: a Q4_Z matrix and its Q8_0 copy (dtype.Q4_ZToQ8_0, the codes q − z)
// give the same bits: both kernels take the exact Σ(q − z)·x, then float32(isum)·(d·dx).
// (The CUDA backend takes Q4_Z as that copy.)
func TestQ4_ZIsQ8_0(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	rows, cols := 37, 896
	qz := randZ(rng, dtype.Q4_Z, rows, cols)
	q8, err := dtype.ZToQ8_0(dtype.Q4_Z, qz)
	require.NoError(t, err)
	z, err := NewMatrix(dtype.Q4_Z, rows, cols, qz)
	require.NoError(t, err)
	e, err := NewMatrix(dtype.Q8_0, rows, cols, q8)
	require.NoError(t, err)
	for _, n := range []int{1, 3, 4, 8, 9} {
		x := randVec(rng, n*cols)
		var act Act
		act.Reset(x, n, cols)
		require.NoError(t, act.Prepare(dtype.Q4_Z))
		yz, y8 := make([]float32, n*rows), make([]float32, n*rows)
		z.Mul(&act, yz, rows, 0, rows)
		e.Mul(&act, y8, rows, 0, rows)
		for i := range yz {
			require.Equal(t, math.Float32bits(y8[i]), math.Float32bits(yz[i]), "n=%d value %d", n, i)
		}
	}
}
