package gguf

import (
	"fmt"
	"os"
)

// Open memory-maps the GGUF file at path read-only and parses it. Where memory
// mapping is not available the file is read into memory instead. The caller must
// Close the File when done with it and with every slice that Data returned.
func Open(path string) (*File, error) {
	data, unmap, err := mapFile(path)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	f, err := parse(path, data)
	if err != nil {
		if unmap != nil {
			_ = unmap()
		}
		return nil, err
	}
	f.unmap = unmap
	return f, nil
}

// readFile reads the whole file at path; it is the fallback when mapping fails.
func readFile(path string) ([]byte, func() error, error) {
	data, err := os.ReadFile(path)
	return data, nil, err
}
