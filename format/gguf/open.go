package gguf

import (
	"fmt"

	"github.com/specula/specula/format/mmap"
)

// Open memory-maps the GGUF file at path read-only and parses it. Where memory
// mapping is not available the file is read into memory instead. The caller must
// Close the File when done with it and with every slice that Data returned.
func Open(path string) (*File, error) {
	data, unmap, err := mmap.Map(path)
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
