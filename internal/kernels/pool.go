package kernels

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Task is work that can be split into ranges of [0, total) and run in parallel.
type Task interface {
	Run(lo, hi int)
}

// Pool runs tasks on a fixed set of threads: the goroutine calling Run and Threads()-1
// helpers. A forward pass hands out dozens of small parallel steps, each a few
// microseconds to a millisecond long, so handing work over must cost far less than
// waking a sleeping thread: helpers spin on an atomic generation counter for a while
// after their last work, and only then sleep. A Pool is safe for concurrent use: a run
// that finds the threads busy with another goroutine's runs on its caller alone.
type Pool struct {
	threads int
	run     sync.Mutex // one run at a time
	gen     atomic.Uint64
	cur     batch
	closed  atomic.Bool

	mu       sync.Mutex // guards sleeping, with wake
	wake     *sync.Cond
	sleeping int
}

// closedBit marks a batch whose work has all been handed out: helpers that arrive
// later do not join it.
const closedBit = 1 << 62

type batch struct {
	task         Task
	total, chunk int
	next         atomic.Int64
	state        atomic.Int64 // helpers working, | closedBit once the caller is done
}

// spin is how long an idle helper keeps watching for work before it sleeps.
const spin = 100 * time.Microsecond

// NewPool starts a pool of the given number of threads (0 means GOMAXPROCS).
func NewPool(threads int) *Pool {
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	p := &Pool{threads: threads}
	p.wake = sync.NewCond(&p.mu)
	p.cur.state.Store(closedBit)
	for range threads - 1 {
		go p.helper()
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
	// A few chunks per thread balance uneven progress without much overhead.
	chunk := max(grain, (total+4*p.threads-1)/(4*p.threads))
	if p.threads == 1 || total <= chunk || !p.run.TryLock() {
		// Alone, or the pool is busy with another goroutine's run: this one runs on
		// its own goroutine, beside it. (Two draft sessions taking turns on the
		// pool's threads each waited for the other's every step: twice as slow as
		// each on a core of its own.)
		task.Run(0, total)
		return
	}
	b := &p.cur
	b.task, b.total, b.chunk = task, total, chunk
	b.next.Store(0)
	b.state.Store(0) // open
	p.gen.Add(1)
	p.mu.Lock()
	if p.sleeping > 0 {
		p.wake.Broadcast()
	}
	p.mu.Unlock()
	b.work()
	// Close the batch and wait for the helpers that joined it.
	for s := b.state.Add(closedBit); s != closedBit; s = b.state.Load() {
		runtime.Gosched()
	}
	b.task = nil
	p.run.Unlock()
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

// join adds a helper to the batch unless it is closed.
func (b *batch) join() bool {
	for {
		s := b.state.Load()
		if s&closedBit != 0 {
			return false
		}
		if b.state.CompareAndSwap(s, s+1) {
			return true
		}
	}
}

func (p *Pool) helper() {
	seen := p.gen.Load()
	for {
		// Watch for a new generation, then sleep.
		start := time.Now()
		for i := 0; p.gen.Load() == seen; i++ {
			if p.closed.Load() {
				return
			}
			if i%128 == 127 && time.Since(start) > spin {
				p.mu.Lock()
				p.sleeping++
				for p.gen.Load() == seen && !p.closed.Load() {
					p.wake.Wait()
				}
				p.sleeping--
				p.mu.Unlock()
			}
		}
		seen = p.gen.Load()
		if b := &p.cur; b.join() {
			b.work()
			b.state.Add(-1)
		}
	}
}

// Close stops the helpers. Run must not be called after.
func (p *Pool) Close() {
	p.closed.Store(true)
	p.mu.Lock()
	p.wake.Broadcast()
	p.mu.Unlock()
}
