package kernels

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/specula/specula/format/dtype"
)

// BenchmarkMul measures one thread's product of a gocoder-m sized FFN matrix
// (1408 × 512) with 1, 5 and 8 activation rows: GFLOP/s and weight bandwidth.
func BenchmarkMul(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	const rows, cols = 1408, 512
	w := randVec(rng, rows*cols)
	for _, typ := range []dtype.DType{dtype.F32, dtype.F16, dtype.BF16, dtype.F8_E4M3_B128, dtype.Q8_0, dtype.Q4_0, dtype.Q4_Z, dtype.Q4_Z128, dtype.Q4_K, dtype.Q6_K} {
		m, err := NewMatrix(typ, rows, cols, benchWeights(b, rng, typ, w, rows, cols))
		if err != nil {
			b.Fatal(err)
		}
		for _, n := range []int{1, 5, 8, 64} {
			b.Run(fmt.Sprintf("%s/n=%d", typ, n), func(b *testing.B) {
				x := randVec(rng, n*cols)
				y := make([]float32, n*rows)
				var a Act
				for b.Loop() {
					a.Reset(x, n, cols)
					if err := a.Prepare(typ); err != nil {
						b.Fatal(err)
					}
					m.Mul(&a, y, rows, 0, rows)
				}
				sec := b.Elapsed().Seconds() / float64(b.N)
				b.ReportMetric(2*float64(rows*cols*n)/sec/1e9, "GFLOP/s")
				b.ReportMetric(float64(len(m.Data))/sec/1e9, "GB/s")
			})
		}
	}
}

// benchWeights returns the rows × cols values w as type typ, or for Q4_Z and Q4_Z128,
// which have no quantizer from floats, random rows of them.
func benchWeights(b *testing.B, rng *rand.Rand, typ dtype.DType, w []float32, rows, cols int) []byte {
	switch typ {
	case dtype.Q4_Z, dtype.Q4_Z128:
		return randZ(rng, typ, rows, cols)
	case dtype.F8_E4M3_B128:
		return f8Bytes(rng, rows, cols) // no encoder from floats: random codes and scales
	}
	return encode(b, typ, w)
}

// mulRows computes row groups [lo, hi) of a product, as the runtime shares them out.
type mulRows struct {
	m *Matrix
	a *Act
	y []float32
}

func (t *mulRows) Run(lo, hi int) { t.m.Mul(t.a, t.y, t.m.Rows, lo*RowGroup, hi*RowGroup) }

// BenchmarkMulDRAM measures the product of a matrix too large for any cache (65 536 ×
// 1536, Qwen2.5-1.5B's width) with 1 to 8 activation rows, as a decoding or verifying
// pass streams its weights, on BENCH_THREADS threads (default 1): GB/s of weights read,
// and the cost of n rows against one.
func BenchmarkMulDRAM(b *testing.B) {
	threads := 1
	if v, err := strconv.Atoi(os.Getenv("BENCH_THREADS")); err == nil {
		threads = v
	}
	rng := rand.New(rand.NewPCG(1, 1))
	const rows, cols = 65536, 1536
	for _, typ := range []dtype.DType{dtype.F16, dtype.Q8_0, dtype.Q4_0, dtype.Q4_Z, dtype.Q4_Z128, dtype.Q5_0, dtype.Q4_K, dtype.Q5_K, dtype.Q6_K} {
		// Rows drawn from a pool, as the real-scale generator makes them.
		pool := benchWeights(b, rng, typ, randVec(rng, 64*cols), 64, cols)
		rb := len(pool) / 64
		data := make([]byte, rows*rb)
		for r := range rows {
			copy(data[r*rb:], pool[rng.IntN(64)*rb:][:rb])
		}
		m, err := NewMatrix(typ, rows, cols, data)
		if err != nil {
			b.Fatal(err)
		}
		for _, n := range []int{1, 2, 4, 5, 8} {
			b.Run(fmt.Sprintf("%s/n=%d", typ, n), func(b *testing.B) {
				x := randVec(rng, n*cols)
				y := make([]float32, n*rows)
				var a Act
				pool := NewPool(threads)
				defer pool.Close()
				task := &mulRows{m: m, a: &a, y: y}
				for b.Loop() {
					a.Reset(x, n, cols)
					if err := a.Prepare(typ); err != nil {
						b.Fatal(err)
					}
					pool.Run(task, rows/RowGroup, 8)
				}
				sec := b.Elapsed().Seconds() / float64(b.N)
				b.ReportMetric(float64(len(m.Data))/sec/1e9, "GB/s")
				b.ReportMetric(sec*1e3, "ms")
			})
		}
	}
}

// BenchmarkIntKernel times the integer kernels alone on weights that stay in the L2
// cache (256 × 1536): their arithmetic, without the wait for memory. ns/block is per
// block of one 16-row group (32 or 256 values of 16 rows).
func BenchmarkIntKernel(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	const rows, cols = 256, 1536
	for _, typ := range quantTypes {
		m, err := NewMatrix(typ, rows, cols, randRows(rng, typ, rows, cols))
		if err != nil {
			b.Fatal(err)
		}
		kern := intKernels(typ)
		for n := 1; n <= kern.rows(); n++ {
			b.Run(fmt.Sprintf("%s/n=%d", typ, n), func(b *testing.B) {
				x := randVec(rng, n*cols)
				var a Act
				a.Reset(x, n, cols)
				if err := a.Prepare(typ); err != nil {
					b.Fatal(err)
				}
				q := a.quant(typ.BlockSize())
				out := make([]float32, n*rowGroup)
				gb := groupBlockBytes(typ)
				for b.Loop() {
					for g := range rows / rowGroup {
						kern[n](&m.Data[g*m.blocks*gb], m.blocks, &q.codes[0], cols, &q.side[0], m.blocks*q.words, &out[0], rowGroup)
					}
				}
				blocks := float64(rows / rowGroup * m.blocks)
				b.ReportMetric(b.Elapsed().Seconds()*1e9/float64(b.N)/blocks, "ns/block")
			})
		}
	}
}

// BenchmarkGather measures the activation gathers of one decode step of the
// act-order gocoder-m-gptq (one row; per layer: Q, K, V, gate, up, o in their own
// column orders over 512 inputs, down over 1408; 8 layers), to set beside the
// step's time (BenchmarkDecode/gocoder-m-gptq in model/llama).
func BenchmarkGather(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	perm := func(n int) []int32 {
		p := make([]int32, n)
		for i, v := range rng.Perm(n) {
			p[i] = int32(v)
		}
		return p
	}
	var perms [][]int32
	for range 6 {
		perms = append(perms, perm(512))
	}
	perms = append(perms, perm(1408))
	x, dst := randVec(rng, 1408), make([]float32, 1408)
	for b.Loop() {
		for range 8 {
			for _, p := range perms {
				Gather(dst[:len(p)], x[:len(p)], p)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e3, "µs/step")
}
