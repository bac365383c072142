// Command quantize converts a model to a quantised GGUF file, with the tensor types
// llama.cpp's llama-quantize gives the same file type.
//
//	go run ./examples/quantize -in ../shared/models/gocoder-m -out gocoder-m-q8_0.gguf
//	go run ./examples/quantize -in model-f16.gguf -out model-q4_k_m.gguf -type Q4_K_M
//
// The input is a GGUF file with F32, F16 or BF16 weights, or a Hugging Face directory
// (config.json, safetensors, tokenizer.json) of a Llama or Qwen2 model. A quantized
// checkpoint's layers (GPTQ, AWQ, compressed-tensors) are written as their exact
// Q4_0 or Q8_0 repacking; a layer no GGUF type holds exactly (act-order GPTQ, FP8) is
// refused, naming it, unless -requantize, which quantizes it lossily:
//
//	go run ./examples/quantize -in ../shared/models/gocoder-m-awq -out m-awq.gguf -type F16
package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"

	"github.com/specula/specula/model/quantize"
)

func main() {
	in := flag.String("in", "", "input GGUF file or Hugging Face directory")
	out := flag.String("out", "", "output GGUF file")
	typ := flag.String("type", "Q8_0", "file type: "+strings.Join(quantize.MixNames(), ", "))
	requantize := flag.Bool("requantize", false, "a quantized checkpoint's layers that no GGUF type holds exactly (act-order GPTQ, FP8): quantize their dense values by the file type's rules, lossily, instead of refusing")
	flag.Parse()
	if *in == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "usage: quantize -in MODEL -out FILE.gguf [-type "+strings.Join(quantize.MixNames(), "|")+"]")
		os.Exit(2)
	}
	mix, err := quantize.ParseMix(*typ)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	r, err := quantize.FileWith(ctx, *in, *out, mix, quantize.Options{Requantize: *requantize})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var types []string
	for _, t := range slices.Sorted(maps.Keys(r.Types)) {
		types = append(types, fmt.Sprintf("%d to %s", r.Types[t], t))
	}
	if len(types) == 0 {
		types = []string{"none"}
	}
	fmt.Printf("%s (%s): tensors converted %s, %d kept, %d quantized layers repacked exactly; %.1f MB → %.1f MB\n",
		*out, mix, strings.Join(types, ", "), r.Kept, r.Exact, float64(r.BytesIn)/1e6, float64(r.BytesOut)/1e6)
	for _, n := range r.Notes {
		fmt.Println("note:", n)
	}
}
