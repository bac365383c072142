// Package sharedtest finds the project's shared data for tests — real models,
// tokenizers, prompts — which lives beside the checkout in ../shared and is absent from
// a user's fresh clone. Tests that need it skip with a message naming the missing file.
package sharedtest

import (
	"os"
	"path/filepath"
	"testing"
)

// Root returns the shared data directory, or "" when there is none. The environment
// variable SPECULA_SHARED overrides the search; otherwise it is the directory "shared"
// beside the module root.
func Root() string {
	if d := os.Getenv("SPECULA_SHARED"); d != "" {
		return d
	}
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			d := filepath.Join(dir, "..", "shared")
			if st, err := os.Stat(d); err == nil && st.IsDir() {
				return d
			}
			return ""
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// Path returns the path of a shared file (elements joined below the root), or skips
// the test when it is absent.
func Path(t testing.TB, elem ...string) string {
	t.Helper()
	root := Root()
	p := filepath.Join(append([]string{root}, elem...)...)
	if root == "" {
		t.Skipf("shared data not found (looked for ../shared beside the module): %s is needed", filepath.Join(elem...))
	}
	if _, err := os.Stat(p); err != nil {
		t.Skipf("shared file %s is absent: %v", p, err)
	}
	return p
}
