//go:build unix

package safetensors

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// load maps the file at path read-only. It falls back to reading the file into memory
// when the file cannot be mapped (an empty file, a pipe, a file system without mmap). The
// release function, nil when there is nothing to release, unmaps the file.
func load(path string) ([]byte, func() error, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	size := st.Size()
	if size != int64(int(size)) {
		return nil, nil, fmt.Errorf("%s: %d bytes is too large to map", path, size)
	}
	if size > 0 && st.Mode().IsRegular() {
		data, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
		if err == nil {
			return data, func() error { return unix.Munmap(data) }, nil
		}
	}
	data, err := os.ReadFile(path)
	return data, nil, err
}
