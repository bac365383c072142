package llama

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/specula/specula/backend/cpu"
	"github.com/specula/specula/batch"
	"github.com/specula/specula/internal/sharedtest"
)

// BenchmarkDecode measures single-token decoding (tokens/s) after a 128-token prompt,
// and the verification cost: forwarding 5 positions against forwarding 1 at the same
// sequence length.
func BenchmarkDecode(b *testing.B) {
	for _, file := range []string{"gocoder-m-f16.gguf", "gocoder-m-q8_0.gguf", "gocoder-m-gptq"} {
		m, err := Open(sharedtest.Path(b, "models", file), cpu.Factory(0), Options{})
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
				if err := seq.Forward(ctx, batch.Batch{Tokens: prompt}, nil); err != nil {
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
					if err := seq.Forward(ctx, batch.Batch{Tokens: toks, Outputs: outs}, logits); err != nil {
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
				if err := seq.Forward(ctx, batch.Batch{Tokens: long, Outputs: []int32{511}}, make([]float32, v)); err != nil {
					b.Fatal(err)
				}
				seq.Close()
			}
			b.ReportMetric(float64(512*b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
		m.Close()
	}
}

// BenchmarkGreedyPrompts decodes 128 tokens greedily after each of the three
// gocoder-m golden prompts (400–500 tokens of Go) and reports the decoding speed after
// the first token, the figure llama.cpp's bench script prints for the same prompts.
func BenchmarkGreedyPrompts(b *testing.B) {
	raw, err := os.ReadFile(sharedtest.Path(b, "models", "gocoder-m.golden.json"))
	if err != nil {
		b.Fatal(err)
	}
	var g struct {
		Cases []struct {
			PromptIDs []int32 `json:"prompt_ids"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(raw, &g); err != nil {
		b.Fatal(err)
	}
	for _, file := range []string{"gocoder-m-f16.gguf", "gocoder-m-q8_0.gguf", "gocoder-m"} {
		b.Run(file, func(b *testing.B) {
			m, err := Open(sharedtest.Path(b, "models", file), cpu.Factory(0), Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			ctx := context.Background()
			v := m.Info().VocabSize
			logits := make([]float32, v)
			var decoded int
			var decode time.Duration
			for b.Loop() {
				for _, c := range g.Cases[:3] {
					seq, err := m.NewSequence(ctx)
					if err != nil {
						b.Fatal(err)
					}
					in := c.PromptIDs
					var first time.Time
					for i := range 128 {
						if err := seq.Forward(ctx, batch.Batch{Tokens: in, Outputs: []int32{int32(len(in) - 1)}}, logits); err != nil {
							b.Fatal(err)
						}
						if i == 0 {
							first = time.Now()
						}
						best := 0
						for j := range logits {
							if logits[j] > logits[best] {
								best = j
							}
						}
						in = []int32{int32(best)}
					}
					decode += time.Since(first)
					decoded += 127
					seq.Close()
				}
			}
			b.ReportMetric(float64(decoded)/decode.Seconds(), "tokens/s")
		})
	}
}
