package heads_test

import (
	"io"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/backend"
	"github.com/specula/specula/backend/cpu"
	"github.com/specula/specula/draft"
	"github.com/specula/specula/draft/heads"
	"github.com/specula/specula/internal/headtest"
	"github.com/specula/specula/model"
)

// TestHeadsShareBackend opens an MLPSpeculator and Medusa heads on one backend, a CPU
// backend on a shared pool as an engine's target has: opening them starts no threads,
// they draft what heads on a backend of their own draft, at once from many
// goroutines, and closing a head leaves the backend to the others.
func TestHeadsShareBackend(t *testing.T) {
	dir := t.TempDir()
	medDir, mlpDir := filepath.Join(dir, "medusa"), filepath.Join(dir, "mlp")
	require.NoError(t, headtest.Medusa(medDir, 8, 16, 2, 1, 3))
	require.NoError(t, headtest.MLPSpeculator(mlpDir, 8, 8, 16, 2, 4))
	info := model.Info{Name: "tiny", VocabSize: 16, HiddenSize: 8}
	open := func(be backend.Backend) []draft.Drafter {
		opts := heads.Options{Backend: be}
		med, err := heads.OpenMedusa(medDir, info, opts)
		require.NoError(t, err)
		mlp, err := heads.OpenMLPSpeculator(mlpDir, info, opts)
		require.NoError(t, err)
		t.Cleanup(func() { med.Close(); mlp.Close() })
		return []draft.Drafter{med, mlp}
	}
	alone := cpu.New(backend.Shape{}, 2)
	defer alone.Close()
	own := open(alone)

	pool := cpu.NewPool(3)
	defer pool.Close()
	be, err := pool.Factory()(backend.Shape{})
	require.NoError(t, err)
	defer be.Close()
	before := runtime.NumGoroutine()
	shared := open(be)
	assert.LessOrEqual(t, runtime.NumGoroutine(), before, "heads on a backend start no threads")

	history := []int32{1, 5, 9}
	st := [][]float32{{1, 0, 0, 0, 0, 0, 0, 1}, {0, 1, 0, 0, 0, 0, 1, 0}, {0, 0, 1, 0, 0, 1, 0, 0}}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j, d := range shared {
				temp := float64(i % 2)
				assert.Equal(t, proposeK(t, own[j], 16, 2, history, st, temp), proposeK(t, d, 16, 2, history, st, temp), "head %d at T=%v", j, temp)
			}
		})
	}
	wg.Wait()
	require.NoError(t, shared[0].(io.Closer).Close())
	assert.Equal(t, proposeK(t, own[1], 16, 2, history, st, 0), proposeK(t, shared[1], 16, 2, history, st, 0), "the backend outlives a head closed")
}
