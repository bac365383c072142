package kvcache

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestConcurrent runs several producers against one pool. Each grows and writes its
// own sequence, forks it and hands the forks to consumer goroutines, which check their
// block hashes, extend, rearrange, release their first blocks, verify and close them
// while the producer keeps writing (and releasing) its own copy: the forks share
// blocks across goroutines, so copy-on-write and the reference counts are exercised
// concurrently. Run it with -race: the storage takes no lock, so a write into a block
// another goroutine reads is a reported race.
func TestConcurrent(t *testing.T) {
	const producers, consumers = 4, 4
	rounds := 60
	if testing.Short() {
		rounds = 15
	}
	p, st := newPool(t, 4, 400)
	st.pool = nil // no checks: their lock would hide races
	type job struct {
		s      *Seq
		ids    []uint32
		hashes []uint64 // the producer's hashes of the full blocks
	}
	jobs := make(chan job)
	var prod, cons sync.WaitGroup
	// fail reports an error from a goroutine; require must not be used off the test
	// goroutine.
	errs := make(chan error, producers+consumers)
	fail := func(err error) {
		select {
		case errs <- err:
		default:
		}
	}
	for w := range producers {
		prod.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			f := filler{next: uint32(w) << 18}
			s := p.NewSeq()
			defer s.Close()
			var ids []uint32
			for range rounds {
				g := 1 + rng.IntN(9)
				add := f.ids(g)
				if err := s.Grow(toks(add)); err != nil {
					if !errors.Is(err, ErrOutOfMemory) {
						fail(err)
						return
					}
					_ = s.Truncate(0)
					ids = ids[:0]
					continue
				}
				for _, id := range add {
					write(s, len(ids), id)
					ids = append(ids, id)
				}
				if err := verifyErr(s, ids); err != nil {
					fail(fmt.Errorf("producer %d: %w", w, err))
					return
				}
				fork, err := s.Fork()
				if err != nil {
					fail(err)
					return
				}
				var hashes []uint64
				for i := range len(ids) / 4 {
					h, _ := s.BlockHash(i)
					hashes = append(hashes, h)
				}
				jobs <- job{fork, slices.Clone(ids), hashes}
				if rng.IntN(4) == 0 {
					k := rng.IntN(len(ids) + 1)
					_ = s.Truncate(k)
					ids = ids[:k]
				}
				if rng.IntN(4) == 0 { // blocks its forks may still hold
					if err := s.ReleaseBefore(rng.IntN(len(ids) + 1)); err != nil {
						fail(err)
						return
					}
				}
			}
		})
	}
	for c := range consumers {
		cons.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 11))
			f := filler{next: uint32(producers+c) << 18}
			for j := range jobs {
				s, ids := j.s, j.ids
				for i, want := range j.hashes {
					if h, ok := s.BlockHash(i); !ok || h != want {
						fail(fmt.Errorf("consumer %d: block %d of a fork hashes to %#x, %v; the original to %#x", c, i, h, ok, want))
					}
				}
				for range 3 {
					n := s.Len()
					g := 1 + rng.IntN(6)
					add := f.ids(g)
					if err := s.Grow(toks(add)); err != nil {
						if !errors.Is(err, ErrOutOfMemory) {
							fail(err)
						}
						break
					}
					for _, id := range add {
						write(s, len(ids), id)
						ids = append(ids, id)
					}
					// Keep a random path of the new positions.
					var keep []int32
					for k := range g {
						if rng.IntN(2) == 0 {
							keep = append(keep, int32(k))
						}
					}
					if err := s.Retain(n, keep); err != nil {
						if !errors.Is(err, ErrOutOfMemory) {
							fail(err)
						}
						break
					}
					kept := slices.Clone(ids[:n])
					for _, k := range keep {
						kept = append(kept, ids[n+int(k)])
					}
					ids = kept
				}
				if err := s.ReleaseBefore(rng.IntN(s.Len() + 1)); err != nil {
					fail(err)
				}
				// Several readers of the (now unchanging) sequence at once.
				var rd sync.WaitGroup
				for range 3 {
					rd.Go(func() {
						if err := verifyErr(s, ids); err != nil {
							fail(fmt.Errorf("consumer %d: %w", c, err))
						}
					})
				}
				rd.Wait()
				s.Close()
			}
		})
	}
	prod.Wait()
	close(jobs)
	cons.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.NoError(t, p.check())
	require.Equal(t, 400, p.Stats().FreeBlocks)
}
