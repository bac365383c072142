//go:build !unix

package gguf

// mapFile reads the file at path: this system has no memory mapping through
// golang.org/x/sys/unix.
func mapFile(path string) ([]byte, func() error, error) {
	return readFile(path)
}
