package sched_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/batch"
	"github.com/specula/specula/internal/markov"
	"github.com/specula/specula/sched"
)

// TestChunk: a prefill takes PrefillChunk tokens a pass while no other sequence
// streams and SharedChunk while one does (never more than PrefillChunk), the defaults
// standing in for zeros; with batching off nobody shares a pass, so nobody slices.
func TestChunk(t *testing.T) {
	tests := []struct {
		name          string
		opts          sched.Options
		alone, shared int
	}{
		{"defaults", sched.Options{}, sched.DefaultPrefillChunk, sched.DefaultSharedChunk},
		{"set", sched.Options{PrefillChunk: 64, SharedChunk: 4}, 64, 4},
		{"shared above the chunk", sched.Options{PrefillChunk: 8, SharedChunk: 32}, 8, 8},
		{"batching off", sched.Options{Wait: -1, PrefillChunk: 64, SharedChunk: 4}, 64, 64},
	}
	ctx := context.Background()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := markov.New(markov.Config{Vocab: 5, Order: 1, Seed: 1})
			require.NoError(t, err)
			m := sched.New(c, tt.opts)
			prefill, err := m.NewSequence(ctx)
			require.NoError(t, err)
			defer prefill.Close()
			stream, err := m.NewSequence(ctx)
			require.NoError(t, err)
			assert.Equal(t, tt.alone, m.Chunk(prefill), "beside an open sequence that streams nothing")
			require.NoError(t, stream.Forward(ctx, batch.Batch{Tokens: []int32{1}, Outputs: []int32{0}}, make([]float32, 5)))
			assert.Equal(t, tt.shared, m.Chunk(prefill), "beside a streaming sequence")
			assert.Equal(t, tt.alone, m.Chunk(stream), "the streaming sequence itself, alone")
			require.NoError(t, stream.Close())
			assert.Equal(t, tt.alone, m.Chunk(prefill), "alone again")
		})
	}
}
