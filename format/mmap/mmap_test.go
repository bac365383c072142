package mmap

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestMap(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"file", bytes.Repeat([]byte("specula"), 1000)},
		{"empty", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name)
			if err := os.WriteFile(path, tc.data, 0o644); err != nil {
				t.Fatal(err)
			}
			got, release, err := Map(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tc.data) {
				t.Fatalf("mapped %d bytes, want %d", len(got), len(tc.data))
			}
			if release != nil {
				if err := release(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	if _, _, err := Map(filepath.Join(dir, "missing")); !os.IsNotExist(err) {
		t.Fatalf("missing file: err = %v, want not-exist", err)
	}
}
