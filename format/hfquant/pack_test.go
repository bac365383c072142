package hfquant

import (
	"cmp"
	"math/rand/v2"

	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/format/safetensors"
)

// mapSource is a Source of hand-built tensors, all in one pretend file.
type mapSource map[string]*safetensors.Tensor

func (m mapSource) Tensor(name string) (*safetensors.Tensor, bool) {
	t, ok := m[name]
	return t, ok
}

func (m mapSource) Path(name string) (string, bool) {
	_, ok := m[name]
	return "test.safetensors", ok
}

func f32Tensor(v []float32, shape ...int64) *safetensors.Tensor {
	b, _ := dtype.Encode(dtype.F32, v)
	return &safetensors.Tensor{DType: dtype.F32, TypeName: "F32", Shape: shape, Data: b}
}

// codes returns n random codes in [0, 2^bits).
func codes(rng *rand.Rand, n, bits int) []uint8 {
	out := make([]uint8, n)
	for i := range out {
		out[i] = uint8(rng.IntN(1 << bits))
	}
	return out
}

// f16Scales returns n random positive scales that float16 holds exactly.
func f16Scales(rng *rand.Rand, n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = dtype.F16ToF32(dtype.F32ToF16(rng.Float32()*0.1 + 1e-4))
	}
	return out
}

// layer is a hand-built quantized layer: the scheme, the tensors and the dense
// matrix the format's formula gives, computed in float64.
type layer struct {
	scheme *Scheme
	src    mapSource
	want   Matrix
}

const pre = "model.layers.0.mlp.up_proj"

// randomCodes draws an out × in layer of groups of g inputs (0: one group), its
// groups shuffled when shuffle is set, and its dense values (q − z) · s in float64.
func randomCodes(rng *rand.Rand, bits, out, in, g int, shuffle bool) (Codes, Matrix) {
	g = cmp.Or(g, in)
	ng := (in + g - 1) / g
	c := Codes{Rows: out, Cols: in, Groups: ng, Bits: bits, GroupSize: g,
		Q: codes(rng, out*in, bits), Zero: codes(rng, out*ng, bits), Scale: f16Scales(rng, out*ng)}
	if shuffle {
		c.GIdx = runGroups(in, g)
		rng.Shuffle(in, func(a, b int) { c.GIdx[a], c.GIdx[b] = c.GIdx[b], c.GIdx[a] })
	}
	return c, c.want()
}

// want is the layer's dense values, computed in float64 from the formula.
func (c *Codes) want() Matrix {
	w := make([]float32, c.Rows*c.Cols)
	for o := range c.Rows {
		for i := range c.Cols {
			k := o*c.Groups + c.group(i)
			w[o*c.Cols+i] = float32(float64(int32(c.Q[o*c.Cols+i])-int32(c.Zero[k])) * float64(c.Scale[k]))
		}
	}
	return Matrix{Rows: c.Rows, Cols: c.Cols, Data: w}
}

// withPrefix names a layer's tensors.
func withPrefix(t Tensors) mapSource {
	src := mapSource{}
	for suffix, x := range t {
		src[pre+suffix] = x
	}
	return src
}

// gptqLayer builds a GPTQ layer of out × in with groups of g (0: one) and, under
// act-order, a shuffled g_idx.
func gptqLayer(rng *rand.Rand, s *Scheme, out, in int) layer {
	c, _ := randomCodes(rng, s.Bits, out, in, s.GroupSize, s.ActOrder)
	if s.ZeroMinusOne {
		for i := range c.Zero {
			c.Zero[i] = max(c.Zero[i], 1) // v1 stores z − 1
		}
	}
	t, err := EncodeGPTQ(c, s.ZeroMinusOne)
	if err != nil {
		panic(err)
	}
	return layer{s, withPrefix(t), c.want()}
}

// awqLayer builds an AutoAWQ GEMM layer.
func awqLayer(rng *rand.Rand, s *Scheme, out, in int) layer {
	c, want := randomCodes(rng, 4, out, in, s.GroupSize, false)
	t, err := EncodeAWQ(c)
	if err != nil {
		panic(err)
	}
	return layer{s, withPrefix(t), want}
}

// ctLayer builds a compressed-tensors pack-quantized layer, with weight_g_idx when
// shuffle is set.
func ctLayer(rng *rand.Rand, s *Scheme, out, in int, shuffle bool) layer {
	grp := s.Groups[0]
	c, _ := randomCodes(rng, grp.Bits, out, in, grp.GroupSize, shuffle)
	if grp.Symmetric {
		for i := range c.Zero {
			c.Zero[i] = 1 << (grp.Bits - 1)
		}
	}
	t, err := EncodeCompressed(c, grp.Symmetric)
	if err != nil {
		panic(err)
	}
	return layer{s, withPrefix(t), c.want()}
}

// fp8Layer builds an FP8 layer with random non-NaN codes and float32 scales.
func fp8Layer(rng *rand.Rand, s *Scheme, out, in int) layer {
	bn, bk, name := s.Block[0], s.Block[1], ".weight_scale_inv"
	if bn == 0 {
		bn, bk, name = out, in, ".weight_scale"
	}
	nb, kb := (out+bn-1)/bn, (in+bk-1)/bk
	data := make([]byte, out*in)
	for i := range data {
		for data[i] = byte(rng.IntN(256)); data[i]&0x7f == 0x7f; data[i] = byte(rng.IntN(256)) {
		}
	}
	sc := make([]float32, nb*kb)
	for i := range sc {
		sc[i] = rng.Float32() * 0.01
	}
	w := make([]float32, out*in)
	for o := range out {
		for i := range in {
			w[o*in+i] = float32(float64(refE4M3(data[o*in+i])) * float64(sc[(o/bn)*kb+i/bk]))
		}
	}
	scale := f32Tensor(sc, int64(nb), int64(kb))
	if s.Block[0] == 0 {
		scale = f32Tensor(sc)
	}
	src := mapSource{
		pre + ".weight": {TypeName: "F8_E4M3", DType: dtype.DType(1 << 31), Shape: []int64{int64(out), int64(in)}, Data: data},
		pre + name:      scale,
	}
	return layer{s, src, Matrix{Rows: out, Cols: in, Data: w}}
}
