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

// BenchmarkObservePrompt measures what a head's first token costs beside the target's
// prefill: each shared head (Q8_0, on the target's CPU threads) told a 425-token
// prompt's states, in a fresh session — cold, its prefix cache empty — or after the
// same prompt was told (warm: an EAGLE layer takes its rows from its prefix cache).
func BenchmarkObservePrompt(b *testing.B) {
	m, target := gocoderM(b)
	prompt := make([]int32, 425)
	for i := range prompt {
		prompt[i] = int32((i*37 + 11) % m.Info().VocabSize)
	}
	st := states(b, m, prompt[:len(prompt)-1])
	b.Run("target prefill (F16, for scale)", func(b *testing.B) {
		for b.Loop() {
			states(b, m, prompt[:len(prompt)-1])
		}
	})
	for _, dir := range []string{"gocoder-m-mlp-speculator", "gocoder-m-medusa", "gocoder-m-eagle"} {
		for _, warm := range []bool{false, true} {
			name := dir + "/cold"
			if warm {
				name = dir + "/warm"
			}
			b.Run(name, func(b *testing.B) {
				factory := threadsOf(m)
				opts := heads.Options{Backend: m.Backend(), Requantize: dtype.Q8_0, OpenEAGLE: func(dir string) (heads.Layer, error) {
					return llama.OpenEAGLE(dir, target, factory, llama.Options{ContextLength: m.Info().ContextLength, Requantize: dtype.Q8_0})
				}}
				d, closer, err := heads.Open(sharedtest.Path(b, "models", dir), m.Info(), opts)
				require.NoError(b, err)
				defer func() { _ = closer.Close() }()
				req := draft.Request{Prompt: prompt, VocabSize: m.Info().VocabSize, MaxK: 3, MaxLen: 1024}
				observe := func() {
					s, err := d.Start(context.Background(), req)
					require.NoError(b, err)
					defer s.Close()
					from := 0
					if sf, ok := s.(draft.StatesFrom); ok {
						from = sf.StatesFrom(len(prompt) - 1)
					}
					if !warm {
						from = 0
					}
					require.NoError(b, s.(draft.StateSession).Observe(prompt[1+from:], st[from:]))
				}
				if warm {
					observe()
				}
				for b.Loop() {
					if !warm {
						b.StopTimer()
						_ = closer.Close() // the layer and its prefix cache: a fresh one each time
						d, closer, err = heads.Open(sharedtest.Path(b, "models", dir), m.Info(), opts)
						require.NoError(b, err)
						b.StartTimer()
					}
					observe()
				}
			})
		}
	}
}
