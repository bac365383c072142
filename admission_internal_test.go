package specula

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAdmissionPassing: a request waiting for memory lets later ones that fit in what
// is free pass it, each such start counted; once it has been passed MaxRunning times
// nothing passes it, and it starts before the later ones as soon as its memory is
// back.
func TestAdmissionPassing(t *testing.T) {
	ctx := context.Background()
	a := newAdmission(Serving{MaxRunning: 3}, 0, 10, 16)
	started := func(need int) *ticket {
		t.Helper()
		tk, err := a.acquire(ctx, need)
		require.NoError(t, err)
		return tk
	}
	waiting := func(need int) (*ticket, chan error) {
		t.Helper()
		_, n := a.counts()
		done := make(chan error, 1)
		go func() {
			_, err := a.acquire(ctx, need)
			done <- err
		}()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			if _, w := a.counts(); w > n {
				break
			}
			require.True(t, time.Now().Before(deadline), "a request needing %d blocks did not queue", need)
			require.Empty(t, done, "a request needing %d blocks started at once", need)
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.queue[len(a.queue)-1], done
	}
	isRunning := func(tk *ticket) bool {
		select {
		case <-tk.ready:
			return tk.err == nil
		default:
			return false
		}
	}

	big := started(6)              // 6 of 10 blocks
	large, largeDone := waiting(8) // needs 8: waits for big
	small1 := started(2)           // fits in the 4 free: passes the large one
	small2 := started(2)           // 10 of 10
	assert.Equal(t, 2, large.passed)
	small1.release(0)    // 2 free: the large one still does not fit
	small3 := started(1) // passes it a third time: MaxRunning
	assert.Equal(t, 3, large.passed)
	small3.release(0)
	held, heldDone := waiting(1) // fits, but nothing passes the large one any more
	assert.False(t, isRunning(held))
	big.release(0) // 8 free of the 2 small2 holds: the large one starts, then the one behind it
	require.NoError(t, <-largeDone)
	assert.True(t, isRunning(large))
	small2.release(0)
	require.NoError(t, <-heldDone)
	assert.True(t, isRunning(held))
	r, w := a.counts()
	assert.Equal(t, 2, r)
	assert.Zero(t, w)
	large.release(0)
	held.release(0)
	assert.Zero(t, a.reserved)
}
