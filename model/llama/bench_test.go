package llama

import (
	"context"
	"fmt"
	"testing"

	"github.com/specula/specula/internal/shared"
	"github.com/specula/specula/model"
)

// BenchmarkDecode measures single-token decoding (tokens/s) after a 128-token prompt,
// and the verification cost: forwarding 5 positions against forwarding 1 at the same
// sequence length.
func BenchmarkDecode(b *testing.B) {
	for _, file := range []string{"gocoder-m-f16.gguf", "gocoder-m-q8_0.gguf"} {
		m, err := Open(shared.Path(b, "models", file), Options{})
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		v := m.Info().VocabSize
		prompt := make([]int32, 128)
		for i := range prompt {
			prompt[i] = int32(i * 7 % v)
		}
		for _, n := range []int{1, 5} {
			b.Run(fmt.Sprintf("%s/positions=%d", file, n), func(b *testing.B) {
				seq, err := m.NewSequence(ctx)
				if err != nil {
					b.Fatal(err)
				}
				defer seq.Close()
				if err := seq.Forward(ctx, model.Batch{Tokens: prompt}, nil); err != nil {
					b.Fatal(err)
				}
				toks := make([]int32, n)
				outs := make([]int32, n)
				for i := range outs {
					outs[i] = int32(i)
				}
				logits := make([]float32, n*v)
				b.ReportAllocs()
				for b.Loop() {
					if err := seq.Forward(ctx, model.Batch{Tokens: toks, Outputs: outs}, logits); err != nil {
						b.Fatal(err)
					}
					if err := seq.Truncate(len(prompt)); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "passes/s")
			})
		}
		b.Run(file+"/prefill=512", func(b *testing.B) {
			long := make([]int32, 512)
			for i := range long {
				long[i] = int32(i * 13 % v)
			}
			for b.Loop() {
				seq, err := m.NewSequence(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if err := seq.Forward(ctx, model.Batch{Tokens: long, Outputs: []int32{511}}, make([]float32, v)); err != nil {
					b.Fatal(err)
				}
				seq.Close()
			}
			b.ReportMetric(float64(512*b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
		m.Close()
	}
}
