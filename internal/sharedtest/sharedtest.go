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
	dir, ok := findModuleRoot()
	if !ok {
		return ""
	}
	d := filepath.Join(dir, "..", "shared")
	if st, err := os.Stat(d); err == nil && st.IsDir() {
		return d
	}
	return ""
}

// findModuleRoot returns the directory of the go.mod above the working directory.
func findModuleRoot() (string, bool) {
	dir, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
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
