package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/format/dtype"
)

// testTensor is a tensor to write with build.
type testTensor struct {
	name  string
	dtype string
	shape []int64
	data  []byte
}

// build returns the bytes of a valid safetensors file holding tensors, laid out one after
// another in the given order, with the header padded by spaces to a multiple of 8 bytes
// as the reference writer does.
func build(t testing.TB, tensors []testTensor, meta map[string]string) []byte {
	t.Helper()
	header := map[string]any{}
	if meta != nil {
		header["__metadata__"] = meta
	}
	var body []byte
	for _, tt := range tensors {
		begin := len(body)
		body = append(body, tt.data...)
		header[tt.name] = map[string]any{
			"dtype":        tt.dtype,
			"shape":        tt.shape,
			"data_offsets": []int{begin, len(body)},
		}
	}
	js, err := json.Marshal(header)
	require.NoError(t, err)
	for (8+len(js))%8 != 0 {
		js = append(js, ' ')
	}
	return raw(js, body)
}

// raw returns a file with the given header bytes and data section.
func raw(header, body []byte) []byte {
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	out = append(out, header...)
	return append(out, body...)
}

// seq returns n bytes counting up from start.
func seq(start byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = start + byte(i)
	}
	return b
}

// sampleTensors covers supported, unsupported, scalar, empty and sub-byte tensors.
func sampleTensors() []testTensor {
	return []testTensor{
		{"w", "F32", []int64{2, 3}, seq(0, 24)},
		{"b", "BF16", []int64{4}, seq(100, 8)},
		{"step", "I64", []int64{}, seq(200, 8)},
		{"mask", "U8", []int64{3}, seq(7, 3)},
		{"empty", "BOOL", []int64{0, 5}, nil},
		{"fp4", "F4", []int64{2, 2}, seq(50, 2)},
		{"h", "F16", []int64{1, 1, 2}, seq(60, 4)},
	}
}

func TestParseRoundTrip(t *testing.T) {
	in := sampleTensors()
	meta := map[string]string{"format": "pt", "note": "ünïcode"}
	data := build(t, in, meta)
	f, err := Parse(data)
	require.NoError(t, err)
	defer f.Close()

	assert.Equal(t, meta, f.Metadata())
	tensors := f.Tensors()
	require.Len(t, tensors, len(in))
	assert.True(t, slices.IsSortedFunc(tensors, func(a, b *Tensor) int { return strings.Compare(a.Name, b.Name) }))

	want := map[string]struct {
		dt        dtype.DType
		supported bool
		elements  int64
	}{
		"w":     {dtype.F32, true, 6},
		"b":     {dtype.BF16, true, 4},
		"step":  {dtype.I64, true, 1},
		"mask":  {unsupported, false, 3},
		"empty": {unsupported, false, 0},
		"fp4":   {unsupported, false, 4},
		"h":     {dtype.F16, true, 2},
	}
	for _, tt := range in {
		got, ok := f.Tensor(tt.name)
		require.True(t, ok, tt.name)
		w := want[tt.name]
		assert.Equal(t, tt.name, got.Name)
		assert.Equal(t, tt.dtype, got.TypeName, tt.name)
		assert.Equal(t, w.dt, got.DType, tt.name)
		assert.Equal(t, w.supported, got.Supported(), tt.name)
		assert.Equal(t, tt.shape, got.Shape, tt.name)
		assert.Equal(t, w.elements, got.Elements(), tt.name)
		assert.Equal(t, len(tt.data), len(got.Data), tt.name)
		if len(tt.data) > 0 {
			assert.Equal(t, tt.data, got.Data, tt.name)
			assert.True(t, within(got.Data, data), "%s: Data must be a slice of the input", tt.name)
			assert.Equal(t, len(got.Data), cap(got.Data), "%s: appending must not overwrite the file", tt.name)
		}
	}
	_, ok := f.Tensor("missing")
	assert.False(t, ok)

	// The returned slice and map are the caller's.
	tensors[0] = nil
	assert.NotNil(t, f.Tensors()[0])
	f.Metadata()["format"] = "changed"
	assert.Equal(t, "pt", f.Metadata()["format"])
}

// within reports whether b lies inside buf's memory.
func within(b, buf []byte) bool {
	p, lo := uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	return p >= lo && p+uintptr(len(b)) <= lo+uintptr(len(buf))
}

func TestParseAccepts(t *testing.T) {
	tests := []struct {
		name   string
		header string
		body   []byte
		check  func(t *testing.T, f *File)
	}{
		{"empty object", `{}`, nil, func(t *testing.T, f *File) {
			assert.Empty(t, f.Tensors())
			assert.Empty(t, f.Metadata())
		}},
		{"null metadata", `{"__metadata__":null}`, nil, func(t *testing.T, f *File) {
			assert.Empty(t, f.Metadata())
		}},
		{"padding and whitespace", " \n{ \"a\" : {\"dtype\":\"I8\",\"shape\":[2],\"data_offsets\":[0,2]} }    ", seq(1, 2), func(t *testing.T, f *File) {
			a, ok := f.Tensor("a")
			require.True(t, ok)
			assert.Equal(t, []byte{1, 2}, a.Data)
		}},
		{"unknown fields ignored", `{"a":{"x":[1,{"y":2}],"dtype":"I8","shape":[1],"data_offsets":[0,1],"z":null}}`, seq(9, 1), func(t *testing.T, f *File) {
			a, _ := f.Tensor("a")
			assert.Equal(t, []byte{9}, a.Data)
		}},
		{"gap and trailing bytes", `{"a":{"dtype":"I8","shape":[1],"data_offsets":[2,3]}}`, seq(0, 10), func(t *testing.T, f *File) {
			a, _ := f.Tensor("a")
			assert.Equal(t, []byte{2}, a.Data)
		}},
		{"empty tensors share an offset", `{"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"c":{"dtype":"F32","shape":[3,0],"data_offsets":[4,4]}}`, seq(0, 4), func(t *testing.T, f *File) {
			assert.Len(t, f.Tensors(), 3)
		}},
		{"huge dims with a zero", `{"a":{"dtype":"F32","shape":[4611686018427387904,4611686018427387904,0],"data_offsets":[0,0]}}`, nil, func(t *testing.T, f *File) {
			a, _ := f.Tensor("a")
			assert.Equal(t, int64(0), a.Elements())
		}},
		{"escapes", `{"a\/b\u00e9\ud83d\ude00\"":{"dtype":"U8","shape":[-0],"data_offsets":[0,0]}}`, nil, func(t *testing.T, f *File) {
			_, ok := f.Tensor("a/bé😀\"")
			assert.True(t, ok)
		}},
		{"escaped names", `{"\u0061\n":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, seq(0, 1), func(t *testing.T, f *File) {
			_, ok := f.Tensor("a\n")
			assert.True(t, ok)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse(raw([]byte(tc.header), tc.body))
			require.NoError(t, err)
			tc.check(t, f)
			require.NoError(t, f.Close())
		})
	}
}

func TestParseErrors(t *testing.T) {
	// entry writes a one-tensor header named "t".
	entry := func(fields string) string { return `{"t":{` + fields + `}}` }
	tests := []struct {
		name string
		file []byte
		want []string // substrings of the error
	}{
		{"short file", []byte{1, 0, 0}, []string{"3 bytes, too short"}},
		{"header over limit", binary.LittleEndian.AppendUint64(nil, 200<<20), []string{"header length 209715200 is over"}},
		{"header longer than file", append(binary.LittleEndian.AppendUint64(nil, 100), `{}`...), []string{"header length 100 is more than the 2 bytes"}},
		{"huge header length", binary.LittleEndian.AppendUint64(nil, 1<<63), []string{"header length 9223372036854775808 is over"}},
		{"empty header", raw(nil, nil), []string{"not a JSON object", "unexpected end of input"}},
		{"invalid JSON", raw([]byte(`{"t": {"dtype": }`), nil), []string{`tensor "t"`, "invalid JSON at byte 16", "invalid character '}'"}},
		{"truncated JSON", raw([]byte(`{"t": {"dtype": "F32"`), nil), []string{`tensor "t"`, "invalid JSON at byte 21: unexpected end of input"}},
		{"not an object", raw([]byte(`[1, 2]`), nil), []string{"not a JSON object", "found an array"}},
		{"string header", raw([]byte(`"x"`), nil), []string{"not a JSON object"}},
		{"invalid UTF-8", raw([]byte("{\"\xff\":1}"), nil), []string{"UTF-8"}},
		{"trailing data", raw([]byte(`{} {}`), nil), []string{"data after the JSON object"}},
		{"entry not an object", raw([]byte(`{"t": 5}`), nil), []string{`tensor "t"`, "want an object, found a number"}},
		{"entry is null", raw([]byte(`{"t": null}`), nil), []string{`tensor "t"`, "null"}},
		{"no dtype", raw([]byte(entry(`"shape":[1],"data_offsets":[0,4]`)), seq(0, 4)), []string{`tensor "t"`, "no dtype"}},
		{"no shape", raw([]byte(entry(`"dtype":"F32","data_offsets":[0,4]`)), seq(0, 4)), []string{`tensor "t"`, "no shape"}},
		{"no offsets", raw([]byte(entry(`"dtype":"F32","shape":[1]`)), seq(0, 4)), []string{`tensor "t"`, "no data_offsets"}},
		{"dtype not a string", raw([]byte(entry(`"dtype":32,"shape":[1],"data_offsets":[0,4]`)), seq(0, 4)), []string{`tensor "t"`, "dtype", "want a string"}},
		{"unknown dtype", raw([]byte(entry(`"dtype":"Q4","shape":[1],"data_offsets":[0,4]`)), seq(0, 4)), []string{`tensor "t"`, `unknown dtype "Q4"`}},
		{"lower-case dtype", raw([]byte(entry(`"dtype":"f32","shape":[1],"data_offsets":[0,4]`)), seq(0, 4)), []string{`tensor "t"`, `unknown dtype "f32"`}},
		{"shape not an array", raw([]byte(entry(`"dtype":"F32","shape":4,"data_offsets":[0,4]`)), seq(0, 4)), []string{`tensor "t"`, "shape"}},
		{"shape of strings", raw([]byte(entry(`"dtype":"F32","shape":["1"],"data_offsets":[0,4]`)), seq(0, 4)), []string{`tensor "t"`, "shape", "want an integer"}},
		{"fractional dim", raw([]byte(entry(`"dtype":"F32","shape":[1.5],"data_offsets":[0,4]`)), seq(0, 4)), []string{`tensor "t"`, "1.5 is not an integer"}},
		{"exponent dim", raw([]byte(entry(`"dtype":"F32","shape":[1e0],"data_offsets":[0,4]`)), seq(0, 4)), []string{`tensor "t"`, "1e0 is not an integer"}},
		{"negative dim", raw([]byte(entry(`"dtype":"F32","shape":[2,-2],"data_offsets":[0,4]`)), seq(0, 4)), []string{`tensor "t"`, "negative dimension -2"}},
		{"element count overflow", raw([]byte(entry(`"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,4]`)), seq(0, 4)), []string{`tensor "t"`, "overflows"}},
		{"byte count overflow", raw([]byte(entry(`"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,4]`)), seq(0, 4)), []string{`tensor "t"`, "overflow a byte count"}},
		{"dim beyond int64", raw([]byte(entry(`"dtype":"F32","shape":[18446744073709551616],"data_offsets":[0,4]`)), seq(0, 4)), []string{`tensor "t"`, "int64 range"}},
		{"sub-byte remainder", raw([]byte(entry(`"dtype":"F4","shape":[3],"data_offsets":[0,2]`)), seq(0, 2)), []string{`tensor "t"`, "not a whole number of bytes"}},
		{"one offset", raw([]byte(entry(`"dtype":"F32","shape":[1],"data_offsets":[4]`)), seq(0, 4)), []string{`tensor "t"`, "want [begin, end], found 1 values"}},
		{"three offsets", raw([]byte(entry(`"dtype":"F32","shape":[1],"data_offsets":[0,4,8]`)), seq(0, 8)), []string{`tensor "t"`, "found 3 values"}},
		{"offsets not an array", raw([]byte(entry(`"dtype":"F32","shape":[1],"data_offsets":{"a":1}`)), seq(0, 4)), []string{`tensor "t"`, "data_offsets"}},
		{"negative offset", raw([]byte(entry(`"dtype":"F32","shape":[1],"data_offsets":[-4,0]`)), seq(0, 4)), []string{`tensor "t"`, "negative offset"}},
		{"begin after end", raw([]byte(entry(`"dtype":"F32","shape":[1],"data_offsets":[8,4]`)), seq(0, 8)), []string{`tensor "t"`, "end before they begin"}},
		{"size mismatch", raw([]byte(entry(`"dtype":"F32","shape":[2,2],"data_offsets":[0,12]`)), seq(0, 16)), []string{`tensor "t"`, "needs 16 bytes", "hold 12"}},
		{"unsupported size mismatch", raw([]byte(entry(`"dtype":"U16","shape":[3],"data_offsets":[0,3]`)), seq(0, 8)), []string{`tensor "t"`, "U16 needs 6 bytes"}},
		{"past the end", raw([]byte(entry(`"dtype":"F32","shape":[2],"data_offsets":[4,12]`)), seq(0, 8)), []string{`tensor "t"`, "past the end of the data section (8 bytes)"}},
		{"huge offsets", raw([]byte(entry(`"dtype":"U8","shape":[1],"data_offsets":[9223372036854775806,9223372036854775807]`)), seq(0, 8)), []string{`tensor "t"`, "past the end"}},
		{"duplicate tensor", raw([]byte(`{"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"t":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`), seq(0, 2)), []string{`key "t" appears twice`}},
		{"duplicate field", raw([]byte(entry(`"dtype":"U8","shape":[1],"dtype":"I8","data_offsets":[0,1]`)), seq(0, 1)), []string{`tensor "t"`, "dtype appears twice"}},
		{"duplicate metadata", raw([]byte(`{"__metadata__":{},"__metadata__":{}}`), nil), []string{`key "__metadata__" appears twice`}},
		{"metadata not strings", raw([]byte(`{"__metadata__":{"n":1}}`), nil), []string{"__metadata__", `"n"`, "want a string"}},
		{"metadata not an object", raw([]byte(`{"__metadata__":[]}`), nil), []string{"__metadata__", "want an object of strings"}},
		{"metadata duplicate key", raw([]byte(`{"__metadata__":{"a":"1","a":"2"}}`), nil), []string{"__metadata__", `key "a" appears twice`}},
		{"bad escape", raw([]byte(`{"a\x":{}}`), nil), []string{"invalid JSON at byte 1", "bad string escape"}},
		{"control character", raw([]byte("{\"a\tb\":{}}"), nil), []string{"invalid JSON at byte 3", "control character"}},
		{"unterminated string", raw([]byte(`{"abc`), nil), []string{"unterminated string"}},
		{"unterminated escape", raw([]byte(`{"abc\"}`), nil), []string{"unterminated string"}},
		{"missing colon", raw([]byte(`{"a" {}}`), nil), []string{"invalid character '{', want ':'"}},
		{"key not a string", raw([]byte(`{a: {}}`), nil), []string{"invalid character 'a', want a string key"}},
		{"trailing comma", raw([]byte(entry(`"dtype":"U8","shape":[1,],"data_offsets":[0,1]`)), seq(0, 1)), []string{"shape", "invalid character ']'"}},
		{"trailing comma in object", raw([]byte(`{"__metadata__":{},}`), nil), []string{"want a string key"}},
		{"leading zero", raw([]byte(entry(`"dtype":"U8","shape":[01],"data_offsets":[0,1]`)), seq(0, 1)), []string{"shape", "invalid character '1', want ',' or ']'"}},
		{"lone minus", raw([]byte(entry(`"dtype":"U8","shape":[-],"data_offsets":[0,1]`)), seq(0, 1)), []string{"shape", "want a digit"}},
		{"dot without digits", raw([]byte(entry(`"dtype":"U8","shape":[1.],"data_offsets":[0,1]`)), seq(0, 1)), []string{"shape", "want a digit after '.'"}},
		{"empty exponent", raw([]byte(entry(`"dtype":"U8","shape":[1e+],"data_offsets":[0,1]`)), seq(0, 1)), []string{"shape", "want a digit in the exponent"}},
		{"NUL byte", raw([]byte("{\x00}"), nil), []string{`invalid character '\x00'`}},
		{"bad literal", raw([]byte(`{"__metadata__":nul}`), nil), []string{"__metadata__", "invalid character 'n', want an object of strings"}},
		{"deep unknown field", raw([]byte(entry(`"x":`+strings.Repeat("[", 20000)+strings.Repeat("]", 20000)+`,"dtype":"U8","shape":[1],"data_offsets":[0,1]`)), seq(0, 1)), []string{`tensor "t"`, "x", "exceeded max depth"}},
		{"bad unknown field", raw([]byte(entry(`"x":[1,}`)), nil), []string{`tensor "t"`, "x", "invalid JSON"}},
		{"overlap", raw([]byte(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`), seq(0, 8)), []string{`"a"`, `"b"`, "overlap"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse(tc.file)
			require.Error(t, err)
			assert.Nil(t, f)
			assert.True(t, strings.HasPrefix(err.Error(), "safetensors: "), err.Error())
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestParseTruncated(t *testing.T) {
	data := build(t, sampleTensors(), map[string]string{"format": "pt"})
	f, err := Parse(data)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	for n := range len(data) {
		_, err := Parse(data[:n:n])
		require.Error(t, err, "truncated to %d of %d bytes", n, len(data))
	}
}

func TestOpen(t *testing.T) {
	dir := t.TempDir()
	data := build(t, sampleTensors(), map[string]string{"format": "pt"})
	path := filepath.Join(dir, "x.safetensors")
	require.NoError(t, os.WriteFile(path, data, 0o644))

	f, err := Open(path)
	require.NoError(t, err)
	want, err := Parse(data)
	require.NoError(t, err)
	require.Len(t, f.Tensors(), len(want.Tensors()))
	for i, w := range want.Tensors() {
		g := f.Tensors()[i]
		assert.Equal(t, w.Name, g.Name)
		assert.Equal(t, w.Shape, g.Shape)
		assert.Equal(t, w.Data, g.Data)
	}
	assert.Equal(t, "pt", f.Metadata()["format"])

	// Tensors are slices of one buffer, not copies: their distance in memory is their
	// distance in the file.
	a, _ := f.Tensor("w")
	b, _ := f.Tensor("b")
	dist := uintptr(unsafe.Pointer(&b.Data[0])) - uintptr(unsafe.Pointer(&a.Data[0]))
	assert.Equal(t, uintptr(24), dist)

	require.NoError(t, f.Close())
	assert.Nil(t, a.Data, "Close must drop the tensors' data")
	require.NoError(t, f.Close(), "closing twice")
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.safetensors")
	require.NoError(t, os.WriteFile(bad, raw([]byte(`{"layer.0":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}`), seq(0, 8)), 0o644))
	empty := filepath.Join(dir, "empty.safetensors")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	tests := []struct {
		path string
		want []string
	}{
		{bad, []string{bad, `tensor "layer.0"`, "past the end"}},
		{empty, []string{empty, "too short"}},
		{filepath.Join(dir, "missing.safetensors"), []string{"missing.safetensors", "no such file"}},
		{dir, []string{dir}},
	}
	for _, tc := range tests {
		t.Run(filepath.Base(tc.path), func(t *testing.T) {
			f, err := Open(tc.path)
			require.Error(t, err)
			assert.Nil(t, f)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

// BenchmarkParse parses a header of 5000 tensors, the size of a large model's shard.
func BenchmarkParse(b *testing.B) {
	var tensors []testTensor
	for i := range 5000 {
		tensors = append(tensors, testTensor{fmt.Sprintf("model.layers.%d.mlp.up_proj.weight", i), "BF16", []int64{2, 4}, make([]byte, 16)})
	}
	data := build(b, tensors, map[string]string{"format": "pt"})
	b.SetBytes(int64(binary.LittleEndian.Uint64(data)))
	for b.Loop() {
		if _, err := Parse(data); err != nil {
			b.Fatal(err)
		}
	}
}
