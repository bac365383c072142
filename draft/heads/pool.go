package heads

import "github.com/specula/specula/internal/kernels"

// Pool is threads for heads' products (MLPSpeculator, Medusa) to run on. A head drafts
// at every step, and idle threads spin a while before they sleep, so an engine whose
// heads each had threads of their own would hold several pools spinning against each
// other and against the target's: give every head of an engine one Pool
// ([Options].Pool). It is safe for concurrent use: sessions that find its threads busy
// run on their own goroutine.
type Pool struct{ k *kernels.Pool }

// NewPool starts a pool of the given number of threads (0 means GOMAXPROCS).
func NewPool(threads int) *Pool { return &Pool{k: kernels.NewPool(threads)} }

// Threads is the number of threads of the pool.
func (p *Pool) Threads() int { return p.k.Threads() }

// Close stops the pool's threads, after the heads on it are closed.
func (p *Pool) Close() error {
	p.k.Close()
	return nil
}

// threads are the pool a head's products run on: the caller's ([Options].Pool), or a
// pool of the head's own, which the head's Close stops.
type threads struct {
	k   *kernels.Pool
	own bool
}

func newThreads(opts Options) threads {
	if opts.Pool != nil {
		return threads{k: opts.Pool.k}
	}
	return threads{k: kernels.NewPool(opts.Threads), own: true}
}

// close stops the threads if they are the head's own.
func (t threads) close() {
	if t.own {
		t.k.Close()
	}
}
