package heads_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/specula/specula/draft"
	"github.com/specula/specula/draft/heads"
	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/internal/sharedtest"
	"github.com/specula/specula/model/llama"
)

// BenchmarkPropose measures one greedy proposal of three tokens by each shared head
// in Q8_0 (as an engine loads them), on the target's CPU backend, after a held-out
// prompt: the drafting cost of a step.
func BenchmarkPropose(b *testing.B) {
	for _, dir := range []string{"gocoder-m-mlp-speculator", "gocoder-m-medusa", "gocoder-m-eagle"} {
		b.Run(dir, func(b *testing.B) {
			m, target := gocoderM(b)
			st := states(b, m, promptA)
			factory := threadsOf(m)
			opts := heads.Options{Backend: m.Backend(), Requantize: dtype.Q8_0, OpenEAGLE: func(dir string) (heads.Layer, error) {
				return llama.OpenEAGLE(dir, target, factory, llama.Options{ContextLength: m.Info().ContextLength, Requantize: dtype.Q8_0})
			}}
			d, closer, err := heads.Open(sharedtest.Path(b, "models", dir), m.Info(), opts)
			require.NoError(b, err)
			defer closer.Close()
			s, err := d.Start(context.Background(), draft.Request{Prompt: promptA[:1], VocabSize: m.Info().VocabSize, MaxK: 3, MaxLen: 64})
			require.NoError(b, err)
			defer s.Close()
			require.NoError(b, s.(draft.StateSession).Observe(promptA[1:], st[:len(promptA)-1]))
			var p draft.Proposal
			for b.Loop() {
				if err := s.Propose(context.Background(), promptA, 3, &p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
