package gguf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/format/dtype"
)

// allValues has one entry of every value type, arrays of every element type, an empty
// array and nested arrays.
func allValues() []KeyValue {
	return []KeyValue{
		{"general.architecture", String("llama")},
		{"t.uint8", Uint8(200)},
		{"t.int8", Int8(-100)},
		{"t.uint16", Uint16(60000)},
		{"t.int16", Int16(-30000)},
		{"t.uint32", Uint32(4_000_000_000)},
		{"t.int32", Int32(-2_000_000_000)},
		{"t.float32", Float32(1e-5)},
		{"t.bool", Bool(true)},
		{"t.false", Bool(false)},
		{"t.string", String("héllo\x00world")},
		{"t.empty_string", String("")},
		{"t.uint64", Uint64(math.MaxUint64)},
		{"t.int64", Int64(math.MinInt64)},
		{"t.float64", Float64(-2.5e300)},
		{"a.uint8", Array([]uint8{0, 1, 255})},
		{"a.int8", Array([]int8{-128, 0, 127})},
		{"a.uint16", Array([]uint16{0, 65535})},
		{"a.int16", Array([]int16{-32768, 32767})},
		{"a.uint32", Array([]uint32{1, math.MaxUint32})},
		{"a.int32", Int32s([]int32{1, 2, 3, 6})},
		{"a.float32", Float32s([]float32{0.5, -1, float32(math.Inf(1))})},
		{"a.bool", Array([]bool{true, false, true})},
		{"a.string", Strings([]string{"<s>", "", "▁the", "\n"})},
		{"a.uint64", Array([]uint64{math.MaxUint64, 0})},
		{"a.int64", Array([]int64{math.MinInt64, math.MaxInt64})},
		{"a.float64", Array([]float64{math.Pi, math.Copysign(0, -1)})},
		{"a.empty", Array([]uint32{})},
		{"a.nil", Array([]string(nil))},
		{"a.nested", Array([]Value{
			Int32s([]int32{1, 2}),
			Strings([]string{"x"}),
			Array([]Value{Array([]Value{Float32s([]float32{3})}), Array([]Value{})}),
		})},
	}
}

// testTensors has several tensor types with data of the right sizes; the last one's
// size is a multiple of 32, so the file ends with its data (no padding after it).
func testTensors(rng *rand.Rand) []TensorData {
	fill := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	return []TensorData{
		{Name: "token_embd.weight", Type: dtype.Q8_0, Dims: []int64{64, 3}, Data: fill(6 * 34)},
		{Name: "blk.0.attn_norm.weight", Type: dtype.F32, Dims: []int64{5}, Data: fill(20)},
		{Name: "blk.0.attn_q.weight", Type: dtype.F16, Dims: []int64{3, 2, 2, 1}, Data: fill(24)},
		{Name: "output.weight", Type: dtype.F32, Dims: []int64{8, 2}, Data: fill(64)},
	}
}

func writeFile(t testing.TB, kv []KeyValue, tensors []TensorData, alignment int) []byte {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, Write(&buf, kv, tensors, alignment))
	return buf.Bytes()
}

func TestRoundTrip(t *testing.T) {
	tests := []struct {
		name      string
		alignment int
		extra     []KeyValue
		want      int
	}{
		{"default", 0, nil, 32},
		{"explicit default", 32, nil, 32},
		{"from metadata", 0, []KeyValue{{AlignmentKey, Uint32(64)}}, 64},
		{"both", 256, []KeyValue{{AlignmentKey, Uint32(256)}}, 256},
		{"one", 1, []KeyValue{{AlignmentKey, Uint32(1)}}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kv := append(allValues(), tc.extra...)
			tensors := testTensors(rand.New(rand.NewPCG(1, 2)))
			data := writeFile(t, kv, tensors, tc.alignment)

			check := func(t *testing.T, f *File) {
				assert.Equal(t, uint32(3), f.Version)
				assert.Equal(t, tc.want, f.Alignment)
				assert.Zero(t, f.DataOffset%int64(tc.want))
				assert.Equal(t, kv, f.KV)
				require.Len(t, f.Tensors, len(tensors))
				for i, td := range tensors {
					got := &f.Tensors[i]
					assert.Equal(t, td.Name, got.Name)
					assert.Equal(t, td.Type, got.Type)
					assert.Equal(t, td.Dims, got.Dims)
					assert.Equal(t, int64(len(td.Data)), got.Size)
					assert.Zero(t, got.Offset%int64(tc.want), "offset of %s", td.Name)
					assert.Equal(t, td.Data, f.Data(got), "data of %s", td.Name)
					byName, ok := f.Tensor(td.Name)
					require.True(t, ok)
					assert.Same(t, got, byName)
				}
				for _, e := range kv {
					v, ok := f.Value(e.Key)
					assert.True(t, ok)
					assert.Equal(t, e.Value, v)
				}
				_, ok := f.Tensor("missing")
				assert.False(t, ok)
				assert.False(t, f.Has("missing"))
			}

			f, err := Parse(data)
			require.NoError(t, err)
			check(t, f)
			assert.Equal(t, data, writeFile(t, f.KV, tensorData(f), f.Alignment), "rewriting the parsed file")

			path := filepath.Join(t.TempDir(), "model.gguf")
			require.NoError(t, os.WriteFile(path, data, 0o644))
			f, err = Open(path)
			require.NoError(t, err)
			check(t, f)
			require.NoError(t, f.Close())
			assert.Nil(t, f.Data(&f.Tensors[0]), "Data after Close")
			require.NoError(t, f.Close(), "second Close")
		})
	}
}

// tensorData turns a parsed file's tensors back into Write's input.
func tensorData(f *File) []TensorData {
	var out []TensorData
	for i := range f.Tensors {
		t := &f.Tensors[i]
		out = append(out, TensorData{Name: t.Name, Type: t.Type, Dims: t.Dims, Data: f.Data(t)})
	}
	return out
}

func TestEmptyFile(t *testing.T) {
	f, err := Parse(writeFile(t, nil, nil, 0))
	require.NoError(t, err)
	assert.Empty(t, f.KV)
	assert.Empty(t, f.Tensors)
	assert.Equal(t, int64(32), f.DataOffset)
}

func TestVersion2(t *testing.T) {
	data := writeFile(t, allValues(), testTensors(rand.New(rand.NewPCG(3, 4))), 0)
	data[4] = 2 // version 2 has the same layout as version 3
	f, err := Parse(data)
	require.NoError(t, err)
	assert.Equal(t, uint32(2), f.Version)
}

func TestTensorElements(t *testing.T) {
	tt := Tensor{Dims: []int64{512, 8192}}
	assert.Equal(t, int64(512*8192), tt.Elements())
}

func TestGetters(t *testing.T) {
	f, err := Parse(writeFile(t, append(allValues(),
		KeyValue{"neg.int8", Int8(-1)},
		KeyValue{"small.uint64", Uint64(7)},
		KeyValue{"big.uint32s", Array([]uint32{math.MaxUint32})},
		KeyValue{"neg.int64s", Array([]int64{-5, math.MinInt32})},
	), nil, 0))
	require.NoError(t, err)

	tests := []struct {
		name    string
		get     func() (any, error)
		want    any
		wantErr string
	}{
		{"String", func() (any, error) { return f.String("general.architecture") }, "llama", ""},
		{"String wrong type", func() (any, error) { return f.String("t.uint32") }, nil, `key "t.uint32" is uint32, want string`},
		{"String missing", func() (any, error) { return f.String("general.name") }, nil, `gguf: <memory>: key "general.name" not found`},
		{"Uint uint8", func() (any, error) { return f.Uint("t.uint8") }, uint64(200), ""},
		{"Uint uint32", func() (any, error) { return f.Uint("t.uint32") }, uint64(4_000_000_000), ""},
		{"Uint uint64", func() (any, error) { return f.Uint("t.uint64") }, uint64(math.MaxUint64), ""},
		{"Uint int32 negative", func() (any, error) { return f.Uint("t.int32") }, nil, `key "t.int32" is int32, want an integer ≥ 0`},
		{"Uint float", func() (any, error) { return f.Uint("t.float32") }, nil, `key "t.float32" is float32`},
		{"Int int8", func() (any, error) { return f.Int("t.int8") }, int64(-100), ""},
		{"Int uint32", func() (any, error) { return f.Int("t.uint32") }, int64(4_000_000_000), ""},
		{"Int small uint64", func() (any, error) { return f.Int("small.uint64") }, int64(7), ""},
		{"Int huge uint64", func() (any, error) { return f.Int("t.uint64") }, nil, `key "t.uint64" is uint64, want an integer that fits int64`},
		{"Float float32", func() (any, error) { return f.Float("t.float32") }, float64(float32(1e-5)), ""},
		{"Float float64", func() (any, error) { return f.Float("t.float64") }, -2.5e300, ""},
		{"Float string", func() (any, error) { return f.Float("t.string") }, nil, `key "t.string" is string, want float32 or float64`},
		{"Bool", func() (any, error) { return f.Bool("t.bool") }, true, ""},
		{"Bool int", func() (any, error) { return f.Bool("t.uint8") }, nil, `key "t.uint8" is uint8, want bool`},
		{"Strings", func() (any, error) { return f.Strings("a.string") }, []string{"<s>", "", "▁the", "\n"}, ""},
		{"Strings ints", func() (any, error) { return f.Strings("a.int32") }, nil, `key "a.int32" is array of int32, want array of string`},
		{"Float32s", func() (any, error) { return f.Float32s("a.float32") }, []float32{0.5, -1, float32(math.Inf(1))}, ""},
		{"Float32s scalar", func() (any, error) { return f.Float32s("t.float32") }, nil, `key "t.float32" is float32, want array of float32`},
		{"Int32s int32", func() (any, error) { return f.Int32s("a.int32") }, []int32{1, 2, 3, 6}, ""},
		{"Int32s uint8", func() (any, error) { return f.Int32s("a.uint8") }, []int32{0, 1, 255}, ""},
		{"Int32s int8", func() (any, error) { return f.Int32s("a.int8") }, []int32{-128, 0, 127}, ""},
		{"Int32s int16", func() (any, error) { return f.Int32s("a.int16") }, []int32{-32768, 32767}, ""},
		{"Int32s uint32 small", func() (any, error) { return f.Int32s("a.empty") }, []int32{}, ""},
		{"Int32s int64 fits", func() (any, error) { return f.Int32s("neg.int64s") }, []int32{-5, math.MinInt32}, ""},
		{"Int32s uint32 too big", func() (any, error) { return f.Int32s("big.uint32s") }, nil, `key "big.uint32s" is array of uint32, want array of integers that fit int32`},
		{"Int32s int64 too big", func() (any, error) { return f.Int32s("a.int64") }, nil, `key "a.int64" is array of int64`},
		{"Int32s floats", func() (any, error) { return f.Int32s("a.float32") }, nil, `key "a.float32" is array of float32`},
		{"Int32s missing", func() (any, error) { return f.Int32s("tokenizer.ggml.token_type") }, nil, `key "tokenizer.ggml.token_type" not found`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.get()
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				assert.Contains(t, err.Error(), "gguf: <memory>: ")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
	assert.True(t, f.Has("a.nested"))
}

func TestValue(t *testing.T) {
	tests := []struct {
		v    Value
		typ  Type
		elem Type
		str  string
	}{
		{Uint8(1), TypeUint8, TypeUint8, "1"},
		{Int8(-1), TypeInt8, TypeInt8, "-1"},
		{Uint16(1), TypeUint16, TypeUint16, "1"},
		{Int16(-1), TypeInt16, TypeInt16, "-1"},
		{Uint32(1), TypeUint32, TypeUint32, "1"},
		{Int32(-1), TypeInt32, TypeInt32, "-1"},
		{Float32(0.5), TypeFloat32, TypeFloat32, "0.5"},
		{Bool(true), TypeBool, TypeBool, "true"},
		{String("a\"b"), TypeString, TypeString, `"a\"b"`},
		{Uint64(1), TypeUint64, TypeUint64, "1"},
		{Int64(-1), TypeInt64, TypeInt64, "-1"},
		{Float64(0.25), TypeFloat64, TypeFloat64, "0.25"},
		{Array([]uint8{1}), TypeArray, TypeUint8, "[1]"},
		{Array([]int8{1}), TypeArray, TypeInt8, "[1]"},
		{Array([]uint16{1}), TypeArray, TypeUint16, "[1]"},
		{Array([]int16{1}), TypeArray, TypeInt16, "[1]"},
		{Array([]uint32{1}), TypeArray, TypeUint32, "[1]"},
		{Int32s([]int32{1, 2}), TypeArray, TypeInt32, "[1 2]"},
		{Float32s([]float32{1}), TypeArray, TypeFloat32, "[1]"},
		{Array([]bool{false}), TypeArray, TypeBool, "[false]"},
		{Strings([]string{"a", "b"}), TypeArray, TypeString, `["a" "b"]`},
		{Array([]uint64{1}), TypeArray, TypeUint64, "[1]"},
		{Array([]int64{1}), TypeArray, TypeInt64, "[1]"},
		{Array([]float64{1}), TypeArray, TypeFloat64, "[1]"},
		{Array([]Value{Strings([]string{"x"})}), TypeArray, TypeArray, `[["x"]]`},
		{Array(make([]int32, 10)), TypeArray, TypeInt32, "[0 0 0 0 0 0 0 0 … (10 elements)]"},
		{Value{}, invalidType, invalidType, "<nil>"},
	}
	for _, tc := range tests {
		t.Run(tc.str, func(t *testing.T) {
			assert.Equal(t, tc.typ, tc.v.Type())
			assert.Equal(t, tc.elem, tc.v.Elem())
			assert.Equal(t, tc.str, tc.v.String())
		})
	}
	assert.Equal(t, "float32", TypeFloat32.String())
	assert.Equal(t, "type(13)", Type(13).String())
	assert.Equal(t, []string{"x"}, Strings([]string{"x"}).Any())
}

// raw builds GGUF bytes by hand, valid or not.
type raw []byte

func header(version uint32, tensors, kvs uint64) raw {
	return raw("GGUF").u32(version).u64(tensors).u64(kvs)
}

func (r raw) u32(v uint32) raw    { return binary.LittleEndian.AppendUint32(r, v) }
func (r raw) u64(v uint64) raw    { return binary.LittleEndian.AppendUint64(r, v) }
func (r raw) str(s string) raw    { return append(r.u64(uint64(len(s))), s...) }
func (r raw) bytes(p ...byte) raw { return append(r, p...) }

// kv appends a key, a type and the value's encoding.
func (r raw) kv(key string, t Type, value raw) raw {
	return append(r.str(key).u32(uint32(t)), value...)
}

// tensor appends a tensor info.
func (r raw) tensor(name string, typ dtype.DType, offset uint64, dims ...uint64) raw {
	r = r.str(name).u32(uint32(len(dims)))
	for _, d := range dims {
		r = r.u64(d)
	}
	return r.u32(uint32(typ)).u64(offset)
}

// pad appends zeros up to a multiple of 32 and then n bytes of data.
func (r raw) pad(n int) raw {
	return append(r, make([]byte, int(alignUp(int64(len(r)), 32))-len(r)+n)...)
}

func nested(depth int) raw {
	if depth == 0 {
		return raw{}.u32(uint32(TypeUint8)).u64(1).bytes(7)
	}
	return append(raw{}.u32(uint32(TypeArray)).u64(1), nested(depth-1)...)
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		data raw
		want string // substring of the error, after "gguf: <memory>: "
	}{
		{"empty", raw{}, "unexpected end of file while reading the header"},
		{"short header", raw("GGUF").u32(3), "unexpected end of file while reading the header"},
		{"magic", raw("GGML").u32(3).u64(0).u64(0), `not a GGUF file (magic "GGML", want "GGUF")`},
		{"short bad magic", raw("\x00\x01\x02\x03\x04"), `not a GGUF file (magic "\x00\x01\x02\x03"`},
		{"version 1", header(1, 0, 0), "GGUF version 1 is not supported (only versions 2 and 3)"},
		{"version 4", header(4, 0, 0), "GGUF version 4 is not supported"},
		{"big-endian", header(3<<24, 0, 0), "big-endian GGUF files are not supported"},
		{"truncated key", header(3, 0, 1).u64(10).bytes('a'), "unexpected end of file while reading the key of metadata entry 0"},
		{"missing kv", header(3, 0, 2).kv("a", TypeUint8, raw{1}), "unexpected end of file while reading the key of metadata entry 1"},
		{"huge kv count", header(3, 0, math.MaxUint64), "unexpected end of file while reading the key of metadata entry 0"},
		{"missing type", header(3, 0, 1).str("a"), `key "a": unexpected end of file while reading its value type`},
		{"truncated uint32", header(3, 0, 1).kv("a", TypeUint32, raw{1, 2}), `key "a": unexpected end of file while reading a uint32`},
		{"duplicate key", header(3, 0, 2).kv("a", TypeUint8, raw{1}).kv("a", TypeUint8, raw{2}), `key "a": duplicate key (metadata entry 1)`},
		{"unknown value type", header(3, 0, 1).kv("a", 13, raw{1}), `key "a": unknown value type 13`},
		{"bad bool", header(3, 0, 1).kv("a", TypeBool, raw{2}), `key "a": bool value 2, want 0 or 1`},
		{"bad bool in array", header(3, 0, 1).kv("a", TypeArray, raw{}.u32(uint32(TypeBool)).u64(2).bytes(1, 3)), `key "a": array element 1: bool value 3`},
		{"huge string", header(3, 0, 1).kv("a", TypeString, raw{}.u64(math.MaxUint64)), `key "a": unexpected end of file while reading a string`},
		{"huge array", header(3, 0, 1).kv("tokenizer.ggml.scores", TypeArray, raw{}.u32(uint32(TypeFloat32)).u64(1<<40)), `key "tokenizer.ggml.scores": unexpected end of file while reading an array of 1099511627776 float32 values`},
		{"huge string array", header(3, 0, 1).kv("a", TypeArray, raw{}.u32(uint32(TypeString)).u64(1<<40)), `key "a": unexpected end of file while reading an array of 1099511627776 strings`},
		{"truncated string array", header(3, 0, 1).kv("a", TypeArray, raw{}.u32(uint32(TypeString)).u64(2).str("x").u64(5).bytes('a')), `key "a": unexpected end of file while reading string 1 of an array of 2`},
		{"huge nested array", header(3, 0, 1).kv("a", TypeArray, raw{}.u32(uint32(TypeArray)).u64(1<<40)), `key "a": unexpected end of file while reading an array of 1099511627776 array values`},
		{"truncated array header", header(3, 0, 1).kv("a", TypeArray, raw{}.u32(uint32(TypeFloat32))), `key "a": unexpected end of file while reading an array header`},
		{"array of unknown type", header(3, 0, 1).kv("a", TypeArray, raw{}.u32(99).u64(0)), `key "a": array of unknown value type 99`},
		{"nested 4 deep", header(3, 0, 1).kv("a", TypeArray, nested(4)), `key "a": array element 0: array element 0: array element 0: array element 0: arrays nested more than 4 deep`},
		{"nested 4 deep is fine but truncated", header(3, 0, 1).kv("a", TypeArray, nested(3)[:48]), `key "a": array element 0: array element 0: array element 0: unexpected end of file while reading an array of 1 uint8 values`},
		{"alignment type", header(3, 0, 1).kv(AlignmentKey, TypeUint64, raw{}.u64(32)), `key "general.alignment": alignment is uint64, want uint32`},
		{"alignment zero", header(3, 0, 1).kv(AlignmentKey, TypeUint32, raw{}.u32(0)), `key "general.alignment": alignment 0 is not a power of two`},
		{"alignment 48", header(3, 0, 1).kv(AlignmentKey, TypeUint32, raw{}.u32(48)), `key "general.alignment": alignment 48 is not a power of two`},
		{"huge tensor count", header(3, math.MaxUint64, 0), "unexpected end of file while reading tensor info 0"},
		{"truncated tensor info 3", header(3, 4, 0).
			tensor("a", dtype.F32, 0, 8).tensor("b", dtype.F32, 32, 8).tensor("c", dtype.F32, 64, 8).
			str("d").u32(2).u64(8), `tensor "d": unexpected end of file while reading tensor info 3`},
		{"truncated tensor name", header(3, 1, 0).u64(100).bytes('x'), "unexpected end of file while reading tensor info 0"},
		{"duplicate tensor", header(3, 2, 0).tensor("w", dtype.F32, 0, 8).tensor("w", dtype.F32, 32, 8).pad(64), `tensor "w": duplicate tensor name (tensor info 1)`},
		{"zero dims", header(3, 1, 0).tensor("w", dtype.F32, 0).pad(32), `tensor "w": 0 dimensions, want 1 to 4`},
		{"five dims", header(3, 1, 0).tensor("w", dtype.F32, 0, 1, 1, 1, 1, 1).pad(32), `tensor "w": 5 dimensions, want 1 to 4`},
		{"dim zero", header(3, 1, 0).tensor("w", dtype.F32, 0, 8, 0).pad(32), `tensor "w": dimension 1 is 0, want at least 1`},
		{"dim negative", header(3, 1, 0).tensor("w", dtype.F32, 0, 8, 1<<63).pad(32), `tensor "w": dimension 1 is 9223372036854775808, beyond the int64 range`},
		{"element overflow", header(3, 1, 0).tensor("w", dtype.F32, 0, 1<<32, 1<<32).pad(32), `tensor "w": dimensions [4294967296 4294967296] overflow the element count`},
		{"size overflow", header(3, 1, 0).tensor("w", dtype.F32, 0, 1<<31, 1<<31).pad(32), `tensor "w": shape [2147483648 2147483648]: dtype: 4611686018427387904 values of F32 overflow`},
		{"unknown type", header(3, 1, 0).tensor("blk.0.ffn_up.weight", 99, 0, 32).pad(32), `tensor "blk.0.ffn_up.weight": unsupported tensor type 99`},
		{"removed Q4_2", header(3, 1, 0).tensor("w", 4, 0, 32).pad(32), `tensor "w": unsupported tensor type 4`},
		{"specula's FP8", header(3, 1, 0).tensor("w", dtype.F8_E4M3_B128, 0, 128).pad(160), `tensor "w": unsupported tensor type 1001: F8_E4M3_B128 is specula's own, not a GGUF type`},
		{"specula's Q4_Z", header(3, 1, 0).tensor("w", 1000, 0, 32).pad(32), `tensor "w": unsupported tensor type 1000: Q4_Z is specula's own`},
		{"specula's Q4_Z128", header(3, 1, 0).tensor("w", 1002, 0, 128).pad(96), `tensor "w": unsupported tensor type 1002: Q4_Z128 is specula's own`},
		{"row length", header(3, 1, 0).tensor("w", dtype.Q8_0, 0, 33, 32).pad(34 * 33), `tensor "w": row length 33 is not a multiple of the Q8_0 block size 32`},
		{"misaligned", header(3, 1, 0).tensor("w", dtype.F32, 4, 8).pad(64), `tensor "w": data offset 4 is not a multiple of the alignment 32`},
		{"misaligned 64", header(3, 1, 1).kv(AlignmentKey, TypeUint32, raw{}.u32(64)).tensor("w", dtype.F32, 32, 8).pad(128), `tensor "w": data offset 32 is not a multiple of the alignment 64`},
		{"huge offset", header(3, 1, 0).tensor("w", dtype.F32, 1<<63, 8).pad(32), `tensor "w": data offset 9223372036854775808 beyond the end of the file (size 96)`},
		{"data beyond end", header(3, 2, 0).tensor("blk.0.attn_q.weight", dtype.F32, 0, 8).tensor("blk.0.attn_k.weight", dtype.F32, 32, 8).pad(40), `tensor "blk.0.attn_k.weight": data [160, 192) beyond the end of the file (size 168)`},
		{"offset beyond end", header(3, 1, 0).tensor("w", dtype.F32, 1<<40, 8).pad(32), `tensor "w": data [1099511627840, 1099511627872) beyond the end of the file (size 96)`},
		{"no padding", header(3, 1, 0).tensor("w", dtype.F32, 0, 1), `tensor "w": data [64, 68) beyond the end of the file (size 57)`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.data)
			require.Error(t, err)
			assert.Equal(t, "gguf: <memory>: ", err.Error()[:min(len(err.Error()), 16)])
			assert.Contains(t, err.Error(), tc.want)
			if strings.Contains(tc.want, "unexpected end of file") {
				assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
			}
		})
	}
}

func TestOpenErrorsNameTheFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "model.gguf")
	require.NoError(t, os.WriteFile(path, header(3, 1, 0).tensor("blk.0.attn_q.weight", dtype.F32, 0, 64).pad(16), 0o644))
	_, err := Open(path)
	require.Error(t, err)
	assert.Equal(t, `gguf: `+path+`: tensor "blk.0.attn_q.weight": data [96, 352) beyond the end of the file (size 112)`, err.Error())

	_, err = Open(filepath.Join(dir, "missing.gguf"))
	require.Error(t, err)
	assert.ErrorIs(t, err, os.ErrNotExist)
	assert.Contains(t, err.Error(), "missing.gguf")

	empty := filepath.Join(dir, "empty.gguf")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	_, err = Open(empty)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "gguf: "+empty+": unexpected end of file while reading the header")

	_, err = Open(dir) // a directory: neither mapped nor read
	require.Error(t, err)
}

func TestTruncated(t *testing.T) {
	data := writeFile(t, allValues(), testTensors(rand.New(rand.NewPCG(5, 6))), 0)
	f, err := Parse(data)
	require.NoError(t, err)
	last := f.Tensors[len(f.Tensors)-1]
	require.Equal(t, int64(len(data)), f.DataOffset+last.Offset+last.Size, "the file must end with tensor data")
	for n := range len(data) {
		_, err := Parse(data[:n])
		require.Error(t, err, "file cut to %d of %d bytes", n, len(data))
	}
}

func TestCorrupted(t *testing.T) {
	// Flipping any byte of the header and table never panics; most flips are errors.
	data := writeFile(t, allValues(), testTensors(rand.New(rand.NewPCG(7, 8))), 0)
	f, err := Parse(data)
	require.NoError(t, err)
	for i := range int(f.DataOffset) {
		for _, x := range []byte{0x01, 0x80, 0xff} {
			c := bytes.Clone(data)
			c[i] ^= x
			if g, err := Parse(c); err == nil {
				for j := range g.Tensors {
					require.Len(t, g.Data(&g.Tensors[j]), int(g.Tensors[j].Size))
				}
			}
		}
	}
}

func TestWriteErrors(t *testing.T) {
	f32 := func(name string, n int) TensorData {
		return TensorData{Name: name, Type: dtype.F32, Dims: []int64{int64(n)}, Data: make([]byte, 4*n)}
	}
	tests := []struct {
		name      string
		kv        []KeyValue
		tensors   []TensorData
		alignment int
		want      string
	}{
		{"duplicate key", []KeyValue{{"a", Uint8(1)}, {"a", Uint8(2)}}, nil, 0, `gguf: write: key "a": duplicate key`},
		{"empty value", []KeyValue{{"a", Value{}}}, nil, 0, `gguf: write: key "a": empty value`},
		{"scalar in array of arrays", []KeyValue{{"a", Array([]Value{Strings(nil), Uint8(1)})}}, nil, 0, `key "a": array element 1 is uint8: an array of arrays holds only arrays`},
		{"empty value in array of arrays", []KeyValue{{"a", Array([]Value{{}})}}, nil, 0, `key "a": array element 0 is type(4294967295)`},
		{"too deep", []KeyValue{{"a", Array([]Value{Array([]Value{Array([]Value{Array([]Value{Array([]uint8{})})})})})}}, nil, 0, `key "a": array element 0: array element 0: array element 0: array element 0: arrays nested more than 4 deep`},
		{"duplicate tensor", nil, []TensorData{f32("w", 8), f32("w", 8)}, 0, `gguf: write: tensor "w": duplicate tensor name`},
		{"data size", nil, []TensorData{{Name: "w", Type: dtype.Q8_0, Dims: []int64{32, 2}, Data: make([]byte, 64)}}, 0, `tensor "w": 64 bytes of data, want 68 for Q8_0 [32 2]`},
		{"unknown type", nil, []TensorData{{Name: "w", Type: 99, Dims: []int64{1}, Data: make([]byte, 1)}}, 0, `tensor "w": unsupported tensor type 99`},
		{"specula's FP8", nil, []TensorData{{Name: "w", Type: dtype.F8_E4M3_B128, Dims: []int64{128}, Data: make([]byte, 132)}}, 0, `gguf: write: tensor "w": unsupported tensor type 1001: F8_E4M3_B128 is specula's own, not a GGUF type`},
		{"specula's Q4_Z", nil, []TensorData{{Name: "w", Type: dtype.Q4_Z, Dims: []int64{32}, Data: make([]byte, 20)}}, 0, `tensor "w": unsupported tensor type 1000: Q4_Z is specula's own`},
		{"specula's Q4_Z128", nil, []TensorData{{Name: "w", Type: dtype.Q4_Z128, Dims: []int64{128}, Data: make([]byte, 68)}}, 0, `tensor "w": unsupported tensor type 1002: Q4_Z128 is specula's own`},
		{"no dims", nil, []TensorData{{Name: "w", Type: dtype.F32, Data: nil}}, 0, `tensor "w": 0 dimensions, want 1 to 4`},
		{"negative dim", nil, []TensorData{{Name: "w", Type: dtype.F32, Dims: []int64{-1}}}, 0, `tensor "w": dimension 0 is -1, want at least 1`},
		{"row length", nil, []TensorData{{Name: "w", Type: dtype.Q4_K, Dims: []int64{128, 2}, Data: make([]byte, 144)}}, 0, `tensor "w": row length 128 is not a multiple of the Q4_K block size 256`},
		{"alignment not power of two", nil, nil, 48, `alignment 48 needs general.alignment`},
		{"alignment not power of two in kv", []KeyValue{{AlignmentKey, Uint32(48)}}, nil, 48, `alignment 48 is not a power of two`},
		{"alignment zero in kv", []KeyValue{{AlignmentKey, Uint32(0)}}, nil, 0, `alignment 0 is not a power of two`},
		{"negative alignment", nil, nil, -32, `alignment -32 needs general.alignment`},
		{"alignment mismatch", []KeyValue{{AlignmentKey, Uint32(64)}}, nil, 32, `alignment 32 differs from general.alignment 64`},
		{"alignment type", []KeyValue{{AlignmentKey, Uint64(64)}}, nil, 0, `key "general.alignment": alignment is uint64, want uint32`},
		{"data and WriteTo", nil, []TensorData{{Name: "w", Type: dtype.F32, Dims: []int64{1}, Data: make([]byte, 4), WriteTo: func(io.Writer) error { return nil }}}, 0, `tensor "w": both Data and WriteTo are set`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			err := Write(&buf, tc.kv, tc.tensors, tc.alignment)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Zero(t, buf.Len(), "nothing is written on a validation error")
		})
	}
}

type failWriter struct{ n int }

func (w *failWriter) Write(p []byte) (int, error) {
	if w.n <= 0 {
		return 0, errors.New("disk full")
	}
	w.n--
	return len(p), nil
}

func TestWriteIOError(t *testing.T) {
	tensors := testTensors(rand.New(rand.NewPCG(9, 10)))
	for n := range 6 {
		err := Write(&failWriter{n: n}, allValues(), tensors, 0)
		require.Error(t, err, "failing after %d writes", n)
		assert.Contains(t, err.Error(), "disk full")
	}
}

// TestWriteStreamed: a tensor written through WriteTo makes the same file as one
// written from Data, and WriteTo must write exactly the tensor's size.
func TestWriteStreamed(t *testing.T) {
	tensors := testTensors(rand.New(rand.NewPCG(11, 12)))
	var want bytes.Buffer
	require.NoError(t, Write(&want, allValues(), tensors, 0))
	streamed := make([]TensorData, len(tensors))
	for i, td := range tensors {
		data := td.Data
		td.Data = nil
		td.WriteTo = func(w io.Writer) error {
			for len(data) > 0 { // in pieces, as a generator would
				n := min(len(data), 7)
				if _, err := w.Write(data[:n]); err != nil {
					return err
				}
				data = data[n:]
			}
			return nil
		}
		streamed[i] = td
	}
	var got bytes.Buffer
	require.NoError(t, Write(&got, allValues(), streamed, 0))
	assert.Equal(t, want.Bytes(), got.Bytes())

	short := []TensorData{{Name: "w", Type: dtype.F32, Dims: []int64{4}, WriteTo: func(w io.Writer) error {
		_, err := w.Write(make([]byte, 12))
		return err
	}}}
	err := Write(io.Discard, nil, short, 0)
	assert.ErrorContains(t, err, `tensor "w": WriteTo wrote 12 bytes, want 16 for F32 [4]`)
	failing := []TensorData{{Name: "w", Type: dtype.F32, Dims: []int64{4}, WriteTo: func(io.Writer) error { return errors.New("generator broke") }}}
	assert.ErrorContains(t, Write(io.Discard, nil, failing, 0), "generator broke")
}

// modelsDir is ../shared/models beside the repository, seen from this package.
var modelsDir = filepath.Join("..", "..", "..", "shared", "models")

func TestRealFiles(t *testing.T) {
	tests := []struct {
		file      string
		arch      string
		blocks    uint64
		embedDims []int64
	}{
		{"stories260K.gguf", "llama", 5, []int64{64, 512}},
		{"gocoder-m-f16.gguf", "llama", 8, []int64{512, 8192}},
		{"gocoder-m-q8_0.gguf", "llama", 8, []int64{512, 8192}},
		{"tiny-qwen2-random-f32.gguf", "qwen2", 2, []int64{128, 8192}},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join(modelsDir, tc.file)
			if _, err := os.Stat(path); err != nil {
				t.Skipf("%s not available: %v", path, err)
			}
			f, err := Open(path)
			require.NoError(t, err)
			defer f.Close()

			arch, err := f.String("general.architecture")
			require.NoError(t, err)
			assert.Equal(t, tc.arch, arch)
			blocks, err := f.Uint(arch + ".block_count")
			require.NoError(t, err)
			assert.Equal(t, tc.blocks, blocks)
			t.Logf("version %d, alignment %d, data at %d, %d keys, %d tensors", f.Version, f.Alignment, f.DataOffset, len(f.KV), len(f.Tensors))

			emb, ok := f.Tensor("token_embd.weight")
			require.True(t, ok, "token_embd.weight")
			t.Logf("token_embd.weight: %s %v", emb.Type, emb.Dims)
			assert.Equal(t, tc.embedDims, emb.Dims)

			fileSize := int64(len(f.data))
			types := map[dtype.DType]int{}
			for i := range f.Tensors {
				tt := &f.Tensors[i]
				types[tt.Type]++
				d := f.Data(tt)
				require.Len(t, d, int(tt.Size), tt.Name)
				assert.LessOrEqual(t, f.DataOffset+tt.Offset+tt.Size, fileSize, tt.Name)
				if strings.HasPrefix(tt.Name, "blk.0.") || !strings.HasPrefix(tt.Name, "blk.") {
					t.Logf("  %-28s %-5s %v", tt.Name, tt.Type, tt.Dims)
				}
			}
			t.Logf("tensor types: %v", types)

			for _, kv := range f.KV {
				t.Logf("  %-40s %-8s %s", kv.Key, kindOf(kv.Value), kv.Value)
			}
			if f.Has("tokenizer.ggml.tokens") {
				toks, err := f.Strings("tokenizer.ggml.tokens")
				require.NoError(t, err)
				vocab, err := f.Uint(arch + ".vocab_size")
				if err == nil {
					assert.Equal(t, vocab, uint64(len(toks)))
				}
				assert.Equal(t, int64(len(toks)), emb.Dims[1], "vocabulary size")
				if f.Has("tokenizer.ggml.token_type") {
					tt, err := f.Int32s("tokenizer.ggml.token_type")
					require.NoError(t, err)
					assert.Len(t, tt, len(toks))
				}
			}
		})
	}
}

func kindOf(v Value) string {
	if v.Type() == TypeArray {
		return "[]" + v.Elem().String()
	}
	return v.Type().String()
}

// BenchmarkParse parses a file shaped like a large model's header: a 150,000-token
// vocabulary with scores, token types and merges, and 3,000 tensors.
func BenchmarkParse(b *testing.B) {
	const vocab = 150_000
	toks := make([]string, vocab)
	scores := make([]float32, vocab)
	types := make([]int32, vocab)
	for i := range toks {
		toks[i] = strings.Repeat("x", i%13+1)
		scores[i] = float32(i)
		types[i] = 1
	}
	kv := []KeyValue{
		{"general.architecture", String("llama")},
		{"tokenizer.ggml.tokens", Strings(toks)},
		{"tokenizer.ggml.scores", Float32s(scores)},
		{"tokenizer.ggml.token_type", Int32s(types)},
		{"tokenizer.ggml.merges", Strings(toks)},
	}
	var tensors []TensorData
	one := make([]byte, 4*32)
	for i := range 3000 {
		tensors = append(tensors, TensorData{Name: "blk." + strconv.Itoa(i) + ".attn_q.weight", Type: dtype.F32, Dims: []int64{32}, Data: one})
	}
	data := writeFile(b, kv, tensors, 0)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(data); err != nil {
			b.Fatal(err)
		}
	}
}

// TestWriteFile: the file appears whole, readable by all, or not at all.
func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "m.gguf")
	require.NoError(t, WriteFile(path, func(w io.Writer) error {
		_, err := w.Write([]byte("GGUF"))
		return err
	}))
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "GGUF", string(got))
	st, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o644), st.Mode().Perm())

	failed := filepath.Join(dir, "failed.gguf")
	err = WriteFile(failed, func(w io.Writer) error {
		_, _ = w.Write([]byte("GG"))
		return errors.New("disk on fire")
	})
	assert.ErrorContains(t, err, "disk on fire")
	assert.NoFileExists(t, failed)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary file is left behind")
}
