package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/specula/specula/format/gguf"
)

// Entry is one tensor to write: its name, safetensors type name ("F16", "I32", …),
// shape (outermost first) and bytes, given as Data or, for a tensor made while it is
// written, as Size bytes that WriteTo writes.
type Entry struct {
	Name, TypeName string
	Shape          []int64
	Data           []byte
	// Size is the bytes WriteTo writes; ignored when Data is set.
	Size    int64
	WriteTo func(w io.Writer) error
}

// bytes is the entry's data size.
func (e *Entry) bytes() int64 {
	if e.Data != nil {
		return int64(len(e.Data))
	}
	return e.Size
}

// check validates the entry's type and size against its shape.
func (e *Entry) check() error {
	_, bits, ok := lookupType(e.TypeName)
	if !ok {
		return fmt.Errorf("safetensors: tensor %q: unknown type %q", e.Name, e.TypeName)
	}
	n, err := elements(e.Shape)
	if err != nil {
		return fmt.Errorf("safetensors: tensor %q: %w", e.Name, err)
	}
	if want := (n*bits + 7) / 8; e.bytes() != want {
		return fmt.Errorf("safetensors: tensor %q: %d bytes for shape %v of %s (want %d)", e.Name, e.bytes(), e.Shape, e.TypeName, want)
	}
	if e.Data == nil && e.WriteTo == nil && e.Size > 0 {
		return fmt.Errorf("safetensors: tensor %q: neither Data nor WriteTo", e.Name)
	}
	return nil
}

// Write writes one safetensors file of the entries, in their order, with the given
// __metadata__ (none when empty). It streams: an entry's WriteTo runs when its data
// is due, and must write exactly its Size bytes.
func Write(w io.Writer, entries []Entry, metadata map[string]string) error {
	header := map[string]any{}
	if len(metadata) > 0 {
		header["__metadata__"] = metadata
	}
	var off int64
	for i := range entries {
		e := &entries[i]
		if err := e.check(); err != nil {
			return err
		}
		if _, dup := header[e.Name]; dup {
			return fmt.Errorf("safetensors: tensor %q given twice", e.Name)
		}
		shape := e.Shape
		if shape == nil {
			shape = []int64{}
		}
		header[e.Name] = map[string]any{"dtype": e.TypeName, "shape": shape, "data_offsets": []int64{off, off + e.bytes()}}
		off += e.bytes()
	}
	js, err := json.Marshal(header)
	if err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	for len(js)%8 != 0 {
		js = append(js, ' ')
	}
	if _, err := w.Write(binary.LittleEndian.AppendUint64(nil, uint64(len(js)))); err != nil {
		return err
	}
	if _, err := w.Write(js); err != nil {
		return err
	}
	for i := range entries {
		e := &entries[i]
		if e.Data != nil {
			if _, err := w.Write(e.Data); err != nil {
				return err
			}
			continue
		}
		cw := &counter{w: w}
		if err := e.WriteTo(cw); err != nil {
			return fmt.Errorf("safetensors: tensor %q: %w", e.Name, err)
		}
		if cw.n != e.Size {
			return fmt.Errorf("safetensors: tensor %q: wrote %d bytes, want %d", e.Name, cw.n, e.Size)
		}
	}
	return nil
}

// counter counts the bytes written through it.
type counter struct {
	w io.Writer
	n int64
}

func (c *counter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// WriteDir writes the entries into dir as save_pretrained does: shards named
// model-0000i-of-0000n.safetensors of at most shardBytes of data each (a larger
// tensor alone in its shard), in the entries' order, and model.safetensors.index.json
// mapping each tensor to its shard; a single model.safetensors, without an index,
// when everything fits in one. It returns the files written. Each shard is written
// to a temporary file and renamed when complete.
func WriteDir(dir string, entries []Entry, shardBytes int64, metadata map[string]string) ([]string, error) {
	var shards [][]Entry
	var size, total int64
	for i := range entries {
		if err := entries[i].check(); err != nil {
			return nil, err
		}
		b := entries[i].bytes()
		if len(shards) == 0 || size > 0 && size+b > shardBytes {
			shards = append(shards, nil)
			size = 0
		}
		shards[len(shards)-1] = append(shards[len(shards)-1], entries[i])
		size += b
		total += b
	}
	if len(shards) == 0 {
		return nil, fmt.Errorf("safetensors: %s: no tensors to write", dir)
	}
	var files []string
	weights := map[string]string{}
	for i, shard := range shards {
		name := singleName
		if len(shards) > 1 {
			name = fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(shards))
		}
		path := filepath.Join(dir, name)
		if err := gguf.WriteFile(path, func(w io.Writer) error { return Write(w, shard, metadata) }); err != nil {
			return files, fmt.Errorf("safetensors: %w", err)
		}
		files = append(files, path)
		for _, e := range shard {
			weights[e.Name] = name
		}
	}
	if len(shards) == 1 {
		return files, nil
	}
	js, err := json.MarshalIndent(map[string]any{"metadata": map[string]any{"total_size": total}, "weight_map": weights}, "", "  ")
	if err != nil {
		return files, fmt.Errorf("safetensors: %w", err)
	}
	path := filepath.Join(dir, indexName)
	if err := os.WriteFile(path, append(js, '\n'), 0o644); err != nil {
		return files, fmt.Errorf("safetensors: %w", err)
	}
	return append(files, path), nil
}
