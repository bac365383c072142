package kvcache

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// rss returns the resident memory of the process in bytes, from /proc/self/status.
func rss(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	require.NoError(t, err)
	for l := range strings.Lines(string(b)) {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "VmRSS:" && f[2] == "kB" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			require.NoError(t, err)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS line in /proc/self/status")
	return 0
}

// garbage keeps earlier allocations reachable until the test drops them.
var garbage [][]byte

// TestLazyMemory: making a pool does not make its budget resident, also after the
// heap has recycled memory (when one budget-sized allocation would be zeroed in
// full); only the blocks that sequences take are.
func TestLazyMemory(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/self/status")
	}
	if testing.Short() {
		t.Skip("makes a 512 MiB pool")
	}
	for range 200 {
		garbage = append(garbage, make([]byte, 100<<10))
	}
	garbage = nil
	runtime.GC()

	before := rss(t)
	p, err := NewPool(Config{Layers: 24, KVHeads: 2, HeadDim: 64, Budget: 512 << 20})
	require.NoError(t, err)
	made := rss(t)
	require.Less(t, made-before, int64(16<<20), "NewPool made %d bytes of a 512 MiB budget resident", made-before)
	st := p.Stats()
	require.Equal(t, int64(0), st.ResidentBytes)

	// 64 positions take 4 blocks of 384 KiB.
	s := p.NewSeq()
	defer s.Close()
	require.NoError(t, s.Grow(64))
	for pos := range 64 {
		for l := range 24 {
			for h := range 2 {
				k, v := s.Row(l, h, pos)
				k[0], v[0] = 1, 1
			}
		}
	}
	require.Equal(t, 4*st.BlockBytes, p.Stats().ResidentBytes)
	require.Less(t, rss(t)-before, int64(24<<20))

	// Freed blocks keep their memory and are handed out again first.
	require.NoError(t, s.Truncate(0))
	require.NoError(t, s.Grow(64))
	require.Equal(t, 4*st.BlockBytes, p.Stats().ResidentBytes)
	runtime.KeepAlive(p)
}
