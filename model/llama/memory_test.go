package llama

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/backend"
	"github.com/specula/specula/backend/cpu"
	"github.com/specula/specula/format/dtype"
)

// holdsFull reports whether m's key/value pools hold one sequence at full context:
// every position in the global layers' (or the only) pool, in the sliding layers' the
// most their books keep.
func holdsFull(m *Model) bool {
	ctx := m.cfg.ContextLength
	pools := m.KVPools()
	if pools[0].Blocks*pools[0].BlockSize < ctx {
		return false
	}
	return len(pools) == 1 || pools[1].Blocks*pools[1].BlockSize >= min(ctx, m.cfg.slidingHeld())
}

// TestMinKVBudget: the budget MinKVBudget states holds one sequence at full context,
// and one byte less does not (a pool comes out a block short, or the sliding pool gets
// none) — for one pool whose context is or is not a multiple of the block, and for
// the two pools of a model whose sliding layers sit beside global ones, where the
// budget is shared between them.
func TestMinKVBudget(t *testing.T) {
	gemma := slidingConfigs(64)["gemma3"]
	gemma.ContextLength = 1000
	mistral := slidingConfigs(64)["mistral"]
	for _, c := range []struct {
		name  string
		cfg   Config
		pools int
	}{
		{"one pool, 256 positions", tinyConfig(RopeInterleaved, false), 1},
		{"one pool, 250 positions", func() Config { c := tinyConfig(RopeInterleaved, false); c.ContextLength = 250; return c }(), 1},
		{"every layer slides", mistral, 1},
		{"sliding beside global", gemma, 2},
	} {
		tensors := randomTensorsOf(t, c.cfg, dtype.F32, 1)
		open := func(budget int64) (*Model, error) {
			m, err := build(tensors, cpu.Factory(1), Options{KVBudget: budget})
			if err == nil {
				t.Cleanup(func() { _ = m.Close() })
			}
			return m, err
		}
		probe, err := open(64 << 20)
		require.NoError(t, err, c.name)
		require.Len(t, probe.KVPools(), c.pools, c.name)
		least := probe.MinKVBudget(c.cfg.ContextLength)
		t.Logf("%s: %d bytes (%d a position)", c.name, least, c.cfg.KVBytesPerPosition())
		perPosition := c.cfg.KVBytesPerPosition()
		assert.GreaterOrEqual(t, least, int64(c.cfg.ContextLength)*perPosition/int64(1+c.pools), c.name)

		m, err := open(least)
		require.NoError(t, err, c.name)
		assert.True(t, holdsFull(m), "%s: %d bytes hold a full context", c.name, least)
		assert.Equal(t, least, m.MinKVBudget(c.cfg.ContextLength), "%s: the figure does not depend on the budget", c.name)
		if m, err := open(least - 1); err == nil {
			assert.False(t, holdsFull(m), "%s: %d bytes do not", c.name, least-1)
		}
	}
}

// TestWeightFootprint: on the CPU every weight is a copy (nothing mapped from the
// file), matrices of 2 MiB or more lie in anonymous mappings of whole 2 MiB pages and
// smaller ones on the heap, and the footprint is WeightBytes with the large matrices
// rounded up.
func TestWeightFootprint(t *testing.T) {
	cfg := tinyConfig(RopeInterleaved, false)
	cfg.Vocab = 8192 // an embedding of 8192 × 64 float32: 2 MiB
	m := randomModel(t, cfg, dtype.F32, 1, cpu.Factory(1), Options{})
	f := m.WeightFootprint()
	assert.Zero(t, f.File+f.Device)
	embed := backend.FootprintOf(m.embed)
	assert.Equal(t, int64(2<<20), embed.Bytes())
	if embed.Anon > 0 { // Linux
		assert.Zero(t, f.Anon%(2<<20), "whole huge pages")
	}
	assert.GreaterOrEqual(t, f.Bytes(), m.WeightBytes())
	assert.Less(t, f.Bytes(), m.WeightBytes()+2<<20)
	assert.False(t, m.KVOnDevice())
}
