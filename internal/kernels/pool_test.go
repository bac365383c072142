package kernels

import (
	"sync/atomic"
	"testing"
)

type countTask struct{ n atomic.Int64 }

func (c *countTask) Run(lo, hi int) { c.n.Add(int64(hi - lo)) }

func TestPoolRunsEverything(t *testing.T) {
	for _, threads := range []int{1, 2, 3, 8} {
		p := NewPool(threads)
		for _, total := range []int{0, 1, 7, 100, 1000} {
			var c countTask
			p.Run(&c, total, 3)
			if c.n.Load() != int64(total) {
				t.Fatalf("threads %d total %d: ran %d", threads, total, c.n.Load())
			}
		}
		p.Close()
	}
}

// BenchmarkPoolRun measures the cost of handing out one small parallel task.
func BenchmarkPoolRun(b *testing.B) {
	p := NewPool(0)
	defer p.Close()
	var c countTask
	for b.Loop() {
		p.Run(&c, 64, 1)
	}
}
