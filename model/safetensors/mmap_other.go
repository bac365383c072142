//go:build !unix

package safetensors

import "os"

// load reads the file at path into memory: memory mapping is only used on unix systems.
// The release function is nil as there is nothing to release.
func load(path string) ([]byte, func() error, error) {
	data, err := os.ReadFile(path)
	return data, nil, err
}
