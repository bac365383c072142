package specula

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"
)

// Serving are the settings of an engine that serves many requests at once: how many
// run, how many may wait, and when speculation gives way to plain decoding. The zero
// value of a field is its default.
type Serving struct {
	// MaxRunning is the most requests that decode at once (0: MaxSequences, whose
	// default is 4 × GOMAXPROCS). A request also waits until the key/value memory it
	// may fill — its prompt and MaxTokens for every choice, with room for a last
	// draft — is free of the running requests', so that none runs out part-way: a
	// request without MaxTokens reserves the rest of the context, and bounding
	// MaxTokens lets more run at once. A request that could not fit even alone is
	// refused before it waits, with a [*CapacityError] saying what to lower.
	//
	// Requests start in the order they came, but one that waits for memory does
	// not hold back a later one that fits in what is free: the later one passes it.
	// Each waiting request may be passed MaxRunning times; after that nothing passes
	// it, and it starts as soon as the running requests have given back its memory.
	// A small request so waits at most its own turn, and a large one is still
	// served.
	MaxRunning int
	// MaxQueue is the most requests that wait for their turn (0: DefaultMaxQueue;
	// negative: none wait). One more is refused at once with an *OverloadedError.
	MaxQueue int
	// QueueTimeout, when positive, bounds the wait: a request still waiting then is
	// refused with an *OverloadedError. A request's context bounds it too.
	QueueTimeout time.Duration
	// Saturation, when positive, is the most requests that may run (the new one
	// included) for a newly admitted request to decode speculatively; with more, it
	// decodes plainly, as with vLLM's speculative_disable_by_batch_size. 0 never
	// turns speculation off: requests share the target's passes, and the adaptive
	// decoder prices each draft by what it costs the whole batch, so speculation
	// fades by itself as the batch fills.
	Saturation int
}

// DefaultMaxQueue is how many requests wait for their turn by default.
const DefaultMaxQueue = 1024

// check refuses impossible settings.
func (s Serving) check() error {
	switch {
	case s.MaxRunning < 0:
		return invalid("MaxRunning", "%d must be >= 0", s.MaxRunning)
	case s.QueueTimeout < 0:
		return invalid("QueueTimeout", "%v must be >= 0", s.QueueTimeout)
	case s.Saturation < 0:
		return invalid("Saturation", "%d must be >= 0", s.Saturation)
	}
	return nil
}

// admission lets requests run in the order they came while there is a place and
// key/value memory for them, and makes the others wait.
type admission struct {
	maxRunning, maxQueue int
	timeout              time.Duration
	capacity, blockSize  int // the target's key/value blocks (0: unknown)

	mu       sync.Mutex
	running  int
	reserved int       // blocks the running requests may fill
	queue    []*ticket // waiting, oldest first
	closed   bool
	idle     *sync.Cond // signalled when running falls to 0
	avg      float64    // recent mean request time, seconds
}

// ticket is a request's place: waiting, then running.
type ticket struct {
	a       *admission
	need    int
	passed  int           // later requests that started while it waited
	ready   chan struct{} // closed when admitted or refused
	err     error         // why it was refused
	running int           // requests running when it was admitted, itself included
}

// newAdmission returns the admission of an engine whose target's cache has capacity
// blocks of blockSize positions (0, 0: unknown).
func newAdmission(s Serving, defaultRunning, capacity, blockSize int) *admission {
	a := &admission{maxRunning: s.MaxRunning, maxQueue: s.MaxQueue, timeout: s.QueueTimeout,
		capacity: capacity, blockSize: blockSize, avg: 1}
	if a.maxRunning == 0 {
		a.maxRunning = defaultRunning
	}
	switch {
	case a.maxQueue == 0:
		a.maxQueue = DefaultMaxQueue
	case a.maxQueue < 0:
		a.maxQueue = 0
	}
	a.idle = sync.NewCond(&a.mu)
	return a
}

// positions is how many token positions the whole cache holds (0: unknown).
func (a *admission) positions() int { return a.capacity * a.blockSize }

// acquire waits for the request's turn and need blocks of memory (at most the
// cache's capacity: the engine refused larger requests). It fails with an
// *OverloadedError when the queue is full or the wait too long, ErrCancelled when
// ctx ends first, ErrClosed when the engine closes.
func (a *admission) acquire(ctx context.Context, need int) (*ticket, error) {
	t := &ticket{a: a, need: need, ready: make(chan struct{})}
	a.mu.Lock()
	switch {
	case a.closed:
		a.mu.Unlock()
		return nil, ErrClosed
	case a.fits(need) && a.mayPass(len(a.queue)):
		a.pass(len(a.queue))
		a.start(t)
		a.mu.Unlock()
		return t, nil
	case len(a.queue) >= a.maxQueue:
		err := a.overloaded(false)
		a.mu.Unlock()
		return nil, err
	}
	a.queue = append(a.queue, t)
	a.mu.Unlock()
	return t, t.wait(ctx)
}

// fits reports whether a request needing need blocks may start now.
func (a *admission) fits(need int) bool {
	if a.running >= a.maxRunning {
		return false
	}
	return a.capacity == 0 || a.reserved+need <= a.capacity
}

// mayPass reports whether a request may start ahead of the first n waiting ones:
// none of them has been passed MaxRunning times yet; a.mu is held.
func (a *admission) mayPass(n int) bool {
	for _, q := range a.queue[:n] {
		if q.passed >= a.maxRunning {
			return false
		}
	}
	return true
}

// pass counts a start ahead of the first n waiting requests; a.mu is held.
func (a *admission) pass(n int) {
	for _, q := range a.queue[:n] {
		q.passed++
	}
}

// start runs t; a.mu is held.
func (a *admission) start(t *ticket) {
	a.running++
	a.reserved += t.need
	t.running = a.running
	close(t.ready)
}

// wait waits for t's turn.
func (t *ticket) wait(ctx context.Context) error {
	var timeout <-chan time.Time
	if t.a.timeout > 0 {
		timer := time.NewTimer(t.a.timeout)
		defer timer.Stop()
		timeout = timer.C
	}
	select {
	case <-t.ready:
		return t.err
	case <-ctx.Done():
		return t.leave(fmt.Errorf("%w: %w", ErrCancelled, context.Cause(ctx)))
	case <-timeout:
		return t.leave(nil)
	}
}

// leave takes a waiting ticket out of the queue with err (nil: it timed out), or,
// when it was admitted meanwhile, gives its place back.
func (t *ticket) leave(err error) error {
	a := t.a
	a.mu.Lock()
	defer a.mu.Unlock()
	select {
	case <-t.ready:
		if t.err != nil {
			return t.err
		}
		a.finish(t)
	default:
		for i, q := range a.queue {
			if q == t {
				a.queue = append(a.queue[:i], a.queue[i+1:]...)
				break
			}
		}
		a.admit() // a large request at the head may have held smaller ones back
	}
	if err == nil {
		return a.overloaded(true)
	}
	return err
}

// release ends a running request that took d.
func (t *ticket) release(d time.Duration) {
	a := t.a
	a.mu.Lock()
	defer a.mu.Unlock()
	a.avg = 0.9*a.avg + 0.1*d.Seconds()
	a.finish(t)
}

// finish gives t's place and memory back and lets waiting requests in; a.mu is held.
func (a *admission) finish(t *ticket) {
	a.running--
	a.reserved -= t.need
	if a.running == 0 {
		a.idle.Broadcast()
	}
	a.admit()
}

// admit starts the waiting requests that fit, oldest first, each passing those
// ahead of it that may still be passed; a.mu is held.
func (a *admission) admit() {
	for i := 0; i < len(a.queue) && !a.closed && a.running < a.maxRunning; {
		t := a.queue[i]
		switch {
		case a.fits(t.need):
			a.pass(i)
			a.queue = append(a.queue[:i], a.queue[i+1:]...)
			a.start(t)
		case t.passed >= a.maxRunning:
			return // nothing passes it any more
		default:
			i++
		}
	}
}

// overloaded is the error of a refused request; a.mu is held.
func (a *admission) overloaded(timedOut bool) error {
	wait := a.avg * float64(len(a.queue)+1) / float64(a.maxRunning)
	return &OverloadedError{Running: a.running, Waiting: len(a.queue), TimedOut: timedOut,
		RetryAfter: time.Duration(math.Ceil(max(wait, 1))) * time.Second}
}

// counts returns the requests running and waiting now.
func (a *admission) counts() (running, waiting int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.running, len(a.queue)
}

// close refuses waiting and later requests with ErrClosed and waits until the running
// ones have ended.
func (a *admission) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	for _, t := range a.queue {
		t.err = ErrClosed
		close(t.ready)
	}
	a.queue = nil
	for a.running > 0 {
		a.idle.Wait()
	}
}
