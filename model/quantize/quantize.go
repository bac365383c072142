// Package quantize converts models to quantised GGUF files: a GGUF file with float
// weights (F32, F16, BF16), or a Hugging Face safetensors directory of a Llama or Qwen2
// model, becomes a GGUF file whose weight matrices have the types of one of llama.cpp's
// mixes (Q8_0, Q4_K_M, Q5_K_M, Q6_K, …), chosen tensor by tensor by llama.cpp's rules.
// Norms, biases and rotary factors keep their type.
//
// A directory is converted the way llama.cpp's converter does it: llama metadata, the
// Q and K rows of `llama` models permuted for interleaved rotary pairs, tied output
// weights left out, llama3 rope scaling stored as rope_freqs.weight, longrope's as
// rope_factors_long.weight and rope_factors_short.weight with its original context and
// attention factor as metadata, and the tokenizer.json carried over: byte-level BPE
// as a gpt2 GGUF tokenizer, SentencePiece-style BPE (Gemma 3) as a llama one, scored
// from its merges (see [TokenizerKV]).
package quantize

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/format/gguf"
)

// Report says what a conversion did.
type Report struct {
	// Types counts the tensors converted, by the type they were converted to; Kept
	// counts the tensors left as they were.
	Types map[dtype.DType]int
	Kept  int
	// Exact counts the linear layers of a quantized checkpoint written as their exact
	// Q4_0 or Q8_0 repacking, as they were.
	Exact int
	// BytesIn and BytesOut are the tensor data sizes before and after.
	BytesIn, BytesOut int64
	// Notes lists anything the caller should know (a tokenizer left out, …).
	Notes []string
}

// plan is how one conversion types its tensors: the mix, and what the mix's rules
// need to know about the model.
type plan struct {
	mix    Mix
	layers int
	tied   bool // no output.weight: the embedding serves as the output layer
}

// convert returns the tensor's data in the type the plan gives it; src must be a
// float type when the tensor is a matrix.
func (p plan) convert(name string, typ dtype.DType, dims []int64, data []byte, r *Report) (dtype.DType, []byte, error) {
	r.BytesIn += int64(len(data))
	t := typ
	if Matrix(name, dims) {
		t = p.mix.Type(name, dims[0], p.layers, p.tied)
	}
	if t == typ {
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
	if err := dtype.Dequantize(typ, data, vals); err != nil {
		return 0, nil, fmt.Errorf("tensor %q: %w", name, err)
	}
	out, err := dtype.Encode(t, vals)
	if err != nil {
		return 0, nil, fmt.Errorf("tensor %q: %w", name, err)
	}
	if r.Types == nil {
		r.Types = map[dtype.DType]int{}
	}
	r.Types[t]++
	r.BytesOut += int64(len(out))
	return t, out, nil
}

// Options are the choices of a conversion beyond the mix.
type Options struct {
	// Requantize converts the layers of a quantized checkpoint that no GGUF type
	// holds exactly (act-order GPTQ, FP8, …) from their dense values by the mix's
	// rules: lossy, and said so in the report's notes. Without it such a layer is an
	// error naming it and why.
	Requantize bool
}

// File converts src (a GGUF file or a Hugging Face directory) to a GGUF file at dst
// whose weight matrices have the types of mix m. The linear layers of a quantized
// Hugging Face checkpoint (GPTQ, AWQ, compressed-tensors, FP8) are written as their
// exact Q4_0 or Q8_0 repacking where one holds them (see FileWith).
func File(ctx context.Context, src, dst string, m Mix) (Report, error) {
	return FileWith(ctx, src, dst, m, Options{})
}

// FileWith is File with options: a quantized checkpoint's layers that no GGUF type
// holds exactly are refused unless o.Requantize.
func FileWith(ctx context.Context, src, dst string, m Mix, o Options) (Report, error) {
	if err := m.Check(); err != nil {
		return Report{}, err
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
		kv, tensors, closeSrc, err = fromHF(ctx, src, m, o, &r)
	} else {
		kv, tensors, closeSrc, err = fromGGUF(ctx, src, m, &r)
	}
	if err != nil {
		return r, fmt.Errorf("quantize: %s: %w", src, err)
	}
	defer closeSrc()
	if err := gguf.WriteFile(dst, func(w io.Writer) error { return gguf.Write(w, kv, tensors, 0) }); err != nil {
		return r, fmt.Errorf("quantize: %w", err)
	}
	return r, nil
}

// FileTypeKV is the metadata that says a file's mix: general.file_type, and the
// quantisation version llama.cpp writes beside it in quantised files.
func FileTypeKV(m Mix) []gguf.KeyValue {
	kv := []gguf.KeyValue{{Key: "general.file_type", Value: gguf.Uint32(m.FileType())}}
	if m.Quantized() {
		kv = append(kv, gguf.KeyValue{Key: "general.quantization_version", Value: gguf.Uint32(2)})
	}
	return kv
}

// fromGGUF re-encodes a GGUF file's weights, keeping its metadata.
func fromGGUF(ctx context.Context, src string, m Mix, r *Report) ([]gguf.KeyValue, []gguf.TensorData, func() error, error) {
	f, err := gguf.Open(src)
	if err != nil {
		return nil, nil, nil, err
	}
	var kv []gguf.KeyValue
	for _, e := range f.KV {
		switch e.Key {
		case "general.file_type", "general.quantization_version", gguf.AlignmentKey:
			continue
		}
		kv = append(kv, e)
	}
	kv = append(kv, FileTypeKV(m)...)
	_, untied := f.Tensor("output.weight")
	p := plan{mix: m, tied: !untied}
	for i := range f.Tensors {
		p.layers = max(p.layers, layerOf(f.Tensors[i].Name)+1)
	}
	tensors := make([]gguf.TensorData, 0, len(f.Tensors))
	for i := range f.Tensors {
		if err := ctx.Err(); err != nil {
			f.Close()
			return nil, nil, nil, err
		}
		tn := &f.Tensors[i]
		typ, data, err := p.convert(tn.Name, tn.Type, tn.Dims, f.Data(tn), r)
		if err != nil {
			f.Close()
			return nil, nil, nil, err
		}
		tensors = append(tensors, gguf.TensorData{Name: tn.Name, Type: typ, Dims: tn.Dims, Data: data})
	}
	return kv, tensors, f.Close, nil
}
