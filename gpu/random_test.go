package gpu

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/format/dtype"
)

// TestHostFill checks the fill operation: F32 values uniform in offset ± scale, F16
// and BF16 their roundings, and Q8_0 exactly dtype.QuantizeQ8_0 of the F32 values.
func TestHostFill(t *testing.T) {
	h := &hostOps{}
	const n = 4096
	const seed, scale, offset = 42, 0.25, 1.0
	alloc := func(bytes int64) devptr {
		p, err := h.alloc(bytes)
		require.NoError(t, err)
		return p
	}
	pf, ph, pb, pq := alloc(4*n), alloc(2*n), alloc(2*n), alloc(n/32*34)
	require.NoError(t, h.fill(pf, dtype.F32, n, seed, scale, offset))
	require.NoError(t, h.fill(ph, dtype.F16, n, seed, scale, offset))
	require.NoError(t, h.fill(pb, dtype.BF16, n, seed, scale, offset))
	require.NoError(t, h.fill(pq, dtype.Q8_0, n, seed, scale, offset))
	f := make([]float32, n)
	require.NoError(t, h.download(bytesOf(f), pf))
	half, bf, q := make([]byte, 2*n), make([]byte, 2*n), make([]byte, n/32*34)
	require.NoError(t, h.download(half, ph))
	require.NoError(t, h.download(bf, pb))
	require.NoError(t, h.download(q, pq))
	var mean float64
	for i, v := range f {
		require.True(t, v >= offset-scale && v < offset+scale, "value %d = %v", i, v)
		mean += float64(v) / n
		require.Equal(t, dtype.F32ToF16(v), binary.LittleEndian.Uint16(half[2*i:]))
		require.Equal(t, dtype.F32ToBF16(v), binary.LittleEndian.Uint16(bf[2*i:]))
	}
	assert.InDelta(t, offset, mean, 0.02)
	want := make([]byte, len(q))
	dtype.QuantizeQ8_0(f, want)
	assert.Equal(t, want, q)
	assert.Error(t, h.fill(pq, dtype.Q8_0, 33, seed, scale, offset))
	assert.Error(t, h.fill(pq, dtype.Q4_0, 32, seed, scale, offset))
}
