package hfquant

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestEncodeErrors: codes the formats cannot store are refused, naming why.
func TestEncodeErrors(t *testing.T) {
	good := func() Codes {
		c, _ := randomCodes(rand.New(rand.NewPCG(1, 2)), 4, 8, 64, 32, false)
		for i := range c.Zero {
			c.Zero[i] = max(c.Zero[i], 1)
		}
		return c
	}
	for _, c := range []struct {
		name   string
		change func(c *Codes)
		encode func(c Codes) (Tensors, error)
		want   string
	}{
		{"code too wide", func(c *Codes) { c.Q[5] = 16 }, func(c Codes) (Tensors, error) { return EncodeAWQ(c) }, "code 16 at 5 exceeds 4 bits"},
		{"zero too wide", func(c *Codes) { c.Zero[1] = 200 }, func(c Codes) (Tensors, error) { return EncodeCompressed(c, false) }, "zero point 200 at 1 exceeds 4 bits"},
		{"scale not float16", func(c *Codes) { c.Scale[0] = 0.1 }, func(c Codes) (Tensors, error) { return EncodeGPTQ(c, false) }, "scale 0.1 at 0 is not a float16 value"},
		{"v1 zero 0", func(c *Codes) { c.Zero[3] = 0 }, func(c Codes) (Tensors, error) { return EncodeGPTQ(c, true) }, "group 1 is 0, which v1's zero − 1 cannot store"},
		{"awq act-order", func(c *Codes) { c.GIdx = runGroups(64, 32) }, func(c Codes) (Tensors, error) { return EncodeAWQ(c) }, "want 4 bits, runs dividing the inputs"},
		{"group index", func(c *Codes) { c.GIdx = make([]int64, 64); c.GIdx[9] = 2 }, func(c Codes) (Tensors, error) { return EncodeGPTQ(c, false) }, "input 9 in group 2, out of [0, 2)"},
		{"sizes", func(c *Codes) { c.Scale = c.Scale[1:] }, func(c Codes) (Tensors, error) { return EncodeGPTQ(c, false) }, "512 codes, 16 zeros, 15 scales for 8 × 64 in 2 groups"},
		{"gptq rows", func(c *Codes) { c.Rows, c.Q, c.Zero, c.Scale = 4, c.Q[:256], c.Zero[:8], c.Scale[:8] }, func(c Codes) (Tensors, error) { return EncodeGPTQ(c, false) },
			"4 × 64 does not divide into words of 8 codes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			x := good()
			c.change(&x)
			_, err := c.encode(x)
			assert.ErrorContains(t, err, c.want)
		})
	}
}
