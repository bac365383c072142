package gpu

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/specula/specula/backend"
	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/format/hfquant"
	"github.com/specula/specula/format/safetensors"
	"github.com/specula/specula/internal/sharedtest"
)

// TestExpandF8 takes a real FP8 layer of gocoder-s-fp8 as the loader gives it
// (F8_E4M3_B128): the device converts it at load to F32 of exactly its decoded values,
// leaves the other parts of the matrix alone, and takes the matrix.
func TestExpandF8(t *testing.T) {
	dir := sharedtest.Path(t, "models", "gocoder-s-fp8")
	s, err := hfquant.ReadConfig(dir)
	require.NoError(t, err)
	set, err := safetensors.OpenDir(dir)
	require.NoError(t, err)
	defer set.Close()
	p, err := s.Load(set, "model.layers.0.mlp.gate_proj")
	require.NoError(t, err)
	require.Equal(t, dtype.F8_E4M3_B128, p.Type)
	f8 := backend.Tensor{Name: "gate", Type: p.Type, Rows: p.Rows, Cols: p.Cols, Data: p.Data}
	other := backend.Tensor{Name: "up", Type: dtype.F32, Rows: 3, Cols: p.Cols, Data: make([]byte, 12*p.Cols)}
	parts := []backend.Tensor{f8, other}
	got, err := deviceTypes(parts)
	require.NoError(t, err)
	require.Equal(t, dtype.F8_E4M3_B128, parts[0].Type, "the caller's parts are not changed")
	vals := make([]float32, p.Rows*p.Cols)
	require.NoError(t, dtype.Dequantize(p.Type, p.Data, vals))
	require.Equal(t, dtype.F32, got[0].Type)
	require.Equal(t, bytesOf(vals), got[0].Data)
	require.Equal(t, other, got[1])

	sh := testShape(backend.RopeHalf)
	hb, err := NewBackend(HostDevice(), sh, BackendOptions{})
	require.NoError(t, err)
	defer hb.Close()
	m, err := hb.Matrix(f8)
	require.NoError(t, err)
	require.Equal(t, p.Rows, m.Rows())
	require.Equal(t, int64(4*p.Rows*p.Cols), m.Bytes())

	bad := f8
	bad.Data = bad.Data[:len(bad.Data)-1]
	_, err = hb.Matrix(bad)
	require.ErrorContains(t, err, `cuda: tensor "gate"`)
}

// TestZ128AsQ8_0 takes a real AWQ layer of gocoder-m-awq as the loader gives it
// (Q4_Z128, groups of 128): the device converts it at load to its exact Q8_0 copy
// (dtype.ZToQ8_0), whose values are the layer's bit for bit, and takes the matrix.
func TestZ128AsQ8_0(t *testing.T) {
	dir := sharedtest.Path(t, "models", "gocoder-m-awq")
	s, err := hfquant.ReadConfig(dir)
	require.NoError(t, err)
	set, err := safetensors.OpenDir(dir)
	require.NoError(t, err)
	defer set.Close()
	p, err := s.Load(set, "model.layers.0.mlp.gate_proj")
	require.NoError(t, err)
	require.Equal(t, dtype.Q4_Z128, p.Type)
	z := backend.Tensor{Name: "gate", Type: p.Type, Rows: p.Rows, Cols: p.Cols, Data: p.Data}
	got, err := deviceTypes([]backend.Tensor{z})
	require.NoError(t, err)
	require.Equal(t, dtype.Q8_0, got[0].Type)
	want, have := make([]float32, p.Rows*p.Cols), make([]float32, p.Rows*p.Cols)
	require.NoError(t, dtype.Dequantize(p.Type, p.Data, want))
	require.NoError(t, dtype.Dequantize(dtype.Q8_0, got[0].Data, have))
	require.Equal(t, bytesOf(want), bytesOf(have))

	hb, err := NewBackend(HostDevice(), testShape(backend.RopeHalf), BackendOptions{})
	require.NoError(t, err)
	defer hb.Close()
	m, err := hb.Matrix(z)
	require.NoError(t, err)
	require.Equal(t, p.Rows, m.Rows())
	require.Equal(t, int64(p.Rows*p.Cols/32*34), m.Bytes())

	bad := z
	bad.Data = bad.Data[:len(bad.Data)-1]
	_, err = hb.Matrix(bad)
	require.ErrorContains(t, err, `cuda: tensor "gate"`)
}
