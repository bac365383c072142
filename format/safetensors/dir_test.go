package safetensors

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// writeFile writes data to dir/name.
func writeFile(t *testing.T, dir, name string, data []byte) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(dir, name), data, 0o644))
}

// writeIndex writes dir/model.safetensors.index.json with the given weight map.
func writeIndex(t *testing.T, dir string, weights map[string]string) {
	t.Helper()
	js, err := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": 100}, "weight_map": weights})
	require.NoError(t, err)
	writeFile(t, dir, indexName, js)
}

// shardedDir writes two shards and their index to a new directory. The second shard
// holds a tensor that the index does not list.
func shardedDir(t *testing.T) string {
	dir := t.TempDir()
	writeFile(t, dir, "model-00001-of-00002.safetensors", build(t, []testTensor{
		{"embed", "F32", []int64{2, 2}, seq(0, 16)},
		{"layer.0", "BF16", []int64{3}, seq(16, 6)},
	}, nil))
	writeFile(t, dir, "model-00002-of-00002.safetensors", build(t, []testTensor{
		{"layer.1", "BF16", []int64{3}, seq(32, 6)},
		{"norm", "F32", []int64{1}, seq(48, 4)},
		{"extra", "U8", []int64{2}, seq(60, 2)}, // not in the index: kept
	}, map[string]string{"format": "pt"}))
	writeIndex(t, dir, map[string]string{
		"embed":   "model-00001-of-00002.safetensors",
		"layer.0": "model-00001-of-00002.safetensors",
		"layer.1": "model-00002-of-00002.safetensors",
		"norm":    "model-00002-of-00002.safetensors",
	})
	return dir
}

func TestOpenDirSharded(t *testing.T) {
	dir := shardedDir(t)
	s, err := OpenDir(dir)
	require.NoError(t, err)
	defer s.Close()
	assert.Equal(t, []string{"embed", "extra", "layer.0", "layer.1", "norm"}, s.Names())
	assert.Equal(t, []string{
		filepath.Join(dir, "model-00001-of-00002.safetensors"),
		filepath.Join(dir, "model-00002-of-00002.safetensors"),
	}, s.Files())
	for name, file := range map[string]string{"embed": "model-00001-of-00002.safetensors", "norm": "model-00002-of-00002.safetensors", "extra": "model-00002-of-00002.safetensors"} {
		p, ok := s.Path(name)
		assert.True(t, ok)
		assert.Equal(t, filepath.Join(dir, file), p, name)
	}
	_, ok := s.Path("absent")
	assert.False(t, ok)
	norm, ok := s.Tensor("norm")
	require.True(t, ok)
	assert.Equal(t, seq(48, 4), norm.Data)
	l0, ok := s.Tensor("layer.0")
	require.True(t, ok)
	assert.Equal(t, "BF16", l0.TypeName)
	assert.Equal(t, seq(16, 6), l0.Data)
	_, ok = s.Tensor("nope")
	assert.False(t, ok)
	require.NoError(t, s.Close())
	assert.Nil(t, norm.Data)
}

func TestOpenDirSingle(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, singleName, build(t, []testTensor{{"a", "I32", []int64{2}, seq(0, 8)}}, nil))
	s, err := OpenDir(dir)
	require.NoError(t, err)
	assert.Equal(t, []string{"a"}, s.Names())
	assert.Equal(t, []string{filepath.Join(dir, singleName)}, s.Files())
	require.NoError(t, s.Close())
}

func TestOpenDirErrors(t *testing.T) {
	shard1 := "model-00001-of-00002.safetensors"
	shard2 := "model-00002-of-00002.safetensors"
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  []string
	}{
		{"no model file", func(t *testing.T, dir string) {}, []string{singleName, "no such file"}},
		{"missing shard", func(t *testing.T, dir string) {
			require.NoError(t, os.Remove(filepath.Join(dir, shard2)))
		}, []string{shard2, "no such file"}},
		{"tensor missing from its shard", func(t *testing.T, dir string) {
			writeIndex(t, dir, map[string]string{"embed": shard1, "layer.0": shard2})
		}, []string{indexName, `tensor "layer.0"`, shard2}},
		{"tensor in two shards", func(t *testing.T, dir string) {
			writeFile(t, dir, shard2, build(t, []testTensor{{"embed", "F32", []int64{1}, seq(0, 4)}}, nil))
		}, []string{`tensor "embed"`, shard1, shard2}},
		{"parent directory", func(t *testing.T, dir string) {
			writeIndex(t, dir, map[string]string{"embed": "../" + shard1})
		}, []string{indexName, `"../` + shard1 + `"`, "not a plain file name"}},
		{"dot dot", func(t *testing.T, dir string) {
			writeIndex(t, dir, map[string]string{"embed": ".."})
		}, []string{`".."`, "not a plain file name"}},
		{"subdirectory", func(t *testing.T, dir string) {
			writeIndex(t, dir, map[string]string{"embed": "sub/" + shard1})
		}, []string{`"sub/`, "not a plain file name"}},
		{"absolute", func(t *testing.T, dir string) {
			writeIndex(t, dir, map[string]string{"embed": filepath.Join(dir, shard1)})
		}, []string{"not a plain file name"}},
		{"backslash", func(t *testing.T, dir string) {
			writeIndex(t, dir, map[string]string{"embed": `..\` + shard1})
		}, []string{"not a plain file name"}},
		{"empty name", func(t *testing.T, dir string) {
			writeIndex(t, dir, map[string]string{"embed": ""})
		}, []string{`shard ""`, "not a plain file name"}},
		{"corrupt shard", func(t *testing.T, dir string) {
			writeFile(t, dir, shard2, []byte("garbage!garbage"))
		}, []string{shard2, "header length"}},
		{"index not JSON", func(t *testing.T, dir string) {
			writeFile(t, dir, indexName, []byte(`{"weight_map": `))
		}, []string{indexName}},
		{"index without weight_map", func(t *testing.T, dir string) {
			writeFile(t, dir, indexName, []byte(`{"metadata": {}}`))
		}, []string{indexName, "no weight_map"}},
		{"empty weight_map", func(t *testing.T, dir string) {
			writeFile(t, dir, indexName, []byte(`{"weight_map": {}}`))
		}, []string{indexName, "empty"}},
		{"index is a directory", func(t *testing.T, dir string) {
			require.NoError(t, os.Remove(filepath.Join(dir, indexName)))
			require.NoError(t, os.Mkdir(filepath.Join(dir, indexName), 0o755))
		}, []string{indexName}},
		{"weight_map not strings", func(t *testing.T, dir string) {
			writeFile(t, dir, indexName, []byte(`{"weight_map": {"embed": 1}}`))
		}, []string{indexName, "weight_map", `"embed"`}},
		{"weight_map duplicate", func(t *testing.T, dir string) {
			writeFile(t, dir, indexName, []byte(`{"weight_map": {"embed": "`+shard1+`", "embed": "`+shard2+`"}}`))
		}, []string{indexName, `key "embed" appears twice`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var dir string
			if tc.name == "no model file" {
				dir = t.TempDir()
			} else {
				dir = shardedDir(t)
			}
			tc.setup(t, dir)
			s, err := OpenDir(dir)
			require.Error(t, err)
			assert.Nil(t, s)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}
