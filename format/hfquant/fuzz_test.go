package hfquant

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/specula/specula/format/safetensors"
)

// fuzzSchemes are the schemes FuzzDense reads its file with, chosen by its first
// argument.
func fuzzSchemes() []*Scheme {
	return []*Scheme{
		{Method: GPTQ, Bits: 4, GroupSize: 32, ZeroMinusOne: true, ActOrder: true},
		{Method: GPTQ, Bits: 8, GroupSize: 16, Symmetric: true},
		{Method: GPTQ, Bits: 2},
		{Method: AWQ, Bits: 4, GroupSize: 32},
		ctScheme(4, 16, false),
		ctScheme(8, 0, true),
		{Method: FP8, Bits: 8, Block: [2]int{4, 4}},
		{Method: FP8, Bits: 8},
	}
}

// encode writes the tensors of src as a safetensors file.
func encode(src mapSource) []byte {
	header := map[string]any{}
	var body []byte
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range src {
			if !yield(k) {
				return
			}
		}
	}) {
		t := src[name]
		header[name] = map[string]any{"dtype": t.TypeName, "shape": append([]int64{}, t.Shape...), "data_offsets": []int{len(body), len(body) + len(t.Data)}}
		body = append(body, t.Data...)
	}
	h, _ := json.Marshal(header)
	return append(binary.LittleEndian.AppendUint64(nil, uint64(len(h))), append(h, body...)...)
}

// fuzzSeeds returns a good small layer of every fuzz scheme, as (scheme, file).
func fuzzSeeds() [][2]any {
	rng := rand.New(rand.NewPCG(1, 2))
	s := fuzzSchemes()
	layers := []layer{
		gptqLayer(rng, s[0], 8, 64), gptqLayer(rng, s[1], 4, 32), gptqLayer(rng, s[2], 16, 16),
		awqLayer(rng, s[3], 8, 32), ctLayer(rng, s[4], 3, 32, true), ctLayer(rng, s[5], 2, 6, false),
		fp8Layer(rng, s[6], 5, 6), fp8Layer(rng, s[7], 2, 3),
	}
	var out [][2]any
	for i, l := range layers {
		out = append(out, [2]any{byte(i), encode(l.src)})
	}
	return out
}

// FuzzDense checks that Dense never panics on any file under any scheme, that what it
// accepts is a matrix of the size it says, and that Load accepts it too, as values
// equal to Dense's bit for bit (a packing's columns put back in input order by its
// Perm, which must be a permutation).
func FuzzDense(f *testing.F) {
	seeds := fuzzSeeds()
	if os.Getenv("HFQUANT_WRITE_SEEDS") != "" { // go test -run FuzzDense with it set rewrites testdata
		writeSeeds(f, seeds)
	}
	for _, s := range seeds {
		f.Add(s[0].(byte), s[1].([]byte))
	}
	schemes := fuzzSchemes()
	f.Fuzz(func(t *testing.T, which byte, data []byte) {
		file, err := safetensors.Parse(data)
		if err != nil {
			return
		}
		defer file.Close()
		src := mapSource{}
		for _, tt := range file.Tensors() {
			src[tt.Name] = tt
		}
		s := schemes[int(which)%len(schemes)]
		m, err := s.Dense(src, pre)
		if err != nil {
			return
		}
		if m.Rows <= 0 || m.Cols <= 0 || len(m.Data) != m.Rows*m.Cols {
			t.Fatalf("a %d × %d matrix of %d values", m.Rows, m.Cols, len(m.Data))
		}
		p, err := s.Load(src, pre)
		if err != nil {
			t.Fatalf("Dense accepts the layer, Load refuses it: %v", err)
		}
		checkPacking(t, p, m)
	})
}

func writeSeeds(f *testing.F, seeds [][2]any) {
	dir := filepath.Join("testdata", "fuzz", "FuzzDense")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		f.Fatal(err)
	}
	for i, s := range seeds {
		text := fmt.Sprintf("go test fuzz v1\nbyte(%q)\n[]byte(%q)\n", s[0].(byte), s[1].([]byte))
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%d", i)), []byte(text), 0o644); err != nil {
			f.Fatal(err)
		}
	}
}

// TestFuzzSeeds checks that every seed of FuzzDense is a good layer of its scheme,
// so that the fuzzer starts from files that decode.
func TestFuzzSeeds(t *testing.T) {
	schemes := fuzzSchemes()
	for _, s := range fuzzSeeds() {
		file, err := safetensors.Parse(s[1].([]byte))
		if err != nil {
			t.Fatal(err)
		}
		src := mapSource{}
		for _, tt := range file.Tensors() {
			src[tt.Name] = tt
		}
		if _, err := schemes[s[0].(byte)].Dense(src, pre); err != nil {
			t.Errorf("seed %d: %v", s[0], err)
		}
	}
}
