package heads_test

import (
	"context"
	"io"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/draft"
	"github.com/specula/specula/draft/heads"
	"github.com/specula/specula/internal/headtest"
	"github.com/specula/specula/model"
	"github.com/specula/specula/sampler"
)

// drafts returns what d drafts (k tokens, at temperature temp, seed 1) after a
// history of tokens and states.
func drafts(t *testing.T, d draft.Drafter, vocab int, history []int32, st [][]float32, temp float64) draft.Proposal {
	t.Helper()
	s, err := d.Start(context.Background(), draft.Request{Prompt: history[:1], VocabSize: vocab, MaxK: 2, MaxLen: 16,
		Sampling: sampler.Params{Temperature: temp, Seed: 1}})
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.(draft.StateSession).Observe(history[1:], st[:len(history)-1]))
	var p draft.Proposal
	require.NoError(t, s.Propose(context.Background(), history, 2, &p))
	out := draft.Proposal{Tokens: append([]int32(nil), p.Tokens...)}
	for _, q := range p.Dists {
		out.Dists = append(out.Dists, append([]float32(nil), q...))
	}
	return out
}

// TestHeadsSharePool opens an MLPSpeculator and Medusa heads on one pool: opening
// them starts no threads, they draft what heads on threads of their own draft, at
// once from many goroutines, and closing a head leaves the pool to the others.
func TestHeadsSharePool(t *testing.T) {
	dir := t.TempDir()
	medDir, mlpDir := filepath.Join(dir, "medusa"), filepath.Join(dir, "mlp")
	require.NoError(t, headtest.Medusa(medDir, 8, 16, 2, 1, 3))
	require.NoError(t, headtest.MLPSpeculator(mlpDir, 8, 8, 16, 2, 4))
	info := model.Info{Name: "tiny", VocabSize: 16, HiddenSize: 8}
	open := func(opts heads.Options) []draft.Drafter {
		med, err := heads.OpenMedusa(medDir, info, opts)
		require.NoError(t, err)
		mlp, err := heads.OpenMLPSpeculator(mlpDir, info, opts)
		require.NoError(t, err)
		t.Cleanup(func() { med.Close(); mlp.Close() })
		return []draft.Drafter{med, mlp}
	}
	own := open(heads.Options{Threads: 2})

	pool := heads.NewPool(3)
	defer pool.Close()
	before := runtime.NumGoroutine()
	shared := open(heads.Options{Pool: pool, Threads: 4})
	assert.LessOrEqual(t, runtime.NumGoroutine(), before, "heads on a pool start no threads")

	history := []int32{1, 5, 9}
	st := [][]float32{{1, 0, 0, 0, 0, 0, 0, 1}, {0, 1, 0, 0, 0, 0, 1, 0}, {0, 0, 1, 0, 0, 1, 0, 0}}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j, d := range shared {
				temp := float64(i % 2)
				assert.Equal(t, drafts(t, own[j], 16, history, st, temp), drafts(t, d, 16, history, st, temp), "head %d at T=%v", j, temp)
			}
		})
	}
	wg.Wait()
	require.NoError(t, shared[0].(io.Closer).Close())
	assert.Equal(t, drafts(t, own[1], 16, history, st, 0), drafts(t, shared[1], 16, history, st, 0), "the pool outlives a head closed")
}
