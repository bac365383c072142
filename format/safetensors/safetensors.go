// Package safetensors reads Hugging Face safetensors files and model directories, a single
// model.safetensors or shards listed by model.safetensors.index.json.
//
// A file is an 8-byte little-endian header length N, N bytes of JSON mapping each tensor
// name to its dtype, shape and data_offsets (relative to the data that follows the header),
// with an optional "__metadata__" object of strings, and then the tensor data.
//
// [Open] memory-maps a file read-only where the platform allows it (and reads it into memory
// otherwise); the [Tensor.Data] of every tensor is a slice of that mapping, never a copy.
// Everything in the header is checked against the file before it is used, so a damaged or
// hostile file gives an error naming the file and the tensor, never a panic or an
// out-of-bounds read.
package safetensors

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/format/mmap"
)

// maxHeader is the largest header accepted, in bytes (the reference implementation's limit).
const maxHeader = 100 << 20

// unsupported is the DType of a tensor whose safetensors type has no dtype counterpart.
const unsupported = dtype.DType(math.MaxUint32)

// Tensor is one tensor of a file: its type, shape and bytes.
type Tensor struct {
	// Name is the tensor's name in the file, such as "model.norm.weight".
	Name string
	// DType is the element type. It is meaningful only when Supported reports true;
	// otherwise it is a value that dtype.DType.Known rejects and TypeName says what the
	// file holds.
	DType dtype.DType
	// TypeName is the safetensors name of the element type ("BF16", "U8", …).
	TypeName string
	// Shape is the shape as stored, outermost dimension first: [out, in] for the weight
	// of a linear layer. A scalar has an empty shape.
	Shape []int64
	// Data is the tensor's little-endian, row-major bytes: a slice of the file's memory,
	// valid until the file is closed. It must not be modified.
	Data []byte
}

// Elements returns the number of values in the tensor, the product of its shape
// (1 for a scalar).
func (t *Tensor) Elements() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Supported reports whether the tensor's element type has a dtype counterpart (F32, F16,
// BF16, F64, I64, I32, I16, I8). Other types (U8, BOOL, F8_E4M3, …) are read and checked
// for size but have no DType.
func (t *Tensor) Supported() bool {
	return t.DType.Known()
}

// File is a parsed safetensors file. It is read-only and safe for concurrent use, except
// that Close must not run at the same time as anything else.
type File struct {
	tensors  []*Tensor // sorted by name
	byName   map[string]*Tensor
	metadata map[string]string
	release  func() error // unmaps the file; nil when there is nothing to release
}

// Mapped reports whether the file's bytes are memory-mapped (rather than read into
// memory, where mapping is not available, or parsed from a caller's bytes).
func (f *File) Mapped() bool { return f.release != nil }

// Parse parses a safetensors file held in data. The tensors' Data are slices of data, which
// must stay unchanged while they are in use. Errors do not name a file; [Open] adds the path.
func Parse(data []byte) (*File, error) {
	f, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	return f, nil
}

// Open memory-maps the safetensors file at path read-only (or, where mapping is not
// available, reads it into memory) and parses it. The caller must Close the file when its
// tensors are no longer in use. While it is open the file on disk must not be truncated.
func Open(path string) (*File, error) {
	data, release, err := mmap.Map(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	f, err := parse(data)
	if err != nil {
		if release != nil {
			_ = release()
		}
		return nil, fmt.Errorf("safetensors: %s: %w", path, err)
	}
	f.release = release
	return f, nil
}

// Close releases the file's memory. The Data of its tensors are set to nil, and copies of
// them kept elsewhere must no longer be used. Closing a closed file does nothing.
func (f *File) Close() error {
	for _, t := range f.tensors {
		t.Data = nil
	}
	release := f.release
	f.release = nil
	if release == nil {
		return nil
	}
	if err := release(); err != nil {
		return fmt.Errorf("safetensors: close: %w", err)
	}
	return nil
}

// Tensors returns the file's tensors sorted by name. The slice is the caller's; the tensors
// are shared and must not be modified.
func (f *File) Tensors() []*Tensor {
	return slices.Clone(f.tensors)
}

// Tensor returns the tensor with the given name.
func (f *File) Tensor(name string) (*Tensor, bool) {
	t, ok := f.byName[name]
	return t, ok
}

// Metadata returns a copy of the header's "__metadata__" object; it is empty when the file
// has none.
func (f *File) Metadata() map[string]string {
	m := maps.Clone(f.metadata)
	if m == nil {
		m = map[string]string{}
	}
	return m
}

// parse checks and parses a whole file held in data.
func parse(data []byte) (*File, error) {
	if len(data) < 8 {
		return nil, fmt.Errorf("file is %d bytes, too short for the 8-byte header length", len(data))
	}
	n := binary.LittleEndian.Uint64(data)
	if n > maxHeader {
		return nil, fmt.Errorf("header length %d is over the %d-byte limit", n, maxHeader)
	}
	if n > uint64(len(data)-8) {
		return nil, fmt.Errorf("header length %d is more than the %d bytes that follow it", n, len(data)-8)
	}
	body := data[8+n:]
	entries, meta, err := decodeHeader(data[8 : 8+n])
	if err != nil {
		return nil, err
	}
	f := &File{
		tensors:  make([]*Tensor, 0, len(entries)),
		byName:   make(map[string]*Tensor, len(entries)),
		metadata: meta,
	}
	for _, e := range entries {
		t, err := newTensor(e, body)
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %w", e.name, err)
		}
		f.tensors = append(f.tensors, t)
		f.byName[t.Name] = t
	}
	if err := checkOverlap(entries); err != nil {
		return nil, err
	}
	slices.SortFunc(f.tensors, func(a, b *Tensor) int { return strings.Compare(a.Name, b.Name) })
	return f, nil
}

// newTensor checks one header entry against the data section and returns its tensor.
func newTensor(e entry, body []byte) (*Tensor, error) {
	dt, bits, ok := lookupType(e.typeName)
	if !ok {
		return nil, fmt.Errorf("unknown dtype %q", e.typeName)
	}
	n, err := elements(e.shape)
	if err != nil {
		return nil, fmt.Errorf("shape %v: %w", e.shape, err)
	}
	if n > math.MaxInt64/bits {
		return nil, fmt.Errorf("shape %v: %d values of %s overflow a byte count", e.shape, n, e.typeName)
	}
	if n*bits%8 != 0 {
		return nil, fmt.Errorf("shape %v: %d values of %s are not a whole number of bytes", e.shape, n, e.typeName)
	}
	size := n * bits / 8
	begin, end := e.begin, e.end
	switch {
	case begin > end:
		return nil, fmt.Errorf("data_offsets [%d, %d] end before they begin", begin, end)
	case end-begin != size:
		return nil, fmt.Errorf("shape %v of %s needs %d bytes, data_offsets [%d, %d] hold %d",
			e.shape, e.typeName, size, begin, end, end-begin)
	case end > int64(len(body)):
		return nil, fmt.Errorf("data_offsets [%d, %d] run past the end of the data section (%d bytes)",
			begin, end, len(body))
	}
	return &Tensor{
		Name:     e.name,
		DType:    dt,
		TypeName: e.typeName,
		Shape:    e.shape,
		Data:     body[begin:end:end],
	}, nil
}

// elements returns the product of a shape's dimensions, checking for negative dimensions
// and overflow.
func elements(shape []int64) (int64, error) {
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("negative dimension %d", d)
		}
		if d == 0 {
			return 0, nil
		}
	}
	n := int64(1)
	for _, d := range shape {
		if n > math.MaxInt64/d {
			return 0, fmt.Errorf("element count overflows int64")
		}
		n *= d
	}
	return n, nil
}

// checkOverlap reports two tensors whose bytes overlap. Gaps between tensors and bytes
// after the last one are allowed.
func checkOverlap(entries []entry) error {
	byBegin := make([]*entry, 0, len(entries))
	for i := range entries {
		if entries[i].begin < entries[i].end {
			byBegin = append(byBegin, &entries[i])
		}
	}
	slices.SortFunc(byBegin, func(a, b *entry) int {
		return cmp.Or(cmp.Compare(a.begin, b.begin), strings.Compare(a.name, b.name))
	})
	for i := 1; i < len(byBegin); i++ {
		prev, cur := byBegin[i-1], byBegin[i]
		if cur.begin < prev.end {
			return fmt.Errorf("tensors %q (data_offsets [%d, %d]) and %q (data_offsets [%d, %d]) overlap",
				prev.name, prev.begin, prev.end, cur.name, cur.begin, cur.end)
		}
	}
	return nil
}

// lookupType returns the dtype counterpart of a safetensors type name (unsupported when
// there is none) and the size of one value in bits.
// TypeBits is the bits one element of the safetensors dtype name takes (ok false
// for a name safetensors does not define): the one table of element sizes, for
// readers and writers of tensors outside a parsed file.
func TypeBits(name string) (bits int64, ok bool) {
	_, bits, ok = lookupType(name)
	return bits, ok
}

func lookupType(name string) (dtype.DType, int64, bool) {
	switch name {
	case "F64":
		return dtype.F64, 64, true
	case "F32":
		return dtype.F32, 32, true
	case "F16":
		return dtype.F16, 16, true
	case "BF16":
		return dtype.BF16, 16, true
	case "I64":
		return dtype.I64, 64, true
	case "I32":
		return dtype.I32, 32, true
	case "I16":
		return dtype.I16, 16, true
	case "I8":
		return dtype.I8, 8, true
	case "U64", "C64":
		return unsupported, 64, true
	case "U32":
		return unsupported, 32, true
	case "U16":
		return unsupported, 16, true
	case "U8", "BOOL", "F8_E4M3", "F8_E5M2", "F8_E8M0":
		return unsupported, 8, true
	case "F6_E2M3", "F6_E3M2":
		return unsupported, 6, true
	case "F4":
		return unsupported, 4, true
	}
	return 0, 0, false
}
