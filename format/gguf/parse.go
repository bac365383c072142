package gguf

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/bits"

	"github.com/specula/specula/format/dtype"
)

const (
	// DefaultAlignment is the alignment of tensor data when a file does not set
	// general.alignment.
	DefaultAlignment = 32
	// AlignmentKey is the metadata key that sets the alignment of tensor data.
	AlignmentKey = "general.alignment"
	// MaxArrayDepth is how deeply arrays may nest: an array of arrays of arrays of
	// arrays at most.
	MaxArrayDepth = 4
	// MaxDims is the largest number of dimensions a tensor may have.
	MaxDims = 4

	magic      = "GGUF"
	minKVSize  = 8 + 4 + 1         // empty key, type, one-byte value
	minTIsize  = 8 + 4 + 8 + 4 + 8 // empty name, n_dims, one dim, type, offset
	headerSize = 4 + 4 + 8 + 8     // magic, version, tensor count, metadata count
)

// eofError reports data that runs past the end of the file.
type eofError struct{ what string }

func (e eofError) Error() string { return "unexpected end of file while reading " + e.what }
func (e eofError) Unwrap() error { return io.ErrUnexpectedEOF }

// decoder reads little-endian GGUF primitives from a byte slice.
type decoder struct {
	b   []byte
	off int
}

func (d *decoder) left() int { return len(d.b) - d.off }

func (d *decoder) take(n int) ([]byte, bool) {
	if n > d.left() {
		return nil, false
	}
	p := d.b[d.off : d.off+n]
	d.off += n
	return p, true
}

func (d *decoder) u32() (uint32, bool) {
	p, ok := d.take(4)
	if !ok {
		return 0, false
	}
	return binary.LittleEndian.Uint32(p), true
}

func (d *decoder) u64() (uint64, bool) {
	p, ok := d.take(8)
	if !ok {
		return 0, false
	}
	return binary.LittleEndian.Uint64(p), true
}

// strBytes reads a GGUF string (uint64 length, bytes) without copying it.
func (d *decoder) strBytes() ([]byte, bool) {
	n, ok := d.u64()
	if !ok || n > uint64(d.left()) {
		return nil, false
	}
	return d.take(int(n))
}

// str reads a GGUF string and copies it.
func (d *decoder) str() (string, bool) {
	p, ok := d.strBytes()
	return string(p), ok
}

// Parse reads a GGUF file held in memory. The File refers to data (tensor data is
// not copied), so data must not change while the File is in use.
func Parse(data []byte) (*File, error) {
	return parse("<memory>", data)
}

// parse reads the file's parts in order — header, metadata, tensor infos — and then
// checks that every tensor's data lies in the data section. Counts in the file are
// bounded by what the rest of the file could hold before anything is allocated for
// them, so a false count fails as a truncated file rather than a huge allocation.
func parse(name string, data []byte) (*File, error) {
	p := &parser{name: name, decoder: decoder{b: data}}
	version, nt, nkv, err := p.header()
	if err != nil {
		return nil, err
	}
	f := &File{
		Version:   version,
		Alignment: DefaultAlignment,
		name:      name,
		data:      data,
	}
	if err := p.metadata(f, nkv); err != nil {
		return nil, err
	}
	if err := p.alignment(f); err != nil {
		return nil, err
	}
	if err := p.tensorInfos(f, nt); err != nil {
		return nil, err
	}
	if err := p.dataSection(f); err != nil {
		return nil, err
	}
	return f, nil
}

// parser reads one file; its errors name the file.
type parser struct {
	name string
	decoder
}

// errf returns an error that names the file.
func (p *parser) errf(format string, args ...any) error {
	return fmt.Errorf("gguf: %s: "+format, append([]any{p.name}, args...)...)
}

// header checks the magic and the version, which must be a little-endian 2 or 3, and
// returns the version and the counts of tensors and metadata entries.
func (p *parser) header() (version uint32, nt, nkv uint64, err error) {
	data := p.b
	if len(data) < headerSize {
		if len(data) >= 4 && string(data[:4]) != magic {
			return 0, 0, 0, p.errf("not a GGUF file (magic %q, want %q)", data[:4], magic)
		}
		return 0, 0, 0, p.errf("%w", eofError{"the header"})
	}
	if string(data[:4]) != magic {
		return 0, 0, 0, p.errf("not a GGUF file (magic %q, want %q)", data[:4], magic)
	}
	p.off = 4
	version, _ = p.u32()
	swapped := bits.ReverseBytes32(version)
	switch {
	case version == 2 || version == 3:
	case version&0xffff == 0 && (swapped == 2 || swapped == 3):
		return 0, 0, 0, p.errf("big-endian GGUF files are not supported (version %d byte-swapped)", swapped)
	default:
		return 0, 0, 0, p.errf("GGUF version %d is not supported (only versions 2 and 3)", version)
	}
	nt, _ = p.u64()
	nkv, _ = p.u64()
	return version, nt, nkv, nil
}

// metadata reads the nkv key/value pairs; a key may appear only once.
func (p *parser) metadata(f *File, nkv uint64) error {
	capKV := int(min(nkv, uint64(p.left()/minKVSize)))
	f.KV = make([]KeyValue, 0, capKV)
	f.kvIndex = make(map[string]int, capKV)
	for i := uint64(0); i < nkv; i++ {
		key, ok := p.str()
		if !ok {
			return p.errf("%w", eofError{fmt.Sprintf("the key of metadata entry %d", i)})
		}
		if _, dup := f.kvIndex[key]; dup {
			return p.errf("key %q: duplicate key (metadata entry %d)", key, i)
		}
		t, ok := p.u32()
		if !ok {
			return p.errf("key %q: %w", key, eofError{"its value type"})
		}
		v, err := p.value(Type(t), 0)
		if err != nil {
			return p.errf("key %q: %w", key, err)
		}
		f.kvIndex[key] = len(f.KV)
		f.KV = append(f.KV, KeyValue{Key: key, Value: v})
	}
	return nil
}

// alignment sets f.Alignment from general.alignment, when the metadata has it: a
// uint32 power of two, since the data offsets are rounded up to it.
func (p *parser) alignment(f *File) error {
	v, ok := f.Value(AlignmentKey)
	if !ok {
		return nil
	}
	a, isU32 := v.x.(uint32)
	if !isU32 {
		return p.errf("key %q: alignment is %s, want uint32", AlignmentKey, v.Type())
	}
	if a == 0 || a&(a-1) != 0 {
		return p.errf("key %q: alignment %d is not a power of two", AlignmentKey, a)
	}
	f.Alignment = int(a)
	return nil
}

// tensorInfos reads the nt tensor infos; a name may appear only once.
func (p *parser) tensorInfos(f *File, nt uint64) error {
	capT := int(min(nt, uint64(p.left()/minTIsize)))
	f.Tensors = make([]Tensor, 0, capT)
	f.tensorIndex = make(map[string]int, capT)
	for i := uint64(0); i < nt; i++ {
		t, err := p.tensorInfo(f, i)
		if err != nil {
			return err
		}
		f.tensorIndex[t.Name] = len(f.Tensors)
		f.Tensors = append(f.Tensors, t)
	}
	return nil
}

// tensorInfo reads tensor info i: name, shape, type and data offset. It checks the
// shape and type and that the offset is aligned; dataSection checks the extent.
func (p *parser) tensorInfo(f *File, i uint64) (Tensor, error) {
	name, ok := p.str()
	if !ok {
		return Tensor{}, p.errf("%w", tensorEOF(i))
	}
	if _, dup := f.tensorIndex[name]; dup {
		return Tensor{}, p.errf("tensor %q: duplicate tensor name (tensor info %d)", name, i)
	}
	dims, err := p.dims(name, i)
	if err != nil {
		return Tensor{}, err
	}
	typ, ok := p.u32()
	if !ok {
		return Tensor{}, p.errf("tensor %q: %w", name, tensorEOF(i))
	}
	off, ok := p.u64()
	if !ok {
		return Tensor{}, p.errf("tensor %q: %w", name, tensorEOF(i))
	}
	size, err := tensorSize(dtype.DType(typ), dims)
	if err != nil {
		return Tensor{}, p.errf("tensor %q: %w", name, err)
	}
	if off%uint64(f.Alignment) != 0 {
		return Tensor{}, p.errf("tensor %q: data offset %d is not a multiple of the alignment %d", name, off, f.Alignment)
	}
	if off > math.MaxInt64 {
		return Tensor{}, p.errf("tensor %q: data offset %d beyond the end of the file (size %d)", name, off, len(p.b))
	}
	return Tensor{Name: name, Type: dtype.DType(typ), Dims: dims, Offset: int64(off), Size: size}, nil
}

// tensorEOF is the error of a file that ends inside tensor info i.
func tensorEOF(i uint64) error {
	return eofError{fmt.Sprintf("tensor info %d", i)}
}

// dims reads the shape of tensor name, of tensor info i: the number of dimensions, 1
// to MaxDims, and each dimension, which must fit an int64.
func (p *parser) dims(name string, i uint64) ([]int64, error) {
	nd, ok := p.u32()
	if !ok {
		return nil, p.errf("tensor %q: %w", name, tensorEOF(i))
	}
	if nd < 1 || nd > MaxDims {
		return nil, p.errf("tensor %q: %d dimensions, want 1 to %d", name, nd, MaxDims)
	}
	dims := make([]int64, nd)
	for j := range dims {
		n, ok := p.u64()
		if !ok {
			return nil, p.errf("tensor %q: %w", name, tensorEOF(i))
		}
		if n > math.MaxInt64 {
			return nil, p.errf("tensor %q: dimension %d is %d, beyond the int64 range", name, j, n)
		}
		dims[j] = int64(n)
	}
	return dims, nil
}

// dataSection sets where the data section starts, the first aligned offset after the
// tensor infos, and checks that every tensor's data lies inside the file.
func (p *parser) dataSection(f *File) error {
	size := int64(len(p.b))
	f.DataOffset = alignUp(int64(p.off), int64(f.Alignment))
	for i := range f.Tensors {
		t := &f.Tensors[i]
		// Offset < 2^63 and Size < 2^62, so this compares without overflow.
		if t.Offset > size || t.Size > size-f.DataOffset-t.Offset {
			start := uint64(f.DataOffset) + uint64(t.Offset)
			return p.errf("tensor %q: data [%d, %d) beyond the end of the file (size %d)", t.Name, start, start+uint64(t.Size), len(p.b))
		}
	}
	return nil
}

// tensorSize checks a tensor's type and shape and returns its size in bytes.
func tensorSize(typ dtype.DType, dims []int64) (int64, error) {
	if !typ.Known() {
		return 0, fmt.Errorf("unsupported tensor type %d", uint32(typ))
	}
	if typ.Private() {
		return 0, fmt.Errorf("unsupported tensor type %d: %s is specula's own, not a GGUF type", uint32(typ), typ)
	}
	if len(dims) < 1 || len(dims) > MaxDims {
		return 0, fmt.Errorf("%d dimensions, want 1 to %d", len(dims), MaxDims)
	}
	n := int64(1)
	for j, dim := range dims {
		if dim <= 0 {
			return 0, fmt.Errorf("dimension %d is %d, want at least 1", j, dim)
		}
		if n > math.MaxInt64/dim {
			return 0, fmt.Errorf("dimensions %v overflow the element count", dims)
		}
		n *= dim
	}
	if bs := int64(typ.BlockSize()); dims[0]%bs != 0 {
		return 0, fmt.Errorf("row length %d is not a multiple of the %s block size %d", dims[0], typ, bs)
	}
	size, err := typ.Bytes(n)
	if err != nil {
		return 0, fmt.Errorf("shape %v: %w", dims, err)
	}
	return size, nil
}

func alignUp(n, align int64) int64 {
	return (n + align - 1) &^ (align - 1)
}

// value reads a value of type t; depth counts the arrays around it.
func (d *decoder) value(t Type, depth int) (Value, error) {
	if t == TypeArray {
		if depth >= MaxArrayDepth {
			return Value{}, fmt.Errorf("arrays nested more than %d deep", MaxArrayDepth)
		}
		et, ok1 := d.u32()
		n, ok2 := d.u64()
		if !ok1 || !ok2 {
			return Value{}, eofError{"an array header"}
		}
		return d.array(Type(et), n, depth+1)
	}
	if t == TypeString {
		s, ok := d.str()
		if !ok {
			return Value{}, eofError{"a string"}
		}
		return Value{s}, nil
	}
	size := t.size()
	if size == 0 {
		return Value{}, fmt.Errorf("unknown value type %d", uint32(t))
	}
	p, ok := d.take(size)
	if !ok {
		return Value{}, eofError{"a " + t.String()}
	}
	return scalar(t, p)
}

// scalar decodes p, a value of the fixed-size type t.
func scalar(t Type, p []byte) (Value, error) {
	le := binary.LittleEndian
	switch t {
	case TypeUint8:
		return Value{p[0]}, nil
	case TypeInt8:
		return Value{int8(p[0])}, nil
	case TypeBool:
		if p[0] > 1 {
			return Value{}, fmt.Errorf("bool value %d, want 0 or 1", p[0])
		}
		return Value{p[0] == 1}, nil
	case TypeUint16:
		return Value{le.Uint16(p)}, nil
	case TypeInt16:
		return Value{int16(le.Uint16(p))}, nil
	case TypeUint32:
		return Value{le.Uint32(p)}, nil
	case TypeInt32:
		return Value{int32(le.Uint32(p))}, nil
	case TypeFloat32:
		return Value{math.Float32frombits(le.Uint32(p))}, nil
	case TypeUint64:
		return Value{le.Uint64(p)}, nil
	case TypeInt64:
		return Value{int64(le.Uint64(p))}, nil
	default: // TypeFloat64
		return Value{math.Float64frombits(le.Uint64(p))}, nil
	}
}

// array reads the n elements of an array of et; depth counts this array and those
// around it.
func (d *decoder) array(et Type, n uint64, depth int) (Value, error) {
	tooLong := func() error {
		return eofError{fmt.Sprintf("an array of %d %s values", n, et)}
	}
	switch et {
	case TypeString:
		return d.strings(n)
	case TypeArray:
		const minArray = 4 + 8 // element type, count
		if n > uint64(d.left()/minArray) {
			return Value{}, tooLong()
		}
		return d.arrays(n, depth)
	}
	size := et.size()
	if size == 0 {
		return Value{}, fmt.Errorf("array of unknown value type %d", uint32(et))
	}
	if n > uint64(d.left()/size) {
		return Value{}, tooLong()
	}
	p, _ := d.take(int(n) * size)
	return packed(et, p)
}

// arrays reads an array of n arrays; depth counts the array that holds them and
// those around it.
func (d *decoder) arrays(n uint64, depth int) (Value, error) {
	vs := make([]Value, n)
	for i := range vs {
		v, err := d.value(TypeArray, depth)
		if err != nil {
			return Value{}, fmt.Errorf("array element %d: %w", i, err)
		}
		vs[i] = v
	}
	return Value{vs}, nil
}

// packed decodes p, the elements of an array of the fixed-size type et.
func packed(et Type, p []byte) (Value, error) {
	le := binary.LittleEndian
	switch et {
	case TypeUint8:
		return Value{append([]uint8{}, p...)}, nil
	case TypeInt8:
		return Value{decode(p, 1, func(b []byte) int8 { return int8(b[0]) })}, nil
	case TypeBool:
		for i, b := range p {
			if b > 1 {
				return Value{}, fmt.Errorf("array element %d: bool value %d, want 0 or 1", i, b)
			}
		}
		return Value{decode(p, 1, func(b []byte) bool { return b[0] == 1 })}, nil
	case TypeUint16:
		return Value{decode(p, 2, le.Uint16)}, nil
	case TypeInt16:
		return Value{decode(p, 2, func(b []byte) int16 { return int16(le.Uint16(b)) })}, nil
	case TypeUint32:
		return Value{decode(p, 4, le.Uint32)}, nil
	case TypeInt32:
		return Value{decode(p, 4, func(b []byte) int32 { return int32(le.Uint32(b)) })}, nil
	case TypeFloat32:
		return Value{decode(p, 4, func(b []byte) float32 { return math.Float32frombits(le.Uint32(b)) })}, nil
	case TypeUint64:
		return Value{decode(p, 8, le.Uint64)}, nil
	case TypeInt64:
		return Value{decode(p, 8, func(b []byte) int64 { return int64(le.Uint64(b)) })}, nil
	default: // TypeFloat64
		return Value{decode(p, 8, func(b []byte) float64 { return math.Float64frombits(le.Uint64(b)) })}, nil
	}
}

// decode converts p, a packed array of size-byte elements, element by element.
func decode[T any](p []byte, size int, conv func([]byte) T) []T {
	out := make([]T, len(p)/size)
	for i := range out {
		out[i] = conv(p[i*size : i*size+size])
	}
	return out
}

// strings reads an array of n strings. All of them are copied out of the file in one
// block, rather than one allocation per string, since a vocabulary is a long array of
// short strings.
func (d *decoder) strings(n uint64) (Value, error) {
	if n > uint64(d.left()/8) {
		return Value{}, eofError{fmt.Sprintf("an array of %d strings", n)}
	}
	start := d.off
	for i := range n {
		if _, ok := d.strBytes(); !ok {
			return Value{}, eofError{fmt.Sprintf("string %d of an array of %d", i, n)}
		}
	}
	// Walking the lengths again cannot fail: the loop above checked them.
	block := string(d.b[start:d.off])
	out := make([]string, n)
	p := 0
	for i := range out {
		l := int(binary.LittleEndian.Uint64(d.b[start+p:]))
		p += 8
		out[i] = block[p : p+l]
		p += l
	}
	return Value{out}, nil
}
