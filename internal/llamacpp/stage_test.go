package llamacpp

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRunnable: a folder whose library links were copied as small files naming their
// targets is staged with the links made again; an intact folder is used as it is; a
// folder that is not there is an error.
func TestRunnable(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o755))
	}
	write("lcbench", "#!/bin/sh\n")
	write("libggml.so.0.9.4", string(make([]byte, 300)))
	stage := filepath.Join(t.TempDir(), "stage")
	got, err := Runnable(dir, stage)
	require.NoError(t, err)
	assert.Equal(t, dir, got, "nothing to restage")

	write("libggml.so.0", "libggml.so.0.9.4")
	write("libggml.so", "libggml.so.0")
	write("notes.txt", "not a file here")
	got, err = Runnable(dir, stage)
	require.NoError(t, err)
	assert.Equal(t, stage, got)
	for link, target := range map[string]string{"libggml.so.0": "libggml.so.0.9.4", "libggml.so": "libggml.so.0"} {
		l, err := os.Readlink(filepath.Join(stage, link))
		require.NoError(t, err, link)
		assert.Equal(t, target, l)
	}
	b, err := os.ReadFile(filepath.Join(stage, "notes.txt"))
	require.NoError(t, err)
	assert.Equal(t, "not a file here", string(b), "a small file naming nothing stays a file")

	b, err = os.ReadFile(filepath.Join(stage, "lcbench"))
	require.NoError(t, err)
	assert.Equal(t, "#!/bin/sh\n", string(b), "the other files are copied")

	_, err = Runnable(filepath.Join(dir, "nowhere"), stage)
	assert.Error(t, err)
}
