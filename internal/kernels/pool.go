package kernels

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// Task is work that can be split into ranges of [0, total) and run in parallel.
type Task interface {
	Run(lo, hi int)
}

// Pool runs tasks on a fixed set of goroutines. The goroutine calling Run takes part,
// so a pool of one thread runs everything inline. A Pool is safe for concurrent use:
// runs from several goroutines share the helpers.
type Pool struct {
	threads int
	wake    chan *batch
	batches sync.Pool
	once    sync.Once
}

type batch struct {
	task         Task
	total, chunk int
	next         atomic.Int64
	wg           sync.WaitGroup
}

// NewPool starts a pool of the given number of threads (0 means GOMAXPROCS).
func NewPool(threads int) *Pool {
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	p := &Pool{threads: threads, wake: make(chan *batch, 4*threads)}
	p.batches.New = func() any { return new(batch) }
	for range threads - 1 {
		go func() {
			for b := range p.wake {
				b.work()
				b.wg.Done()
			}
		}()
	}
	return p
}

// Threads is the number of threads the pool runs tasks on.
func (p *Pool) Threads() int { return p.threads }

// Run runs task over [0, total) in ranges of at least grain items, on every thread,
// and returns when all are done.
func (p *Pool) Run(task Task, total, grain int) {
	if total <= 0 {
		return
	}
	helpers := p.threads - 1
	// A few chunks per thread balance uneven progress without much overhead.
	chunk := max(grain, (total+4*p.threads-1)/(4*p.threads))
	if helpers == 0 || total <= chunk {
		task.Run(0, total)
		return
	}
	helpers = min(helpers, (total+chunk-1)/chunk-1)
	b := p.batches.Get().(*batch)
	b.task, b.total, b.chunk = task, total, chunk
	b.next.Store(0)
	b.wg.Add(helpers)
	for range helpers {
		p.wake <- b
	}
	b.work()
	b.wg.Wait()
	b.task = nil
	p.batches.Put(b)
}

func (b *batch) work() {
	for {
		lo := int(b.next.Add(1)-1) * b.chunk
		if lo >= b.total {
			return
		}
		b.task.Run(lo, min(lo+b.chunk, b.total))
	}
}

// Close stops the helpers. Run must not be called after.
func (p *Pool) Close() {
	p.once.Do(func() { close(p.wake) })
}
