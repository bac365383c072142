package kernels

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
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

// blockTask blocks its ranges until release is closed.
type blockTask struct {
	countTask
	started chan struct{}
	once    sync.Once
	release chan struct{}
}

func (b *blockTask) Run(lo, hi int) {
	b.once.Do(func() { close(b.started) })
	<-b.release
	b.countTask.Run(lo, hi)
}

// TestPoolBusyRunsBeside: a run that finds the pool's threads busy with another
// goroutine's run does all its work on its caller, without waiting for that run (here
// the busy run waits for it), and both do all their work; many goroutines running at
// once on one pool do too.
func TestPoolBusyRunsBeside(t *testing.T) {
	p := NewPool(2)
	defer p.Close()
	busy := &blockTask{started: make(chan struct{}), release: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		p.Run(busy, 1000, 1)
		close(done)
	}()
	<-busy.started
	var beside countTask
	ran := make(chan struct{})
	go func() {
		p.Run(&beside, 1000, 1)
		close(ran)
	}()
	select {
	case <-ran:
	case <-time.After(5 * time.Second):
		t.Fatal("a run waited for the busy one")
	}
	close(busy.release)
	<-done
	if beside.n.Load() != 1000 || busy.n.Load() != 1000 {
		t.Fatalf("ran %d and %d of 1000", beside.n.Load(), busy.n.Load())
	}

	var wg sync.WaitGroup
	var many countTask
	for range 8 {
		wg.Go(func() {
			for range 100 {
				p.Run(&many, 97, 1)
			}
		})
	}
	wg.Wait()
	if many.n.Load() != 8*100*97 {
		t.Fatalf("ran %d of %d", many.n.Load(), 8*100*97)
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
