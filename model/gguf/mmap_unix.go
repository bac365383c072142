//go:build unix

package gguf

import (
	"fmt"
	"math"
	"os"

	"golang.org/x/sys/unix"
)

// mapFile maps the file at path read-only and returns its bytes and the function that
// unmaps them. It falls back to reading the file when it cannot be mapped.
func mapFile(path string) ([]byte, func() error, error) {
	fd, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer fd.Close()
	st, err := fd.Stat()
	if err != nil {
		return nil, nil, err
	}
	size := st.Size()
	if size == 0 || !st.Mode().IsRegular() {
		return readFile(path)
	}
	if size > math.MaxInt {
		return nil, nil, fmt.Errorf("%s: %d bytes is too large to map", path, size)
	}
	data, err := unix.Mmap(int(fd.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return readFile(path)
	}
	return data, func() error { return unix.Munmap(data) }, nil
}
