package kernels

import "math"

// Integer activations. Products with quantised weights run on activations quantised
// to 8 bits, as llama.cpp's do: each row of a matrix input is cut into blocks — of 32
// values against the 32-value weight types, of 128 against Q4_Z128, of 256 against
// the K-quants — and each block gets one scale d = max|x|/127 and codes
// round(x·127/max|x|) in [−127, 127]. A row is quantised on its own, so its codes,
// and every product with them, are the same whatever the batch around it.
//
// Beside the codes, each block carries the sums the kernels fold the weights' offsets
// and minimums in with (side data, sideWords 32-bit words per block, float32 bits or
// int32):
//
//   - 32- and 128-value blocks: d, −8·Σq, −16·Σq, −128·Σq (the integer offsets of
//     Q4_0, Q5_0, and of Q8_0 codes biased to unsigned), d·Σq (for the minimums of
//     Q4_1 and Q5_1), −Σq (for the zeros of Q4_Z and Q4_Z128, a 16-bit multiply-add's
//     operand: |Σq| ≤ 128·127 < 2^15);
//   - 256-value blocks: d; Σq over each of the 8 sub-blocks of 32 (the minimums of Q4_K
//     and Q5_K), as 16-bit pairs, sub-blocks 2k and 2k+1 in the low and high half of
//     a word (|Σq| ≤ 32·127 fits), so that one 16-bit multiply-add takes two; −32·Σq
//     over each of the 16 groups of 16 (the offset of Q6_K), and −Σq over each as
//     16-bit pairs in the same way (the same offset, for a 16-bit multiply-add by
//     32·scale).
const (
	q8Block   = 32  // values per block of the 32-value weight types (and their activations)
	z128Block = 128 // values per block of Q4_Z128 (and its activations)
	kBlock    = 256 // values per super-block of the K-quants

	side32Words  = 8  // words of side data per 32- or 128-value block (6 used)
	side256Words = 32 // words per 256-value block (29 used)

	sideD        = 0  // d, both block sizes
	side32Off8   = 1  // −8·Σq
	side32Off16  = 2  // −16·Σq
	side32Off128 = 3  // −128·Σq
	side32DSum   = 4  // d·Σq
	side32Neg    = 5  // −Σq
	side256Sum   = 1  // Σq of sub-blocks 2k and 2k+1 at side256Sum+k, int16 each
	side256Off   = 5  // −32·Σq of group g at side256Off+g
	side256Neg   = 21 // −Σq of groups 2k and 2k+1 at side256Neg+k, int16 each
)

// sideWords is the number of side-data words per block of the given size.
func sideWords(block int) int {
	if block == kBlock {
		return side256Words
	}
	return side32Words
}

// actQ is a batch of rows quantised for the integer kernels.
type actQ struct {
	codes []int8   // n rows × cols
	side  []uint32 // n rows × blocks × words
	words int
	ok    bool
}

// quantize fills q with the rows of a, in blocks of the given size.
func (q *actQ) quantize(a *Act, block int) {
	q.words = sideWords(block)
	blocks := a.cols / block
	q.codes = grow(q.codes, a.n*a.cols)
	q.side = grow(q.side, a.n*blocks*q.words)
	for t := range a.n {
		quantizeRow(a.x[t*a.cols:(t+1)*a.cols], block, q.codes[t*a.cols:(t+1)*a.cols], q.side[t*blocks*q.words:(t+1)*blocks*q.words])
	}
	q.ok = true
}

// goQuantizeRow quantises the blocks of one row: the definition, and the twin of the
// assembly quantizers.
func goQuantizeRow(x []float32, block int, codes []int8, side []uint32) {
	words := sideWords(block)
	for b := range len(x) / block {
		quantizeBlock(x[b*block:(b+1)*block], codes[b*block:(b+1)*block], side[b*words:(b+1)*words])
	}
}

// quantizeBlock quantises one block of activations and writes its side data.
func quantizeBlock(x []float32, codes []int8, side []uint32) {
	var amax float32
	for _, v := range x {
		amax = max(amax, float32(math.Abs(float64(v))))
	}
	var d, id float32
	if amax > 0 {
		// id is capped at the largest float32: under amax = 127/MaxFloat32 it would be
		// +Inf, and the codes of a block of tiny values ±Inf and NaN, which no
		// conversion to an integer takes the same way on every machine.
		d, id = amax/127, min(127/amax, math.MaxFloat32)
	}
	for i, v := range x {
		codes[i] = int8(max(-127, min(127, math.RoundToEven(float64(v*id)))))
	}
	clear(side)
	side[sideD] = math.Float32bits(d)
	if len(x) != kBlock {
		s := sumCodes(codes)
		side[side32Off8] = uint32(-8 * s)
		side[side32Off16] = uint32(-16 * s)
		side[side32Off128] = uint32(-128 * s)
		side[side32DSum] = math.Float32bits(d * float32(s))
		side[side32Neg] = uint32(-s)
		return
	}
	for j := range 8 {
		side[side256Sum+j/2] |= uint32(uint16(int16(sumCodes(codes[32*j:32*j+32])))) << (16 * (j % 2))
	}
	for g := range 16 {
		s := sumCodes(codes[16*g : 16*g+16])
		side[side256Off+g] = uint32(-32 * s)
		side[side256Neg+g/2] |= uint32(uint16(int16(-s))) << (16 * (g % 2))
	}
}

func sumCodes(c []int8) int32 {
	var s int32
	for _, v := range c {
		s += int32(v)
	}
	return s
}

// sideSum is Σq of sub-block j of a 256-value block's side data.
func sideSum(side []uint32, j int) int32 { return int32(int16(side[side256Sum+j/2] >> (16 * (j % 2)))) }

// sideF reads a float32 word of side data.
func sideF(w uint32) float32 { return math.Float32frombits(w) }
