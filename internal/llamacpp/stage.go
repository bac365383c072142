package llamacpp

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Runnable returns a folder holding the files of dir (a llama.cpp bin folder) with
// their library links whole: dir itself when they are, else stage, made from a copy
// of dir's files with the lost links — symbolic links that a copy of the shared data
// turned into small files naming their targets (libggml.so.0 → libggml.so.0.9.4) —
// made links again, so that the loader finds the libraries.
func Runnable(dir, stage string) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	broken := map[string]string{} // link name → target
	for _, e := range entries {
		if target, ok := lostLink(dir, e); ok {
			broken[e.Name()] = target
		}
	}
	if len(broken) == 0 {
		return dir, nil
	}
	if err := stageFolder(dir, stage, entries, broken); err != nil {
		return "", fmt.Errorf("staging %s with its library links: %w", dir, err)
	}
	return stage, nil
}

// lostLink reports whether e is a small regular file whose whole content names
// another file of dir: a symbolic link that a copy turned into a file.
func lostLink(dir string, e os.DirEntry) (string, bool) {
	info, err := e.Info()
	if err != nil || !info.Mode().IsRegular() || info.Size() == 0 || info.Size() > 255 {
		return "", false
	}
	b, err := os.ReadFile(filepath.Join(dir, e.Name()))
	if err != nil {
		return "", false
	}
	target := strings.TrimSpace(string(b))
	if target == "" || strings.ContainsAny(target, "/\n\x00") || target == e.Name() {
		return "", false
	}
	if _, err := os.Stat(filepath.Join(dir, target)); err != nil {
		return "", false
	}
	return target, true
}

// stageFolder copies dir's files into stage, making the broken links links again.
func stageFolder(dir, stage string, entries []os.DirEntry, broken map[string]string) error {
	if err := os.RemoveAll(stage); err != nil {
		return err
	}
	if err := os.MkdirAll(stage, 0o755); err != nil {
		return err
	}
	for _, e := range entries {
		dst := filepath.Join(stage, e.Name())
		if target, ok := broken[e.Name()]; ok {
			if err := os.Symlink(target, dst); err != nil {
				return err
			}
			continue
		}
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(dst, b, 0o755); err != nil {
			return err
		}
	}
	return nil
}
