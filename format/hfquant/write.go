package hfquant

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/format/safetensors"
)

// Codes is an integer-coded linear layer before a format packs it: the value of
// weight [o][i] is (Q[o][i] − Zero[o][g]) · Scale[o][g] with g the group of input i,
// the formula every integer format here shares (compressed-tensors' symmetric codes
// have the zero 2^(Bits−1)). The encoders write it in one format's tensors, which
// [Scheme.Dense] reads back to exactly these values: writers of test checkpoints and
// of the real-shape ones of examples/realscale use them, so that one implementation
// of each layout is checked against the decoders and the shared checkpoints.
type Codes struct {
	// Rows × Cols is out × in; Groups is the number of scale groups of a row.
	Rows, Cols, Groups int
	// Bits is the code width: 2, 4 or 8.
	Bits int
	// Q is the stored, unsigned codes, Rows × Cols, row-major, each below 2^Bits.
	Q []uint8
	// Zero is the zero points, Rows × Groups, each below 2^Bits; ignored by a
	// symmetric compressed-tensors layer.
	Zero []uint8
	// Scale is the scales, Rows × Groups; the encoders store them as float16, so
	// each must be one (converting to float16 and back unchanged).
	Scale []float32
	// GIdx is the group of each input (act-order); nil for runs: input i in group
	// i / GroupSize.
	GIdx []int64
	// GroupSize is the inputs a group holds when GIdx is nil (the last group of a
	// compressed-tensors layer may hold fewer).
	GroupSize int
}

// group returns the group of input i.
func (c *Codes) group(i int) int {
	if c.GIdx != nil {
		return int(c.GIdx[i])
	}
	return i / c.GroupSize
}

// check validates the sizes, codes and scales.
func (c *Codes) check(format string) error {
	switch {
	case c.Bits != 2 && c.Bits != 4 && c.Bits != 8:
		return fmt.Errorf("hfquant: %s: bits %d (2, 4 or 8)", format, c.Bits)
	case c.Rows <= 0 || c.Cols <= 0 || c.Groups <= 0:
		return fmt.Errorf("hfquant: %s: %d × %d with %d groups", format, c.Rows, c.Cols, c.Groups)
	case len(c.Q) != c.Rows*c.Cols || len(c.Zero) != c.Rows*c.Groups || len(c.Scale) != c.Rows*c.Groups:
		return fmt.Errorf("hfquant: %s: %d codes, %d zeros, %d scales for %d × %d in %d groups",
			format, len(c.Q), len(c.Zero), len(c.Scale), c.Rows, c.Cols, c.Groups)
	case c.GIdx != nil && len(c.GIdx) != c.Cols:
		return fmt.Errorf("hfquant: %s: %d group indices for %d inputs", format, len(c.GIdx), c.Cols)
	case c.GIdx == nil && (c.GroupSize <= 0 || (c.Cols+c.GroupSize-1)/c.GroupSize != c.Groups):
		return fmt.Errorf("hfquant: %s: group size %d does not make %d groups of %d inputs", format, c.GroupSize, c.Groups, c.Cols)
	}
	for i, g := range c.GIdx {
		if g < 0 || g >= int64(c.Groups) {
			return fmt.Errorf("hfquant: %s: input %d in group %d, out of [0, %d)", format, i, g, c.Groups)
		}
	}
	top := uint8(1<<c.Bits - 1)
	for i, q := range c.Q {
		if q > top {
			return fmt.Errorf("hfquant: %s: code %d at %d exceeds %d bits", format, q, i, c.Bits)
		}
	}
	for i, z := range c.Zero {
		if z > top {
			return fmt.Errorf("hfquant: %s: zero point %d at %d exceeds %d bits", format, z, i, c.Bits)
		}
	}
	for i, s := range c.Scale {
		if math.Float32bits(dtype.F16ToF32(dtype.F32ToF16(s))) != math.Float32bits(s) {
			return fmt.Errorf("hfquant: %s: scale %g at %d is not a float16 value", format, s, i)
		}
	}
	return nil
}

// Tensors are a layer's tensors as a format stores them, by suffix (".qweight",
// ".scales", …): a tensor's name is the layer's prefix and its suffix.
type Tensors map[string]*safetensors.Tensor

// EncodeGPTQ writes the layer in GPTQ's layout (see [Scheme.Dense]): qweight [in/p,
// out] packed along the inputs, qzeros [groups, out/p] along the outputs, scales
// [groups, out] float16 and g_idx [in] int32 (GIdx, or i / GroupSize). v1 (the
// checkpoint format gptq) stores each zero point minus one, so it cannot store a
// zero point of 0; v2 (gptq_v2) stores them as they are. Rows must be a multiple of
// and Cols divisible into the 32/Bits codes of a word, as GPTQ's packer needs.
func EncodeGPTQ(c Codes, v1 bool) (Tensors, error) {
	if err := c.check("GPTQ"); err != nil {
		return nil, err
	}
	per := 32 / c.Bits
	if c.Rows%per != 0 || c.Cols%per != 0 {
		return nil, fmt.Errorf("hfquant: GPTQ: %d × %d does not divide into words of %d codes", c.Rows, c.Cols, per)
	}
	out, in := c.Rows, c.Cols
	qw := make([]uint32, in/per*out)
	for o := range out {
		for i := range in {
			qw[(i/per)*out+o] |= uint32(c.Q[o*in+i]) << (c.Bits * (i % per))
		}
	}
	zeros := make([]uint32, c.Groups*out/per)
	for o := range out {
		for g := range c.Groups {
			z := uint32(c.Zero[o*c.Groups+g])
			if v1 {
				if z == 0 {
					return nil, fmt.Errorf("hfquant: GPTQ v1: the zero point of output %d, group %d is 0, which v1's zero − 1 cannot store", o, g)
				}
				z--
			}
			zeros[g*out/per+o/per] |= z << (c.Bits * (o % per))
		}
	}
	gidx := make([]uint32, in)
	for i := range gidx {
		gidx[i] = uint32(c.group(i))
	}
	return Tensors{
		".qweight": wordTensor(qw, int64(in/per), int64(out)),
		".qzeros":  wordTensor(zeros, int64(c.Groups), int64(out/per)),
		".scales":  halfTensor(transpose(c.Scale, out, c.Groups), int64(c.Groups), int64(out)),
		".g_idx":   wordTensor(gidx, int64(in)),
	}, nil
}

// awqOrder is AutoAWQ's AWQ_ORDER: slot j of a GEMM word holds column 8c + awqOrder[j].
var awqOrder = [8]int{0, 2, 4, 6, 1, 3, 5, 7}

// EncodeAWQ writes a 4-bit layer in AutoAWQ's GEMM layout (see [Scheme.Dense]):
// qweight [in, out/8] and qzeros [groups, out/8] packed along the outputs in
// AWQ_ORDER, scales [groups, out] float16. The groups are runs (no GIdx) of
// GroupSize dividing Cols; Rows is a multiple of 8.
func EncodeAWQ(c Codes) (Tensors, error) {
	if err := c.check("AWQ"); err != nil {
		return nil, err
	}
	if c.Bits != 4 || c.GIdx != nil || c.Rows%8 != 0 || c.Cols%c.GroupSize != 0 {
		return nil, fmt.Errorf("hfquant: AWQ: bits %d, %d × %d, group size %d, g_idx %v: want 4 bits, runs dividing the inputs, outputs a multiple of 8",
			c.Bits, c.Rows, c.Cols, c.GroupSize, c.GIdx != nil)
	}
	out, in, wc := c.Rows, c.Cols, c.Rows/8
	qw := make([]uint32, in*wc)
	zw := make([]uint32, c.Groups*wc)
	for col := range wc {
		for j, k := range awqOrder {
			o := 8*col + k
			for i := range in {
				qw[i*wc+col] |= uint32(c.Q[o*in+i]) << (4 * j)
			}
			for g := range c.Groups {
				zw[g*wc+col] |= uint32(c.Zero[o*c.Groups+g]) << (4 * j)
			}
		}
	}
	return Tensors{
		".qweight": wordTensor(qw, int64(in), int64(wc)),
		".qzeros":  wordTensor(zw, int64(c.Groups), int64(wc)),
		".scales":  halfTensor(transpose(c.Scale, out, c.Groups), int64(c.Groups), int64(out)),
	}, nil
}

// EncodeCompressed writes the layer in compressed-tensors' pack-quantized layout (see
// [Scheme.Dense]): weight_packed [out, ⌈in/p⌉] packed along the inputs, weight_scale
// [out, groups] float16, weight_shape, weight_g_idx (int64) when GIdx is set, and for
// an asymmetric layer weight_zero_point [⌈out/p⌉, groups] packed along the outputs. A
// symmetric layer's zero is 2^(Bits−1), whatever Zero holds.
func EncodeCompressed(c Codes, symmetric bool) (Tensors, error) {
	if err := c.check("compressed-tensors"); err != nil {
		return nil, err
	}
	per, out, in := 32/c.Bits, c.Rows, c.Cols
	wc := (in + per - 1) / per
	qw := make([]uint32, out*wc)
	for o := range out {
		for i := range in {
			qw[o*wc+i/per] |= uint32(c.Q[o*in+i]) << (c.Bits * (i % per))
		}
	}
	t := Tensors{
		".weight_packed": wordTensor(qw, int64(out), int64(wc)),
		".weight_scale":  halfTensor(c.Scale, int64(out), int64(c.Groups)),
		".weight_shape":  longTensor([]int64{int64(out), int64(in)}, 2),
	}
	if c.GIdx != nil {
		t[".weight_g_idx"] = longTensor(c.GIdx, int64(in))
	}
	if !symmetric {
		zp := make([]uint32, (out+per-1)/per*c.Groups)
		for o := range out {
			for g := range c.Groups {
				zp[(o/per)*c.Groups+g] |= uint32(c.Zero[o*c.Groups+g]) << (c.Bits * (o % per))
			}
		}
		t[".weight_zero_point"] = wordTensor(zp, int64((out+per-1)/per), int64(c.Groups))
	}
	return t, nil
}

// wordTensor is an I32 tensor of the given words.
func wordTensor(words []uint32, shape ...int64) *safetensors.Tensor {
	b := make([]byte, 4*len(words))
	for i, w := range words {
		binary.LittleEndian.PutUint32(b[4*i:], w)
	}
	return &safetensors.Tensor{DType: dtype.I32, TypeName: "I32", Shape: shape, Data: b}
}

// longTensor is an I64 tensor.
func longTensor(v []int64, shape ...int64) *safetensors.Tensor {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(x))
	}
	return &safetensors.Tensor{DType: dtype.I64, TypeName: "I64", Shape: shape, Data: b}
}

// halfTensor is an F16 tensor of values float16 holds.
func halfTensor(v []float32, shape ...int64) *safetensors.Tensor {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(b[2*i:], dtype.F32ToF16(x))
	}
	return &safetensors.Tensor{DType: dtype.F16, TypeName: "F16", Shape: shape, Data: b}
}
