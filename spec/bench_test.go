package spec_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/specula/specula/draft"
	"github.com/specula/specula/internal/markov"
	"github.com/specula/specula/sampler"
	"github.com/specula/specula/spec"
)

// BenchmarkLoopOverhead measures what the decoding loop itself costs per generated
// token — drafting bookkeeping, verification, sampling, stop checks — with toy Markov
// models whose forward pass is a table lookup.
func BenchmarkLoopOverhead(b *testing.B) {
	const tokens = 256
	for _, vocab := range []int{256, 2048} {
		tgt := newChain(b, markov.Config{Vocab: vocab, Order: 1, Seed: 1, ContextLength: 1024})
		d := newDrafter(b, tgt.Perturbed(0.5, 1))
		cases := []struct {
			name string
			d    draft.Drafter
			k    int
			p    sampler.Params
		}{
			{"plain/greedy", nil, 0, sampler.Params{}},
			{"K=4/greedy", d, 4, sampler.Params{}},
			{"plain/T=0.8,top-p=0.95", nil, 0, sampler.Params{Temperature: 0.8, TopP: 0.95}},
			{"K=4/T=0.8,top-p=0.95", d, 4, sampler.Params{Temperature: 0.8, TopP: 0.95}},
		}
		for _, c := range cases {
			b.Run(fmt.Sprintf("vocab=%d/%s", vocab, c.name), func(b *testing.B) {
				dec := newDecoder(b, tgt, c.d, c.k)
				emit := func(spec.Chunk) error { return nil }
				var agg spec.Aggregate
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					req := spec.Request{Prompt: []int32{1, 2, 3}, MaxTokens: tokens, Sampling: c.p}
					req.Sampling.Seed = uint64(i)
					res, err := single(dec.GenerateFunc(context.Background(), req, emit))
					if err != nil {
						b.Fatal(err)
					}
					agg.Add(res.Stats)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(agg.Total.GeneratedTokens), "ns/token")
				b.ReportMetric(agg.Total.MeanAcceptedLength(), "tokens/pass")
			})
		}
	}
}
