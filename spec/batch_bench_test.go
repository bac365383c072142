package spec_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/specula/specula/backend/cpu"
	"github.com/specula/specula/model/llama"
	"github.com/specula/specula/spec"
	"github.com/specula/specula/target"
)

// BenchmarkBatchedStreams measures aggregate greedy decoding throughput with 1 and 8
// concurrent requests, the target's batching on and off, on the demo target or the
// model in $SPECULA_BENCH_MODEL (a real-scale file, say):
//
//	SPECULA_BENCH_MODEL=/tmp/rs/q05-q8.gguf go test ./spec -run XXX -bench BatchedStreams -benchtime 3x
//
// benchModel opens the model in $SPECULA_BENCH_MODEL, or the demo target, closed with
// the benchmark; demo says which.
func benchModel(b *testing.B) (m *llama.Model, path string, demo bool) {
	path = os.Getenv("SPECULA_BENCH_MODEL")
	if path == "" {
		path, demo = filepath.Join("..", "models", "gocoder-m-q8_0.gguf"), true
	}
	m, err := llama.Open(path, cpu.Factory(0), llama.Options{})
	if err != nil {
		b.Skipf("model %s: %v", path, err)
	}
	b.Cleanup(func() { m.Close() })
	return m, path, demo
}

func BenchmarkBatchedStreams(b *testing.B) {
	m, _, _ := benchModel(b)
	for _, batching := range []bool{false, true} {
		for _, n := range []int{1, 8} {
			b.Run(fmt.Sprintf("batching=%v/streams=%d", batching, n), func(b *testing.B) {
				tgt, err := target.NewLocal(m)
				if err != nil {
					b.Fatal(err)
				}
				if !batching {
					tgt.BatchWait = -1
				}
				dec, err := spec.New(tgt, nil, spec.Options{})
				if err != nil {
					b.Fatal(err)
				}
				tokens := 0
				start := time.Now()
				for range b.N {
					var wg sync.WaitGroup
					var mu sync.Mutex
					for i := range n {
						wg.Go(func() {
							res, err := single(dec.GenerateFunc(context.Background(), spec.Request{Prompt: []int32{int32(100 + i), 46, 10, 300}, MaxTokens: 32}, nil))
							if err != nil {
								b.Error(err)
							}
							mu.Lock()
							tokens += len(res.Tokens)
							mu.Unlock()
						})
					}
					wg.Wait()
				}
				b.ReportMetric(float64(tokens)/time.Since(start).Seconds(), "tokens/s")
			})
		}
	}
}

// BenchmarkChunkedPrefillGaps runs 4 greedy streams and, while they run, one request
// with a 2000-token prompt, with the prompt prefilled 16 tokens a shared pass (chunked
// prefill) or 512, and reports the streams' median and 99th-percentile gaps between
// tokens and the long prompt's time to its tokens:
//
//	SPECULA_BENCH_MODEL=/tmp/rs/q05-q8.gguf go test ./spec -run XXX -bench ChunkedPrefill -benchtime 1x
func BenchmarkChunkedPrefillGaps(b *testing.B) {
	m, _, _ := benchModel(b)
	long := make([]int32, 2000)
	salt := 0 // a prompt of its own each time: a cached prefix would skip its prefill
	for _, shared := range []int{512, 16} {
		b.Run(fmt.Sprintf("shared-chunk=%d", shared), func(b *testing.B) {
			tgt, err := target.NewLocal(m)
			if err != nil {
				b.Fatal(err)
			}
			tgt.SharedChunk = shared
			dec, err := spec.New(tgt, nil, spec.Options{})
			if err != nil {
				b.Fatal(err)
			}
			var gaps []time.Duration
			var longTime time.Duration
			for range b.N {
				var mu sync.Mutex
				var wg sync.WaitGroup
				for i := range 4 {
					wg.Go(func() {
						var last time.Time
						req := spec.Request{Prompt: []int32{int32(100 + i), 46, 10}, MaxTokens: 80}
						_, err := dec.GenerateFunc(context.Background(), req, func(c spec.Chunk) error {
							if len(c.Tokens) == 0 {
								return nil // the end
							}
							now := time.Now()
							if !last.IsZero() {
								mu.Lock()
								gaps = append(gaps, now.Sub(last))
								mu.Unlock()
							}
							last = now
							return nil
						})
						if err != nil {
							b.Error(err)
						}
					})
				}
				time.Sleep(100 * time.Millisecond)
				salt++
				for i := range long {
					long[i] = int32(50 + (i+salt)%500)
				}
				start := time.Now()
				if _, err := single(dec.GenerateFunc(context.Background(), spec.Request{Prompt: long, MaxTokens: 2}, nil)); err != nil {
					b.Fatal(err)
				}
				longTime += time.Since(start)
				wg.Wait()
			}
			slices.Sort(gaps)
			med, p99 := gaps[len(gaps)/2], gaps[len(gaps)*99/100]
			b.ReportMetric(float64(med.Microseconds())/1e3, "median-gap-ms")
			b.ReportMetric(float64(p99.Microseconds())/1e3, "p99-gap-ms")
			b.ReportMetric(float64(p99)/float64(med), "p99/median")
			b.ReportMetric(longTime.Seconds()/float64(b.N), "long-prompt-s")
		})
	}
}
