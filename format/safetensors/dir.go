package safetensors

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// The file names of a Hugging Face model directory.
const (
	singleName = "model.safetensors"
	indexName  = "model.safetensors.index.json"
)

// maxIndex is the largest shard index accepted, in bytes.
const maxIndex = 100 << 20

// Set is the tensors of a model directory, from one file or several shards. It is
// read-only and safe for concurrent use, except that Close must not run at the same time
// as anything else.
type Set struct {
	files  []*File
	paths  []string           // paths of files, in the same order
	byName map[string]*Tensor // every tensor of every file
	from   map[string]string  // tensor name → path of the file that holds it
	names  []string           // keys of byName, sorted
}

// Mapped reports whether every file of the set is memory-mapped (see File.Mapped).
func (s *Set) Mapped() bool {
	for _, f := range s.files {
		if !f.Mapped() {
			return false
		}
	}
	return true
}

// OpenDir opens the safetensors weights of a Hugging Face model directory. When
// dir/model.safetensors.index.json exists, its "weight_map" (tensor name → shard file name)
// lists the shards: each is opened once, every tensor the index lists must be in the shard
// it names, and shard names must be plain file names inside dir. Otherwise
// dir/model.safetensors is opened. Tensors that a shard holds beyond those the index lists
// are kept; a tensor held by two shards is an error.
func OpenDir(dir string) (*Set, error) {
	indexPath := filepath.Join(dir, indexName)
	weights, err := readIndex(indexPath)
	if errors.Is(err, fs.ErrNotExist) {
		return openSet([]string{filepath.Join(dir, singleName)})
	}
	if err != nil {
		return nil, err
	}
	var shards []string
	for _, name := range weights {
		if err := checkShardName(name); err != nil {
			return nil, fmt.Errorf("safetensors: %s: %w", indexPath, err)
		}
		shards = append(shards, name)
	}
	slices.Sort(shards)
	shards = slices.Compact(shards)
	paths := make([]string, len(shards))
	for i, name := range shards {
		paths[i] = filepath.Join(dir, name)
	}
	s, err := openSet(paths)
	if err != nil {
		return nil, err
	}
	byShard := make(map[string]*File, len(shards))
	for i, name := range shards {
		byShard[name] = s.files[i]
	}
	for _, tensor := range slices.Sorted(maps.Keys(weights)) {
		shard := weights[tensor]
		if _, ok := byShard[shard].Tensor(tensor); !ok {
			s.Close()
			return nil, fmt.Errorf("safetensors: %s: tensor %q is not in its shard %s", indexPath, tensor, shard)
		}
	}
	return s, nil
}

// openSet opens the files at paths; a tensor may be in only one of them.
func openSet(paths []string) (*Set, error) {
	from := map[string]string{} // tensor name → path of its file
	s := &Set{paths: paths, byName: map[string]*Tensor{}, from: from}
	for _, path := range paths {
		f, err := Open(path)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.files = append(s.files, f)
		for _, t := range f.tensors {
			if other, dup := from[t.Name]; dup {
				s.Close()
				return nil, fmt.Errorf("safetensors: tensor %q is in both %s and %s", t.Name, other, path)
			}
			from[t.Name] = path
			s.byName[t.Name] = t
			s.names = append(s.names, t.Name)
		}
	}
	slices.Sort(s.names)
	return s, nil
}

// readIndex reads the weight_map of a shard index.
func readIndex(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxIndex+1))
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	if len(data) > maxIndex {
		return nil, fmt.Errorf("safetensors: %s: index is over the %d-byte limit", path, maxIndex)
	}
	weights, err := decodeIndex(data)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %s: %w", path, err)
	}
	return weights, nil
}

// decodeIndex decodes the weight_map of an index, rejecting keys given twice.
func decodeIndex(data []byte) (map[string]string, error) {
	var weights map[string]string
	err := decodeDocument(data, func(s *scanner, key []byte) error {
		if string(key) != "weight_map" {
			return s.skip()
		}
		if weights != nil {
			return errors.New("weight_map appears twice")
		}
		m, err := s.strings()
		if err != nil {
			return fmt.Errorf("weight_map: %w", err)
		}
		weights = m
		if weights == nil {
			weights = map[string]string{} // null: seen, but empty
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(weights) == 0 {
		return nil, errors.New("no weight_map, or an empty one")
	}
	return weights, nil
}

// checkShardName accepts only a plain file name, which cannot leave the directory.
func checkShardName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, `/\`) || !filepath.IsLocal(name) {
		return fmt.Errorf("shard %q is not a plain file name in the model directory", name)
	}
	return nil
}

// Tensor returns the tensor with the given name, from whichever file holds it.
func (s *Set) Tensor(name string) (*Tensor, bool) {
	t, ok := s.byName[name]
	return t, ok
}

// Path returns the path of the file that holds the named tensor.
func (s *Set) Path(name string) (string, bool) {
	p, ok := s.from[name]
	return p, ok
}

// Names returns the names of all tensors, sorted.
func (s *Set) Names() []string {
	return slices.Clone(s.names)
}

// Files returns the paths of the files the set was read from, sorted.
func (s *Set) Files() []string {
	return slices.Clone(s.paths)
}

// Close closes every file of the set; the tensors' Data are no longer valid afterwards.
func (s *Set) Close() error {
	var errs []error
	for _, f := range s.files {
		errs = append(errs, f.Close())
	}
	return errors.Join(errs...)
}
