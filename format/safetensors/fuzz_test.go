package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"testing"
)

// FuzzParse checks that Parse never panics and that whatever it accepts is consistent:
// every tensor's data has exactly the size its type and shape call for, and lies inside
// the input.
func FuzzParse(f *testing.F) {
	f.Add(build(f, sampleTensors(), map[string]string{"format": "pt"}))
	f.Add(build(f, []testTensor{{"a", "BF16", []int64{2, 2}, seq(0, 8)}}, nil))
	f.Add(raw([]byte(`{}`), nil))
	f.Add(raw([]byte(`{"__metadata__":null,"a":{"dtype":"F4","shape":[3,0],"data_offsets":[0,0]}}`), nil))
	f.Add(raw([]byte(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`), seq(0, 8)))
	f.Add(raw([]byte(`{"a":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,1]}}`), seq(0, 1)))
	f.Add(binary.LittleEndian.AppendUint64(nil, 1<<63))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(data)
		if err != nil {
			if file != nil {
				t.Fatalf("Parse returned a file and the error %v", err)
			}
			return
		}
		defer file.Close()
		// What Parse accepts is JSON, and encoding/json sees the same tensor names.
		header := data[8 : 8+binary.LittleEndian.Uint64(data)]
		var keys map[string]json.RawMessage
		if err := json.Unmarshal(header, &keys); err != nil {
			t.Fatalf("Parse accepted a header that encoding/json rejects: %v", err)
		}
		delete(keys, "__metadata__")
		if len(keys) != len(file.Tensors()) {
			t.Fatalf("encoding/json finds %d tensors, Parse %d", len(keys), len(file.Tensors()))
		}
		for name := range keys {
			if _, ok := file.Tensor(name); !ok {
				t.Fatalf("encoding/json finds tensor %q, Parse does not", name)
			}
		}
		prev := ""
		for i, tensor := range file.Tensors() {
			if i > 0 && tensor.Name <= prev {
				t.Fatalf("tensors not sorted: %q after %q", tensor.Name, prev)
			}
			prev = tensor.Name
			if got, ok := file.Tensor(tensor.Name); !ok || got != tensor {
				t.Fatalf("Tensor(%q) does not find it", tensor.Name)
			}
			_, bits, ok := lookupType(tensor.TypeName)
			if !ok {
				t.Fatalf("tensor %q: accepted unknown dtype %q", tensor.Name, tensor.TypeName)
			}
			n := tensor.Elements()
			if n < 0 {
				t.Fatalf("tensor %q: shape %v gives %d elements", tensor.Name, tensor.Shape, n)
			}
			if want := n * bits / 8; int64(len(tensor.Data)) != want {
				t.Fatalf("tensor %q: %d bytes of data, want %d (%s %v)", tensor.Name, len(tensor.Data), want, tensor.TypeName, tensor.Shape)
			}
			if len(tensor.Data) > 0 && !within(tensor.Data, data) {
				t.Fatalf("tensor %q: data is not a slice of the input", tensor.Name)
			}
		}
	})
}
