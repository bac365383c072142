package gpu

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/format/dtype"
)

// TestHostBackendFaults checks that the host operations turn bad addresses and
// out-of-range rows, past the Backend's checks, into errors rather than panics.
func TestHostBackendFaults(t *testing.T) {
	h := &hostOps{}
	p, err := h.alloc(64)
	require.NoError(t, err)
	assert.Error(t, h.upload(p+60, make([]byte, 8)), "write past the end")
	assert.Error(t, h.download(make([]byte, 4), p+(1<<allocShift)), "no allocation")
	assert.Error(t, h.free(p+4), "free inside an allocation")
	w := wtensor{typ: dtype.Q8_0, rows: 2, cols: 32}
	wp, err := h.alloc(w.rowBytes() * 2)
	require.NoError(t, err)
	w.p = wp
	tok, err := h.alloc(4)
	require.NoError(t, err)
	require.NoError(t, h.upload(tok, bytesOf([]int32{7})))
	assert.Error(t, h.embed(p, w, tok, 1), "row 7 of 2")
	assert.Error(t, h.matmul(p, 2, p, 1, w, false), "output past the end")
	assert.Error(t, h.embed(p, w, tok+4, 1), "token past its allocation")
	// The same calls with room for their outputs succeed: the errors above are the
	// faults, not the arguments.
	out, err := h.alloc(4 * 32)
	require.NoError(t, err)
	require.NoError(t, h.upload(tok, bytesOf([]int32{1})))
	assert.NoError(t, h.embed(out, w, tok, 1))
	assert.NoError(t, h.matmul(p, 2, out, 1, w, false))
	require.NoError(t, h.free(out))
	require.NoError(t, h.free(p))
	assert.Error(t, h.free(p), "freed twice")
	_, err = h.alloc(-1)
	assert.Error(t, err)
}
