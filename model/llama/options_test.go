package llama

import (
	"errors"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/backend"
	"github.com/specula/specula/backend/cpu"
)

// xsFile is the repository's gocoder-xs model: 2048 positions of context, 1 KiB of
// keys and values a position (2 MiB a sequence at full context).
var xsFile = filepath.Join("..", "..", "models", "gocoder-xs-q8_0.gguf")

// TestKVBudget checks the one default key/value budget rule on gocoder-xs's shape —
// sequences × context × bytes a position, at least 64 MiB, at most 4 GiB, 4096
// positions when the model states no context, 4 × GOMAXPROCS sequences by default —
// and that a loaded model's cache gets it, after Options.ContextLength has lowered
// the context.
func TestKVBudget(t *testing.T) {
	tensors, err := OpenTensors(xsFile)
	require.NoError(t, err)
	xs := tensors.Config
	require.NoError(t, tensors.Close())
	require.Equal(t, int64(1024), xs.KVBytesPerPosition())
	require.Equal(t, 2048, xs.ContextLength)
	noContext := xs
	noContext.ContextLength = 0
	byDefault := max(int64(4*runtime.GOMAXPROCS(0))<<21, 64<<20)
	for _, c := range []struct {
		name      string
		cfg       Config
		sequences int
		want      int64
	}{
		{"floor", xs, 1, 64 << 20},
		{"sequences at full context", xs, 100, 100 << 21},
		{"ceiling", xs, 3000, 4 << 30},
		{"no context: 4096 positions", noContext, 50, 50 * 4096 << 10},
		{"default sequences", xs, 0, byDefault},
	} {
		assert.Equal(t, c.want, c.cfg.KVBudget(c.sequences), c.name)
	}

	for _, c := range []struct {
		name string
		opts Options
		want int64
	}{
		{"sequences", Options{Sequences: 100}, 100 << 21},
		{"lowered context", Options{Sequences: 200, ContextLength: 512}, 200 * 512 << 10},
		{"explicit budget", Options{Sequences: 200, KVBudget: 3 << 20}, 3 << 20},
	} {
		m, err := Open(xsFile, cpu.Factory(1), c.opts)
		require.NoError(t, err, c.name)
		assert.Equal(t, c.want, m.KVStats().Budget, c.name)
		require.NoError(t, m.Close())
	}
}

// TestBackendGiven checks that a model runs on the backend its factory makes, made for
// its shape, and that without one (a nil factory), or when making it fails, loading fails saying why.
func TestBackendGiven(t *testing.T) {
	var got []backend.Shape
	recording := func(s backend.Shape) (backend.Backend, error) {
		got = append(got, s)
		return cpu.New(s, 1), nil
	}
	m, err := Open(xsFile, recording, Options{})
	require.NoError(t, err)
	cfg := m.Config()
	assert.Equal(t, []backend.Shape{cfg.Shape()}, got, "made once, for the model's shape")
	require.NoError(t, m.Close())

	_, err = Open(xsFile, nil, Options{})
	assert.ErrorContains(t, err, "no backend")
	assert.ErrorContains(t, err, "cpu.Factory", "the error names the fix")
	assert.ErrorContains(t, err, "gocoder-xs-q8_0.gguf", "and the file")

	broken := errors.New("no such device")
	_, err = Open(xsFile, func(backend.Shape) (backend.Backend, error) { return nil, broken }, Options{})
	assert.ErrorIs(t, err, broken)
	_, err = Open(xsFile, func(backend.Shape) (backend.Backend, error) { return nil, nil }, Options{})
	assert.ErrorContains(t, err, "made no backend")
}
