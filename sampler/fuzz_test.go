package sampler_test

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/specula/specula/batch"
	"github.com/specula/specula/sampler"
)

// FuzzProcess feeds arbitrary logits (any bit pattern: NaN, ±Inf, subnormals) and
// parameters to the sampler: it must either return an error or a distribution, never
// panic, and Verify must stay within its contract.
func FuzzProcess(f *testing.F) {
	f.Add([]byte{0, 0, 128, 63, 0, 0, 0, 64, 0, 0, 64, 64}, 1.0, 0, 1.0, 0.0, 1.0, uint16(0))
	f.Add([]byte{0, 0, 128, 127, 0, 0, 128, 255}, 0.5, 1, 0.5, 0.5, 2.0, uint16(3))
	f.Add([]byte{0, 0, 192, 127, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 0.0, 2, 0.9, 0.1, 0.7, uint16(1))
	f.Fuzz(func(t *testing.T, raw []byte, temp float64, topK int, topP, minP, pen float64, hist uint16) {
		v := len(raw) / 4
		if v == 0 || v > 4096 {
			return
		}
		logits := make([]float32, v)
		for i := range logits {
			logits[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		p := sampler.Params{Temperature: temp, TopK: topK, TopP: topP, MinP: minP, RepetitionPenalty: pen, RepetitionWindow: int(hist % 7)}
		s, err := sampler.New(p, v)
		if err != nil {
			return
		}
		history := []int32{int32(hist) % int32(v), int32(hist/7) % int32(v)}
		dst := make([]float32, v)
		if err := s.Process(logits, history, dst); err == nil {
			var sum float64
			for _, x := range dst {
				if x < 0 || x != x {
					t.Fatalf("probability %v", x)
				}
				sum += float64(x)
			}
			if math.Abs(sum-1) > 1e-4 {
				t.Fatalf("probabilities sum to %v", sum)
			}
			if tok := s.Sample(dst); tok < 0 || int(tok) >= v || dst[tok] == 0 {
				t.Fatalf("sampled token %d of probability %v", tok, dst[tok])
			}
		}
		var d sampler.Draft
		if d.Set(v, []int32{int32(hist) % int32(v)}, [][]float32{dst}, batch.Tree{}) != nil {
			return
		}
		path, next, err := s.Verify(sampler.Step{History: history, Draft: d, Logits: [][]float32{logits, logits}}, nil)
		if err == nil && (len(path) > 1 || (len(path) == 1 && path[0] != 0) || next < 0 || int(next) >= v) {
			t.Fatalf("Verify returned %v, %d", path, next)
		}
	})
}
