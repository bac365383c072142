// Package gguf reads and writes GGUF files, the model format of llama.cpp, versions 2
// and 3.
//
// A GGUF file is a header, typed metadata (key/value pairs such as
// "general.architecture" or the tokenizer's vocabulary), a table of tensors (name,
// shape, type and offset), and then the tensors' data, each aligned. [Open] maps a
// file into memory and parses everything but the data; [File.Data] returns a
// tensor's bytes as a slice of the mapping, so weights are never copied onto the Go
// heap. [Parse] does the same for bytes already in memory, and [Write] writes a file.
//
// Every check is made when the file is opened — magic and version, duplicate keys and
// tensor names, tensor shapes and types (an unknown tensor type is an error then, not
// later), alignment, and that every tensor's data lies inside the file — and an error
// names the file and the key or tensor at fault. No input makes the parser panic or
// allocate much more than the size of the file.
package gguf

import (
	"fmt"

	"github.com/specula/specula/format/dtype"
)

// KeyValue is one metadata entry.
type KeyValue struct {
	Key   string
	Value Value
}

// Tensor describes one tensor of a file.
type Tensor struct {
	// Name is the tensor's name, such as "blk.0.attn_q.weight".
	Name string
	// Type is the element type.
	Type dtype.DType
	// Dims is the shape in ggml order: Dims[0] is the innermost, fastest-varying
	// dimension, the length of a row.
	Dims []int64
	// Offset is where the data starts, relative to the start of the data section.
	Offset int64
	// Size is the data's size in bytes.
	Size int64
}

// Elements is the number of values the tensor holds.
func (t *Tensor) Elements() int64 {
	n := int64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// File is a parsed GGUF file. Its fields are read-only: the lookups index them as
// they were parsed.
type File struct {
	// Version is the format version, 2 or 3.
	Version uint32
	// Alignment is the alignment of tensor data in bytes: general.alignment, or
	// DefaultAlignment when the file does not set it.
	Alignment int
	// DataOffset is where the data section starts in the file.
	DataOffset int64
	// KV is the metadata, in file order.
	KV []KeyValue
	// Tensors are the tensors, in file order.
	Tensors []Tensor

	name        string // for errors: the path, or "<memory>"
	data        []byte // the whole file
	unmap       func() error
	kvIndex     map[string]int
	tensorIndex map[string]int
}

// Mapped reports whether the file's bytes are memory-mapped (rather than read into
// memory, where mapping is not available): the kernel can then drop pages of it that
// are no longer needed, and read them again from the file.
func (f *File) Mapped() bool { return f.unmap != nil }

// Close releases the file's memory mapping, if it has one. Slices returned by Data
// must not be used afterwards. Close is safe to call more than once.
func (f *File) Close() error {
	f.data = nil
	if f.unmap == nil {
		return nil
	}
	unmap := f.unmap
	f.unmap = nil
	if err := unmap(); err != nil {
		return fmt.Errorf("gguf: %s: %w", f.name, err)
	}
	return nil
}

// Data returns the tensor's bytes: a slice of the file's memory, not a copy, which
// must not be modified. It returns nil after Close, or for a tensor whose data does
// not lie inside the file.
func (f *File) Data(t *Tensor) []byte {
	start := f.DataOffset + t.Offset
	if t.Offset < 0 || t.Size < 0 || start < f.DataOffset || start > int64(len(f.data)) || t.Size > int64(len(f.data))-start {
		return nil
	}
	return f.data[start : start+t.Size : start+t.Size]
}

// Tensor returns the tensor with the given name.
func (f *File) Tensor(name string) (*Tensor, bool) {
	if i, ok := f.tensorIndex[name]; ok && i < len(f.Tensors) && f.Tensors[i].Name == name {
		return &f.Tensors[i], true
	}
	for i := range f.Tensors { // a File not made by Parse
		if f.Tensors[i].Name == name {
			return &f.Tensors[i], true
		}
	}
	return nil, false
}

// Value returns the metadata value of key.
func (f *File) Value(key string) (Value, bool) {
	if i, ok := f.kvIndex[key]; ok && i < len(f.KV) && f.KV[i].Key == key {
		return f.KV[i].Value, true
	}
	for _, kv := range f.KV { // a File not made by Parse
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return Value{}, false
}

// Has reports whether the file has metadata for key.
func (f *File) Has(key string) bool {
	_, ok := f.Value(key)
	return ok
}

// get returns the value of key or an error naming the file and key.
func (f *File) get(key string) (Value, error) {
	v, ok := f.Value(key)
	if !ok {
		return Value{}, fmt.Errorf("gguf: %s: key %q not found", f.name, key)
	}
	return v, nil
}

func (f *File) wrongType(key string, v Value, want string) error {
	got := v.Type().String()
	if v.Type() == TypeArray {
		got = "array of " + v.Elem().String()
	}
	return fmt.Errorf("gguf: %s: key %q is %s, want %s", f.name, key, got, want)
}

// String returns the string value of key.
func (f *File) String(key string) (string, error) {
	v, err := f.get(key)
	if err != nil {
		return "", err
	}
	s, ok := v.x.(string)
	if !ok {
		return "", f.wrongType(key, v, "string")
	}
	return s, nil
}

// Uint returns the value of key, an integer of any type that is not negative.
func (f *File) Uint(key string) (uint64, error) {
	v, err := f.get(key)
	if err != nil {
		return 0, err
	}
	u, ok := v.uint64Of()
	if !ok {
		return 0, f.wrongType(key, v, "an integer ≥ 0")
	}
	return u, nil
}

// Int returns the value of key, an integer of any type that fits an int64.
func (f *File) Int(key string) (int64, error) {
	v, err := f.get(key)
	if err != nil {
		return 0, err
	}
	i, ok := v.int64Of()
	if !ok {
		return 0, f.wrongType(key, v, "an integer that fits int64")
	}
	return i, nil
}

// Float returns the value of key, a float32 or float64.
func (f *File) Float(key string) (float64, error) {
	v, err := f.get(key)
	if err != nil {
		return 0, err
	}
	switch x := v.x.(type) {
	case float32:
		return float64(x), nil
	case float64:
		return x, nil
	}
	return 0, f.wrongType(key, v, "float32 or float64")
}

// Bool returns the bool value of key.
func (f *File) Bool(key string) (bool, error) {
	v, err := f.get(key)
	if err != nil {
		return false, err
	}
	b, ok := v.x.(bool)
	if !ok {
		return false, f.wrongType(key, v, "bool")
	}
	return b, nil
}

// Strings returns the value of key, an array of strings. The slice is the File's
// own: do not modify it.
func (f *File) Strings(key string) ([]string, error) {
	v, err := f.get(key)
	if err != nil {
		return nil, err
	}
	s, ok := v.x.([]string)
	if !ok {
		return nil, f.wrongType(key, v, "array of string")
	}
	return s, nil
}

// Float32s returns the value of key, an array of float32. The slice is the File's
// own: do not modify it.
func (f *File) Float32s(key string) ([]float32, error) {
	v, err := f.get(key)
	if err != nil {
		return nil, err
	}
	s, ok := v.x.([]float32)
	if !ok {
		return nil, f.wrongType(key, v, "array of float32")
	}
	return s, nil
}

// Int32s returns the value of key, an array of integers that all fit an int32. An
// array of int32 is the File's own slice (do not modify it); an array of another
// integer type is converted into a new one.
func (f *File) Int32s(key string) ([]int32, error) {
	v, err := f.get(key)
	if err != nil {
		return nil, err
	}
	s, ok := v.int32sOf()
	if !ok {
		return nil, f.wrongType(key, v, "array of integers that fit int32")
	}
	return s, nil
}
