package sampler_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/specula/specula/sampler"
)

// BenchmarkProcess measures logit processing per position for realistic vocabulary
// sizes (gocoder 8192, Llama 2 32000, Qwen2 151936).
func BenchmarkProcess(b *testing.B) {
	for _, v := range []int{8192, 32000, 151936} {
		rng := rand.New(rand.NewPCG(1, 1))
		logits := make([]float32, v)
		for i := range logits {
			logits[i] = float32(rng.NormFloat64() * 3)
		}
		hist := make([]int32, 256)
		for i := range hist {
			hist[i] = int32(rng.IntN(v))
		}
		for _, c := range []struct {
			name string
			p    sampler.Params
		}{
			{"greedy", sampler.Params{}},
			{"T=1", sampler.Params{Temperature: 1}},
			{"T=0.8,top-p=0.95", sampler.Params{Temperature: 0.8, TopP: 0.95}},
			{"T=0.8,top-k=40,top-p=0.95,penalty=1.1", sampler.Params{Temperature: 0.8, TopK: 40, TopP: 0.95, RepetitionPenalty: 1.1}},
		} {
			b.Run(fmt.Sprintf("vocab=%d/%s", v, c.name), func(b *testing.B) {
				s, err := sampler.New(c.p, v)
				if err != nil {
					b.Fatal(err)
				}
				dst := make([]float32, v)
				b.ReportAllocs()
				for b.Loop() {
					if err := s.Process(logits, hist, dst); err != nil {
						b.Fatal(err)
					}
					s.Sample(dst)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(v), "ns/logit")
			})
		}
	}
}
