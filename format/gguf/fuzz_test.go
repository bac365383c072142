package gguf

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/specula/specula/format/dtype"
)

// FuzzParse checks that Parse never panics, that a parsed file's tensor data lies
// inside the input, and that writing a parsed file and parsing it again is stable.
func FuzzParse(f *testing.F) {
	rng := rand.New(rand.NewPCG(11, 12))
	full := writeFile(f, allValues(), testTensors(rng), 0)
	small := writeFile(f, []KeyValue{
		{"general.architecture", String("llama")},
		{"llama.block_count", Uint32(1)},
		{"tokenizer.ggml.tokens", Strings([]string{"a", "bc"})},
		{"n", Array([]Value{Int32s([]int32{1}), Array([]Value{Float32s(nil)})})},
	}, []TensorData{
		{Name: "w", Type: dtype.Q8_0, Dims: []int64{32, 1}, Data: make([]byte, 34)},
		{Name: "n", Type: dtype.F32, Dims: []int64{3}, Data: make([]byte, 12)},
	}, 0)
	aligned := writeFile(f, []KeyValue{{AlignmentKey, Uint32(8)}}, []TensorData{
		{Name: "a", Type: dtype.F16, Dims: []int64{3}, Data: make([]byte, 6)},
		{Name: "b", Type: dtype.Q4_K, Dims: []int64{256}, Data: make([]byte, 144)},
	}, 8)
	for _, seed := range [][]byte{full, small, aligned, writeFile(f, nil, nil, 0)} {
		f.Add(seed)
		f.Add(seed[:len(seed)/2])
		f.Add(seed[:len(seed)-1])
		for _, i := range []int{4, 8, 16, 40, len(seed) / 3} {
			c := bytes.Clone(seed)
			c[i%len(c)] ^= 0xff
			f.Add(c)
		}
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "gguf: <memory>: ") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		for i := range file.Tensors {
			tt := &file.Tensors[i]
			d := file.Data(tt)
			end := file.DataOffset + tt.Offset + tt.Size
			if int64(len(d)) != tt.Size || tt.Offset < 0 || end > int64(len(data)) {
				t.Fatalf("tensor %q: data [%d, %d) of a %d-byte file", tt.Name, end-tt.Size, end, len(data))
			}
		}
		for _, kv := range file.KV {
			_ = kv.Value.String()
			_, _ = file.Uint(kv.Key)
			_, _ = file.Int(kv.Key)
			_, _ = file.Int32s(kv.Key)
		}
		// Rewriting pads the header and every tensor to the alignment: skip files that
		// would grow to megabytes (many tensors at offset 0 of a 64 KiB alignment).
		grown := int64(file.Alignment)
		for _, tt := range file.Tensors {
			grown += alignUp(tt.Size, int64(file.Alignment))
		}
		if grown > 1<<20 {
			return
		}
		var once, twice bytes.Buffer
		if err := Write(&once, file.KV, tensorData(file), file.Alignment); err != nil {
			t.Fatalf("writing a parsed file: %v", err)
		}
		again, err := Parse(once.Bytes())
		if err != nil {
			t.Fatalf("parsing a rewritten file: %v", err)
		}
		if err := Write(&twice, again.KV, tensorData(again), again.Alignment); err != nil {
			t.Fatalf("writing a parsed file again: %v", err)
		}
		if !bytes.Equal(once.Bytes(), twice.Bytes()) {
			t.Fatal("rewriting is not stable")
		}
	})
}
