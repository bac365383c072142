package spec_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/specula/specula/model/llama"
	"github.com/specula/specula/spec"
	"github.com/specula/specula/target"
)

// BenchmarkBatchedStreams measures aggregate greedy decoding throughput with 1 and 8
// concurrent requests, the target's batching on and off, on the demo target or the
// model in $SPECULA_BENCH_MODEL (a real-scale file, say):
//
//	SPECULA_BENCH_MODEL=/tmp/rs/q05-q8.gguf go test ./spec -run XXX -bench BatchedStreams -benchtime 3x
func BenchmarkBatchedStreams(b *testing.B) {
	path := os.Getenv("SPECULA_BENCH_MODEL")
	if path == "" {
		path = filepath.Join("..", "models", "gocoder-m-q8_0.gguf")
	}
	m, err := llama.Open(path, llama.Options{})
	if err != nil {
		b.Skipf("model %s: %v", path, err)
	}
	defer m.Close()
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
							res, err := dec.Generate(context.Background(), spec.Request{Prompt: []int32{int32(100 + i), 46, 10, 300}, MaxTokens: 32})
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
