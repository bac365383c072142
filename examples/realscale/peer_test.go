package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRunnableLcbench: a folder whose library links were copied as small files naming
// their targets is staged with the links made again; an intact folder is used as it
// is; a folder that is not there is an error.
func TestRunnableLcbench(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o755))
	}
	write("lcbench", "#!/bin/sh\n")
	write("libggml.so.0.9.4", string(make([]byte, 300)))
	bin := filepath.Join(dir, "lcbench")
	got, err := runnableLcbench(bin)
	require.NoError(t, err)
	assert.Equal(t, bin, got, "nothing to restage")

	write("libggml.so.0", "libggml.so.0.9.4")
	write("libggml.so", "libggml.so.0")
	write("notes.txt", "not a file here")
	got, err = runnableLcbench(bin)
	require.NoError(t, err)
	assert.NotEqual(t, bin, got)
	stage := filepath.Dir(got)
	for link, target := range map[string]string{"libggml.so.0": "libggml.so.0.9.4", "libggml.so": "libggml.so.0"} {
		l, err := os.Readlink(filepath.Join(stage, link))
		require.NoError(t, err, link)
		assert.Equal(t, target, l)
	}
	b, err := os.ReadFile(filepath.Join(stage, "notes.txt"))
	require.NoError(t, err)
	assert.Equal(t, "not a file here", string(b), "a small file naming nothing stays a file")

	_, err = runnableLcbench(filepath.Join(dir, "nowhere", "lcbench"))
	assert.Error(t, err)
}
