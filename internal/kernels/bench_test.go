package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/specula/specula/model/dtype"
)

// BenchmarkMul measures one thread's product of a gocoder-m sized FFN matrix
// (1408 × 512) with 1, 5 and 8 activation rows: GFLOP/s and weight bandwidth.
func BenchmarkMul(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	const rows, cols = 1408, 512
	w := randVec(rng, rows*cols)
	for _, typ := range []dtype.DType{dtype.F32, dtype.F16, dtype.BF16, dtype.Q8_0, dtype.Q4_0, dtype.Q4_K, dtype.Q6_K} {
		m, err := NewMatrix(typ, rows, cols, encode(b, typ, w))
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
