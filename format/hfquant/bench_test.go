package hfquant

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkDense expands a Qwen2.5-7B-sized MLP matrix (18944 × 3584, as up_proj)
// in each integer format.
func BenchmarkDense(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, c := range []struct {
		name string
		l    layer
	}{
		{"gptq4-actorder", gptqLayer(rng, &Scheme{Method: GPTQ, Bits: 4, GroupSize: 128, ZeroMinusOne: true, ActOrder: true}, 18944, 3584)},
		{"awq", awqLayer(rng, &Scheme{Method: AWQ, Bits: 4, GroupSize: 128}, 18944, 3584)},
		{"ct4", ctLayer(rng, ctScheme(4, 128, true), 18944, 3584, false)},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := c.l.scheme.Dense(c.l.src, pre); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
