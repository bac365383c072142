package gguf

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"

	"github.com/specula/specula/format/dtype"
)

// TensorData is a tensor to write: its description and its bytes.
type TensorData struct {
	// Name is the tensor's name; names must be unique.
	Name string
	// Type is the element type.
	Type dtype.DType
	// Dims is the shape in ggml order, innermost (row length) first; 1 to 4
	// dimensions, each at least 1.
	Dims []int64
	// Data holds exactly the bytes the type and shape call for, unless WriteTo is
	// set.
	Data []byte
	// WriteTo, when set (and Data nil), writes the tensor's bytes to w in place of
	// Data — exactly as many as the type and shape call for — for tensors too large
	// to hold in memory all at once.
	WriteTo func(w io.Writer) error
}

// WriteFile makes the file at path from what write writes to it, buffered, by way of a
// temporary file in the same directory renamed into place: a failure leaves nothing
// at path, and nothing half-written. The file is readable by all (mode 0644).
func WriteFile(path string, write func(w io.Writer) error) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(0o644); err != nil {
		return err
	}
	bw := bufio.NewWriterSize(tmp, 1<<20)
	if err := write(bw); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Write writes a GGUF version 3 file to w: the metadata kv and the tensors, in the
// order given, each tensor's data aligned to alignment bytes and padded with zeros.
//
// An alignment of 0 means the value of general.alignment in kv if it is there, and
// DefaultAlignment otherwise. Any other alignment must be a power of two and, unless
// it is the default, must also be given as general.alignment (a uint32) in kv, so
// that readers find it; Write never adds metadata of its own.
//
// Everything is checked before anything is written; the metadata and tensor table
// are built in memory, then the tensors' data is written straight from their slices.
func Write(w io.Writer, kv []KeyValue, tensors []TensorData, alignment int) error {
	align, err := writeAlignment(kv, alignment)
	if err != nil {
		return err
	}

	var b []byte
	b = append(b, magic...)
	b = binary.LittleEndian.AppendUint32(b, 3)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(tensors)))
	b = binary.LittleEndian.AppendUint64(b, uint64(len(kv)))

	keys := make(map[string]bool, len(kv))
	for _, e := range kv {
		if keys[e.Key] {
			return fmt.Errorf("gguf: write: key %q: duplicate key", e.Key)
		}
		keys[e.Key] = true
		b = appendString(b, e.Key)
		b = binary.LittleEndian.AppendUint32(b, uint32(e.Value.Type()))
		if b, err = appendValue(b, e.Value, 0); err != nil {
			return fmt.Errorf("gguf: write: key %q: %w", e.Key, err)
		}
	}

	names := make(map[string]bool, len(tensors))
	offset := int64(0)
	for _, t := range tensors {
		if names[t.Name] {
			return fmt.Errorf("gguf: write: tensor %q: duplicate tensor name", t.Name)
		}
		names[t.Name] = true
		size, err := tensorSize(t.Type, t.Dims)
		if err != nil {
			return fmt.Errorf("gguf: write: tensor %q: %w", t.Name, err)
		}
		switch {
		case t.WriteTo != nil && t.Data != nil:
			return fmt.Errorf("gguf: write: tensor %q: both Data and WriteTo are set", t.Name)
		case t.WriteTo == nil && int64(len(t.Data)) != size:
			return fmt.Errorf("gguf: write: tensor %q: %d bytes of data, want %d for %s %v", t.Name, len(t.Data), size, t.Type, t.Dims)
		}
		b = appendString(b, t.Name)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(t.Dims)))
		for _, d := range t.Dims {
			b = binary.LittleEndian.AppendUint64(b, uint64(d))
		}
		b = binary.LittleEndian.AppendUint32(b, uint32(t.Type))
		b = binary.LittleEndian.AppendUint64(b, uint64(offset))
		offset = alignUp(offset+size, align)
	}
	if _, err := w.Write(b); err != nil {
		return fmt.Errorf("gguf: write: %w", err)
	}
	zeros := make([]byte, min(align, 4096))
	if err := writeZeros(w, alignUp(int64(len(b)), align)-int64(len(b)), zeros); err != nil {
		return fmt.Errorf("gguf: write: %w", err)
	}
	for _, t := range tensors {
		size, err := writeTensor(w, t)
		if err != nil {
			return fmt.Errorf("gguf: write: tensor %q: %w", t.Name, err)
		}
		if err := writeZeros(w, alignUp(size, align)-size, zeros); err != nil {
			return fmt.Errorf("gguf: write: tensor %q: %w", t.Name, err)
		}
	}
	return nil
}

// writeTensor writes a tensor's bytes, from Data or through WriteTo, checking that
// WriteTo wrote as many as the shape calls for.
func writeTensor(w io.Writer, t TensorData) (int64, error) {
	if t.WriteTo == nil {
		_, err := w.Write(t.Data)
		return int64(len(t.Data)), err
	}
	size, _ := tensorSize(t.Type, t.Dims) // checked before anything was written
	c := &countingWriter{w: w}
	if err := t.WriteTo(c); err != nil {
		return c.n, err
	}
	if c.n != size {
		return c.n, fmt.Errorf("WriteTo wrote %d bytes, want %d for %s %v", c.n, size, t.Type, t.Dims)
	}
	return size, nil
}

// writeAlignment decides the alignment Write uses and checks that kv agrees with it.
func writeAlignment(kv []KeyValue, alignment int) (int64, error) {
	var v Value
	var inKV bool
	for _, e := range kv {
		if e.Key == AlignmentKey {
			v, inKV = e.Value, true
			break
		}
	}
	var fromKV int64
	if inKV {
		a, ok := v.x.(uint32)
		if !ok {
			return 0, fmt.Errorf("gguf: write: key %q: alignment is %s, want uint32", AlignmentKey, v.Type())
		}
		fromKV = int64(a)
	}
	align := int64(alignment)
	switch {
	case alignment == 0 && inKV:
		align = fromKV
	case alignment == 0:
		align = DefaultAlignment
	case inKV && fromKV != align:
		return 0, fmt.Errorf("gguf: write: alignment %d differs from %s %d", alignment, AlignmentKey, fromKV)
	case !inKV && align != DefaultAlignment:
		return 0, fmt.Errorf("gguf: write: alignment %d needs %s set to it in the metadata", alignment, AlignmentKey)
	}
	if align <= 0 || align > math.MaxUint32 || align&(align-1) != 0 {
		return 0, fmt.Errorf("gguf: write: alignment %d is not a power of two", align)
	}
	return align, nil
}

// writeZeros writes n zero bytes, len(zeros) at a time.
func writeZeros(w io.Writer, n int64, zeros []byte) error {
	for n > 0 {
		k := min(n, int64(len(zeros)))
		if _, err := w.Write(zeros[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

func appendString(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint64(b, uint64(len(s)))
	return append(b, s...)
}

// appendValue appends v's encoding, without its type; depth counts the arrays
// around it.
func appendValue(b []byte, v Value, depth int) ([]byte, error) {
	le := binary.LittleEndian
	switch x := v.x.(type) {
	case nil:
		return nil, fmt.Errorf("empty value")
	case uint8:
		return append(b, x), nil
	case int8:
		return append(b, byte(x)), nil
	case bool:
		return append(b, boolByte(x)), nil
	case uint16:
		return le.AppendUint16(b, x), nil
	case int16:
		return le.AppendUint16(b, uint16(x)), nil
	case uint32:
		return le.AppendUint32(b, x), nil
	case int32:
		return le.AppendUint32(b, uint32(x)), nil
	case float32:
		return le.AppendUint32(b, math.Float32bits(x)), nil
	case uint64:
		return le.AppendUint64(b, x), nil
	case int64:
		return le.AppendUint64(b, uint64(x)), nil
	case float64:
		return le.AppendUint64(b, math.Float64bits(x)), nil
	case string:
		return appendString(b, x), nil
	}

	// An array.
	if depth >= MaxArrayDepth {
		return nil, fmt.Errorf("arrays nested more than %d deep", MaxArrayDepth)
	}
	b = le.AppendUint32(b, uint32(v.Elem()))
	switch x := v.x.(type) {
	case []uint8:
		return append(appendLen(b, len(x)), x...), nil
	case []int8:
		return appendAll(b, x, func(b []byte, e int8) []byte { return append(b, byte(e)) }), nil
	case []bool:
		return appendAll(b, x, func(b []byte, e bool) []byte { return append(b, boolByte(e)) }), nil
	case []uint16:
		return appendAll(b, x, le.AppendUint16), nil
	case []int16:
		return appendAll(b, x, func(b []byte, e int16) []byte { return le.AppendUint16(b, uint16(e)) }), nil
	case []uint32:
		return appendAll(b, x, le.AppendUint32), nil
	case []int32:
		return appendAll(b, x, func(b []byte, e int32) []byte { return le.AppendUint32(b, uint32(e)) }), nil
	case []float32:
		return appendAll(b, x, func(b []byte, e float32) []byte { return le.AppendUint32(b, math.Float32bits(e)) }), nil
	case []uint64:
		return appendAll(b, x, le.AppendUint64), nil
	case []int64:
		return appendAll(b, x, func(b []byte, e int64) []byte { return le.AppendUint64(b, uint64(e)) }), nil
	case []float64:
		return appendAll(b, x, func(b []byte, e float64) []byte { return le.AppendUint64(b, math.Float64bits(e)) }), nil
	case []string:
		return appendAll(b, x, appendString), nil
	case []Value:
		b = appendLen(b, len(x))
		for i, e := range x {
			if e.Type() != TypeArray {
				return nil, fmt.Errorf("array element %d is %s: an array of arrays holds only arrays", i, e.Type())
			}
			var err error
			if b, err = appendValue(b, e, depth+1); err != nil {
				return nil, fmt.Errorf("array element %d: %w", i, err)
			}
		}
		return b, nil
	}
	return nil, fmt.Errorf("unsupported Go type %T", v.x) // unreachable with the constructors
}

func appendLen(b []byte, n int) []byte { return binary.LittleEndian.AppendUint64(b, uint64(n)) }

func appendAll[T any](b []byte, s []T, f func([]byte, T) []byte) []byte {
	b = appendLen(b, len(s))
	for _, e := range s {
		b = f(b, e)
	}
	return b
}

func boolByte(x bool) byte {
	if x {
		return 1
	}
	return 0
}
