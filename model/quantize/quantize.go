// Package quantize converts models to quantised GGUF files: a GGUF file with float
// weights (F32, F16, BF16), or a Hugging Face safetensors directory of a Llama or Qwen2
// model, becomes a GGUF file whose weight matrices are Q8_0 or Q4_0. Norms, biases and
// matrices whose rows are not a whole number of 32-value blocks keep their type.
//
// A directory is converted the way llama.cpp's converter does it: llama metadata, the
// Q and K rows of `llama` models permuted for interleaved rotary pairs, tied output
// weights left out, llama3 rope scaling stored as rope_freqs.weight, and a byte-level
// BPE tokenizer.json carried over as a gpt2 GGUF tokenizer.
package quantize

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/specula/specula/internal/kernels"
	"github.com/specula/specula/model/dtype"
	"github.com/specula/specula/model/gguf"
)

// Report says what a conversion did.
type Report struct {
	// Quantized counts the matrices converted, Kept the tensors left as they were.
	Quantized, Kept int
	// BytesIn and BytesOut are the tensor data sizes before and after.
	BytesIn, BytesOut int64
	// Notes lists anything the caller should know (a tokenizer left out, …).
	Notes []string
}

// fileType is general.file_type for a whole-model quantisation (llama.cpp's
// LLAMA_FTYPE_MOSTLY_*).
func fileType(t dtype.DType) uint32 {
	if t == dtype.Q4_0 {
		return 2
	}
	return 7 // Q8_0
}

// quantizable reports whether a tensor of this name and shape (innermost dimension
// first) becomes quantised.
func quantizable(name string, dims []int64) bool {
	return len(dims) == 2 && dims[0]%32 == 0 && strings.HasSuffix(name, ".weight") && name != "rope_freqs.weight"
}

// convert returns the tensor's data as type t (a quantised type) when it qualifies,
// else unchanged; src must be a float type.
func convert(name string, typ dtype.DType, dims []int64, data []byte, t dtype.DType, r *Report) (dtype.DType, []byte, error) {
	r.BytesIn += int64(len(data))
	if !quantizable(name, dims) {
		r.Kept++
		r.BytesOut += int64(len(data))
		return typ, data, nil
	}
	switch typ {
	case dtype.F32, dtype.F16, dtype.BF16:
	default:
		return 0, nil, fmt.Errorf("tensor %q is %s: only F32, F16 and BF16 weights can be quantised", name, typ)
	}
	n := int64(1)
	for _, d := range dims {
		n *= d
	}
	vals := make([]float32, n)
	if err := kernels.Dequantize(typ, data, vals); err != nil {
		return 0, nil, fmt.Errorf("tensor %q: %w", name, err)
	}
	out, err := kernels.Encode(t, vals)
	if err != nil {
		return 0, nil, fmt.Errorf("tensor %q: %w", name, err)
	}
	r.Quantized++
	r.BytesOut += int64(len(out))
	return t, out, nil
}

// File converts src (a GGUF file or a Hugging Face directory) to a GGUF file at dst
// whose weight matrices have type t (Q8_0 or Q4_0).
func File(ctx context.Context, src, dst string, t dtype.DType) (Report, error) {
	if t != dtype.Q8_0 && t != dtype.Q4_0 {
		return Report{}, fmt.Errorf("quantize: target type %s is not supported (Q8_0 and Q4_0 are)", t)
	}
	st, err := os.Stat(src)
	if err != nil {
		return Report{}, fmt.Errorf("quantize: %w", err)
	}
	var kv []gguf.KeyValue
	var tensors []gguf.TensorData
	var r Report
	var closeSrc func() error
	if st.IsDir() {
		kv, tensors, closeSrc, err = fromHF(ctx, src, t, &r)
	} else {
		kv, tensors, closeSrc, err = fromGGUF(ctx, src, t, &r)
	}
	if err != nil {
		return r, fmt.Errorf("quantize: %s: %w", src, err)
	}
	defer closeSrc()
	if err := writeFile(dst, kv, tensors); err != nil {
		return r, fmt.Errorf("quantize: %w", err)
	}
	return r, nil
}

// writeFile writes the GGUF file to a temporary name and renames it into place, so
// that a failure leaves no half-written file at dst.
func writeFile(dst string, kv []gguf.KeyValue, tensors []gguf.TensorData) error {
	tmp, err := os.CreateTemp(dirOf(dst), ".quantize-*.gguf")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := gguf.Write(tmp, kv, tensors, 0); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", dst, err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}

func dirOf(path string) string {
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		return path[:i+1]
	}
	return "."
}

// fromGGUF re-encodes a GGUF file's weights, keeping its metadata.
func fromGGUF(ctx context.Context, src string, t dtype.DType, r *Report) ([]gguf.KeyValue, []gguf.TensorData, func() error, error) {
	f, err := gguf.Open(src)
	if err != nil {
		return nil, nil, nil, err
	}
	var kv []gguf.KeyValue
	for _, e := range f.KV {
		if e.Key == "general.file_type" || e.Key == gguf.AlignmentKey {
			continue
		}
		kv = append(kv, e)
	}
	kv = append(kv, gguf.KeyValue{Key: "general.file_type", Value: gguf.Uint32(fileType(t))})
	tensors := make([]gguf.TensorData, 0, len(f.Tensors))
	for i := range f.Tensors {
		if err := ctx.Err(); err != nil {
			f.Close()
			return nil, nil, nil, err
		}
		tn := &f.Tensors[i]
		typ, data, err := convert(tn.Name, tn.Type, tn.Dims, f.Data(tn), t, r)
		if err != nil {
			f.Close()
			return nil, nil, nil, err
		}
		tensors = append(tensors, gguf.TensorData{Name: tn.Name, Type: typ, Dims: tn.Dims, Data: data})
	}
	return kv, tensors, f.Close, nil
}
