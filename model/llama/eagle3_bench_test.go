package llama

import (
	"context"
	"testing"

	"github.com/specula/specula/backend/cpu"
	"github.com/specula/specula/batch"
	"github.com/specula/specula/internal/sharedtest"
)

// BenchmarkVerifyAuxStates measures what keeping an EAGLE-3 head's auxiliary states
// adds to a verification pass of 5 positions after a 128-token prompt on gocoder-m:
// the final states of the 5 rows (what an EAGLE-1 head reads) against those and the
// streams after layers 1, 3 and 4 (entering 2, 4 and 5, vLLM's default), from the same
// pass.
func BenchmarkVerifyAuxStates(b *testing.B) {
	m, err := Open(sharedtest.Path(b, "models", "gocoder-m-f16.gguf"), cpu.Factory(1), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	ctx := context.Background()
	v, d := m.Info().VocabSize, m.Info().HiddenSize
	prompt := make([]int32, 128)
	for i := range prompt {
		prompt[i] = int32(i * 7 % v)
	}
	rows := []int32{0, 1, 2, 3, 4}
	for _, c := range []struct {
		name   string
		layers []int32
	}{{"final", nil}, {"aux3+final", []int32{1, 3, 4}}} {
		b.Run(c.name, func(b *testing.B) {
			seq, err := m.NewSequence(ctx)
			if err != nil {
				b.Fatal(err)
			}
			defer seq.Close()
			if err := seq.Forward(ctx, batch.Batch{Tokens: prompt}, nil); err != nil {
				b.Fatal(err)
			}
			logits := make([]float32, len(rows)*v)
			hidden := make([]float32, len(rows)*(len(c.layers)+1)*d)
			bt := batch.Batch{Tokens: []int32{1, 2, 3, 4, 5}, Outputs: rows, States: rows, StateLayers: c.layers, Hidden: hidden}
			for b.Loop() {
				if err := seq.Forward(ctx, bt, logits); err != nil {
					b.Fatal(err)
				}
				if err := seq.Truncate(len(prompt)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
