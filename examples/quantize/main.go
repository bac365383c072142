// Command quantize converts a model to a quantised GGUF file, with the tensor types
// llama.cpp's llama-quantize gives the same file type.
//
//	go run ./examples/quantize -in ../shared/models/gocoder-m -out gocoder-m-q8_0.gguf
//	go run ./examples/quantize -in model-f16.gguf -out model-q4_k_m.gguf -type Q4_K_M
//
// The input is a GGUF file with F32, F16 or BF16 weights, or a Hugging Face directory
// (config.json, safetensors, tokenizer.json) of a Llama or Qwen2 model.
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
	r, err := quantize.File(ctx, *in, *out, mix)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var types []string
	for _, t := range slices.Sorted(maps.Keys(r.Types)) {
		types = append(types, fmt.Sprintf("%d to %s", r.Types[t], t))
	}
	fmt.Printf("%s (%s): tensors converted %s, %d kept; %.1f MB → %.1f MB\n",
		*out, mix, strings.Join(types, ", "), r.Kept, float64(r.BytesIn)/1e6, float64(r.BytesOut)/1e6)
	for _, n := range r.Notes {
		fmt.Println("note:", n)
	}
}
