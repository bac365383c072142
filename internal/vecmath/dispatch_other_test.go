//go:build !amd64 || purego

package vecmath

import "testing"

// TestDispatch: off amd64, and under -tags purego on it, the helpers run their Go
// twins.
func TestDispatch(t *testing.T) {
	if hasAVX2 || ranAssembly() {
		t.Fatalf("hasAVX2 %v, assembly ran %v; want the Go twins", hasAVX2, ranAssembly())
	}
}
