package gguf_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"log"
	"math"

	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/format/gguf"
)

func Example() {
	// Write a tiny file: llama.cpp-style metadata and one F32 tensor of 4 × 2 values.
	weights := make([]byte, 0, 32)
	for i := range 8 {
		weights = binary.LittleEndian.AppendUint32(weights, math.Float32bits(float32(i)))
	}
	var buf bytes.Buffer
	err := gguf.Write(&buf, []gguf.KeyValue{
		{Key: "general.architecture", Value: gguf.String("llama")},
		{Key: "llama.block_count", Value: gguf.Uint32(1)},
		{Key: "llama.attention.layer_norm_rms_epsilon", Value: gguf.Float32(1e-5)},
		{Key: "tokenizer.ggml.tokens", Value: gguf.Strings([]string{"<s>", "</s>", "hi"})},
	}, []gguf.TensorData{
		{Name: "token_embd.weight", Type: dtype.F32, Dims: []int64{4, 2}, Data: weights},
	}, 0)
	if err != nil {
		log.Fatal(err)
	}

	// Read it back. gguf.Open does the same for a file, memory-mapped.
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		log.Fatal(err)
	}
	arch, _ := f.String("general.architecture")
	layers, _ := f.Uint(arch + ".block_count")
	eps, _ := f.Float(arch + ".attention.layer_norm_rms_epsilon")
	tokens, _ := f.Strings("tokenizer.ggml.tokens")
	fmt.Println(arch, layers, float32(eps), tokens)

	t, _ := f.Tensor("token_embd.weight")
	fmt.Println(t.Name, t.Type, t.Dims, t.Elements(), len(f.Data(t)))

	_, err = f.Uint("llama.context_length")
	fmt.Println(err)
	// Output:
	// llama 1 1e-05 [<s> </s> hi]
	// token_embd.weight F32 [4 2] 8 32
	// gguf: <memory>: key "llama.context_length" not found
}
