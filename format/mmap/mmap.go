// Package mmap maps model files into memory read-only, the one way the format
// packages read large files: the operating system pages weights in as they are used
// and shares them between processes, and nothing is copied at open.
package mmap

import "os"

// Map returns the bytes of the file at path, mapped read-only where the system and the
// file allow it (a regular, non-empty file on a unix system), and read into memory
// otherwise (a pipe, an empty file, a file system without mmap). release, nil when
// there is nothing to release, unmaps the bytes; they must not be used after it.
func Map(path string) (data []byte, release func() error, err error) {
	data, release, err = mapFile(path)
	if err != nil || data != nil {
		return data, release, err
	}
	data, err = os.ReadFile(path)
	return data, nil, err
}
