package safetensors

import (
	"bytes"
	"io"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWriteDir writes tensors, some streamed, as one file and as shards, and reads
// them back through OpenDir: the same names, types, shapes and bytes.
func TestWriteDir(t *testing.T) {
	streamed := bytes.Repeat([]byte{7, 1, 2, 3}, 24)
	entries := []Entry{
		{Name: "a", TypeName: "F16", Shape: []int64{2, 3}, Data: []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}},
		{Name: "b", TypeName: "I32", Shape: []int64{4, 6}, Size: int64(len(streamed)),
			WriteTo: func(w io.Writer) error { _, err := w.Write(streamed); return err }},
		{Name: "c", TypeName: "I64", Shape: []int64{2}, Data: make([]byte, 16)},
	}
	for _, c := range []struct {
		name      string
		shard     int64
		wantFiles int
	}{
		{"one file", 1 << 20, 1},
		{"shards", 100, 4}, // a, b (over the size alone), c, and the index
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			files, err := WriteDir(dir, entries, c.shard, map[string]string{"format": "pt"})
			require.NoError(t, err)
			assert.Len(t, files, c.wantFiles)
			s, err := OpenDir(dir)
			require.NoError(t, err)
			defer s.Close()
			assert.Equal(t, []string{"a", "b", "c"}, s.Names())
			for _, e := range entries {
				got, ok := s.Tensor(e.Name)
				require.True(t, ok, e.Name)
				assert.Equal(t, e.TypeName, got.TypeName)
				assert.Equal(t, e.Shape, got.Shape)
				want := e.Data
				if want == nil {
					want = streamed
				}
				assert.Equal(t, want, got.Data)
			}
			if c.wantFiles > 1 {
				assert.FileExists(t, filepath.Join(dir, "model.safetensors.index.json"))
			}
		})
	}
}

func TestWriteErrors(t *testing.T) {
	short := func(w io.Writer) error { _, err := w.Write([]byte{1}); return err }
	for _, c := range []struct {
		name string
		e    []Entry
		want string
	}{
		{"size", []Entry{{Name: "x", TypeName: "F32", Shape: []int64{3}, Data: make([]byte, 8)}}, `tensor "x": 8 bytes for shape [3] of F32 (want 12)`},
		{"type", []Entry{{Name: "x", TypeName: "Q4", Shape: []int64{3}, Data: make([]byte, 8)}}, `unknown type "Q4"`},
		{"twice", []Entry{{Name: "x", TypeName: "I8", Shape: []int64{1}, Data: []byte{1}}, {Name: "x", TypeName: "I8", Shape: []int64{1}, Data: []byte{1}}}, `"x" given twice`},
		{"short stream", []Entry{{Name: "x", TypeName: "I8", Shape: []int64{4}, Size: 4, WriteTo: short}}, `wrote 1 bytes, want 4`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := WriteDir(t.TempDir(), c.e, 1<<20, nil)
			assert.ErrorContains(t, err, c.want)
		})
	}
}
