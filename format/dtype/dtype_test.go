package dtype

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLayouts(t *testing.T) {
	tests := []struct {
		t           DType
		name        string
		block, size int
	}{
		{F32, "F32", 1, 4}, {F16, "F16", 1, 2}, {BF16, "BF16", 1, 2},
		{Q8_0, "Q8_0", 32, 34}, {Q4_0, "Q4_0", 32, 18},
		{Q4_K, "Q4_K", 256, 144}, {Q6_K, "Q6_K", 256, 210}, {Q8_K, "Q8_K", 256, 292},
		{Q4_Z, "Q4_Z", 32, 20}, {Q4_Z128, "Q4_Z128", 128, 68},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.name, tt.t.String())
		assert.Equal(t, tt.block, tt.t.BlockSize())
		assert.Equal(t, tt.size, tt.t.BlockBytes())
		p, err := Parse(tt.name)
		require.NoError(t, err)
		assert.Equal(t, tt.t, p)
	}
	n, err := Q8_0.Bytes(64)
	require.NoError(t, err)
	assert.Equal(t, int64(68), n)
	_, err = Q8_0.Bytes(33)
	assert.ErrorContains(t, err, "whole number")
	_, err = DType(99).Bytes(1)
	assert.ErrorContains(t, err, "unknown type 99")
	_, err = F32.Bytes(-1)
	assert.Error(t, err)
	_, err = F64.Bytes(1 << 62)
	assert.ErrorContains(t, err, "overflow")
	assert.False(t, DType(16).Known())
	assert.Equal(t, "type(16)", DType(16).String())
	_, err = Parse("Q9_9")
	assert.Error(t, err)
	assert.True(t, Q4_Z.Private())
	assert.False(t, Q4_1.Private())
	assert.True(t, F8_E4M3_B128.Private())
	assert.True(t, Q4_Z128.Private())
	assert.False(t, Q4_Z128.GGML())
	assert.False(t, DType(1003).Known())
}
