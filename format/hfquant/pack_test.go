package hfquant

import (
	"encoding/binary"
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

func i32Tensor(words []uint32, shape ...int64) *safetensors.Tensor {
	b := make([]byte, 4*len(words))
	for i, w := range words {
		binary.LittleEndian.PutUint32(b[4*i:], w)
	}
	return &safetensors.Tensor{DType: dtype.I32, TypeName: "I32", Shape: shape, Data: b}
}

func i64Tensor(v []int64, shape ...int64) *safetensors.Tensor {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(x))
	}
	return &safetensors.Tensor{DType: dtype.I64, TypeName: "I64", Shape: shape, Data: b}
}

func f16Tensor(v []float32, shape ...int64) *safetensors.Tensor {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(b[2*i:], dtype.F32ToF16(x))
	}
	return &safetensors.Tensor{DType: dtype.F16, TypeName: "F16", Shape: shape, Data: b}
}

func f32Tensor(v []float32, shape ...int64) *safetensors.Tensor {
	b, _ := dtype.Encode(dtype.F32, v)
	return &safetensors.Tensor{DType: dtype.F32, TypeName: "F32", Shape: shape, Data: b}
}

// codes returns n random codes in [0, 2^bits).
func codes(rng *rand.Rand, n, bits int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(rng.IntN(1 << bits))
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

// packAlongCols packs rows × cols codes, slot j of word [r][c] holding column
// per·c + order(j)… that is, column per·c + k in slot slot(k).
func packAlongCols(v []int32, bits, rows, cols int, slot func(k int) int) []uint32 {
	per := 32 / bits
	wc := (cols + per - 1) / per
	out := make([]uint32, rows*wc)
	for r := range rows {
		for c := range cols {
			out[r*wc+c/per] |= uint32(v[r*cols+c]) << (bits * slot(c%per))
		}
	}
	return out
}

// packAlongRows packs rows × cols codes, slot j of word [r][c] holding row per·r + j.
func packAlongRows(v []int32, bits, rows, cols int) []uint32 {
	per := 32 / bits
	wr := (rows + per - 1) / per
	out := make([]uint32, wr*cols)
	for r := range rows {
		for c := range cols {
			out[(r/per)*cols+c] |= uint32(v[r*cols+c]) << (bits * (r % per))
		}
	}
	return out
}

func natural(k int) int { return k }

// layer is a hand-built quantized layer: the scheme, the tensors and the dense
// matrix the format's formula gives, computed in float64.
type layer struct {
	scheme *Scheme
	src    mapSource
	want   Matrix
}

const pre = "model.layers.0.mlp.up_proj"

// gptqLayer builds a GPTQ layer of out × in with groups of g (0: one) and, under
// act-order, a shuffled g_idx.
func gptqLayer(rng *rand.Rand, s *Scheme, out, in int) layer {
	g := cmpOr(s.GroupSize, in)
	ng := in / g
	q := codes(rng, in*out, s.Bits) // [in][out]
	z := codes(rng, ng*out, s.Bits) // [ng][out], the true zero points
	sc := f16Scales(rng, ng*out)
	gidx := make([]int64, in)
	for i := range gidx {
		gidx[i] = int64(i / g)
	}
	if s.ActOrder {
		rng.Shuffle(in, func(a, b int) { gidx[a], gidx[b] = gidx[b], gidx[a] })
	}
	stored := make([]int32, len(z))
	for i := range z {
		stored[i] = z[i]
		if s.ZeroMinusOne {
			stored[i] = max(z[i]-1, 0)
			z[i] = stored[i] + 1
		}
	}
	w := make([]float32, out*in)
	for o := range out {
		for i := range in {
			k := int(gidx[i])*out + o
			w[o*in+i] = float32(float64(q[i*out+o]-z[k]) * float64(sc[k]))
		}
	}
	gi := make([]uint32, in)
	for i, v := range gidx {
		gi[i] = uint32(v)
	}
	per := 32 / s.Bits
	src := mapSource{
		pre + ".qweight": i32Tensor(packAlongRows(q, s.Bits, in, out), int64(in/per), int64(out)),
		pre + ".qzeros":  i32Tensor(packAlongCols(stored, s.Bits, ng, out, natural), int64(ng), int64(out/per)),
		pre + ".scales":  f16Tensor(sc, int64(ng), int64(out)),
		pre + ".g_idx":   i32Tensor(gi, int64(in)),
	}
	return layer{s, src, Matrix{Rows: out, Cols: in, Data: w}}
}

// awqLayer builds an AutoAWQ GEMM layer.
func awqLayer(rng *rand.Rand, s *Scheme, out, in int) layer {
	g := cmpOr(s.GroupSize, in)
	ng := in / g
	q, z, sc := codes(rng, in*out, 4), codes(rng, ng*out, 4), f16Scales(rng, ng*out)
	w := make([]float32, out*in)
	for o := range out {
		for i := range in {
			k := (i/g)*out + o
			w[o*in+i] = float32(float64(q[i*out+o]-z[k]) * float64(sc[k]))
		}
	}
	order := func(k int) int { return [8]int{0, 4, 1, 5, 2, 6, 3, 7}[k] }
	src := mapSource{
		pre + ".qweight": i32Tensor(packAlongCols(q, 4, in, out, order), int64(in), int64(out/8)),
		pre + ".qzeros":  i32Tensor(packAlongCols(z, 4, ng, out, order), int64(ng), int64(out/8)),
		pre + ".scales":  f16Tensor(sc, int64(ng), int64(out)),
	}
	return layer{s, src, Matrix{Rows: out, Cols: in, Data: w}}
}

// ctLayer builds a compressed-tensors pack-quantized layer, with weight_g_idx when
// shuffle is set.
func ctLayer(rng *rand.Rand, s *Scheme, out, in int, shuffle bool) layer {
	grp := s.Groups[0]
	g := cmpOr(grp.GroupSize, in)
	ng := (in + g - 1) / g
	u := codes(rng, out*in, grp.Bits) // unsigned, [out][in]
	uz := codes(rng, out*ng, grp.Bits)
	sc := f16Scales(rng, out*ng)
	gidx := make([]int64, in)
	for i := range gidx {
		gidx[i] = int64(i / g)
	}
	if shuffle {
		rng.Shuffle(in, func(a, b int) { gidx[a], gidx[b] = gidx[b], gidx[a] })
	}
	src := mapSource{
		pre + ".weight_packed": i32Tensor(packAlongCols(u, grp.Bits, out, in, natural), int64(out), int64((in+32/grp.Bits-1)/(32/grp.Bits))),
		pre + ".weight_scale":  f16Tensor(sc, int64(out), int64(ng)),
		pre + ".weight_shape":  i64Tensor([]int64{int64(out), int64(in)}, 2),
	}
	if shuffle {
		src[pre+".weight_g_idx"] = i64Tensor(gidx, int64(in))
	}
	if grp.Symmetric {
		for i := range uz {
			uz[i] = 1 << (grp.Bits - 1)
		}
	} else {
		per := int64(32 / grp.Bits)
		src[pre+".weight_zero_point"] = i32Tensor(packAlongRows(uz, grp.Bits, out, ng), (int64(out)+per-1)/per, int64(ng))
	}
	w := make([]float32, out*in)
	for o := range out {
		for i := range in {
			k := o*ng + int(gidx[i])
			w[o*in+i] = float32(float64(u[o*in+i]-uz[k]) * float64(sc[k]))
		}
	}
	return layer{s, src, Matrix{Rows: out, Cols: in, Data: w}}
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
