package kernels

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// exactFMA32 is a·b + c computed exactly and rounded once to float32.
func exactFMA32(a, b, c float32) float32 {
	x := new(big.Float).SetPrec(300).SetFloat64(float64(a))
	x.Mul(x, new(big.Float).SetPrec(300).SetFloat64(float64(b)))
	x.Add(x, new(big.Float).SetPrec(300).SetFloat64(float64(c)))
	f, _ := x.Float32()
	return f
}

// TestFMA32 checks fma32 against exact arithmetic, on random values and on the
// midpoint cases where rounding twice would go wrong.
func TestFMA32(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	check := func(a, b, c float32) {
		t.Helper()
		want := exactFMA32(a, b, c)
		if got := fma32(a, b, c); math.Float32bits(got) != math.Float32bits(want) && !(got == 0 && want == 0) {
			t.Fatalf("fma32(%g, %g, %g) = %g, want %g", a, b, c, got, want)
		}
	}
	for range 200_000 {
		a := float32(rng.NormFloat64() * math.Exp(rng.NormFloat64()*3))
		b := float32(rng.NormFloat64() * math.Exp(rng.NormFloat64()*3))
		c := float32(rng.NormFloat64() * math.Exp(rng.NormFloat64()*3))
		check(a, b, c)
	}
	// Rounding a·b + c to float64 first lands exactly on a float32 midpoint, which a
	// second rounding to even gets wrong: with c = 1 + 2⁻²³ and a·b = 2⁻²⁴(1 − 2⁻⁴⁶) the
	// exact sum is just below the midpoint 1 + 3·2⁻²⁴, so the result is c, not 1 + 2⁻²².
	a, b, c := float32(1+0x1p-23), float32(0x1p-24*(1-0x1p-23)), float32(1+0x1p-23)
	if float32(float64(a)*float64(b)+float64(c)) == c {
		t.Fatal("the midpoint case does not round wrongly twice: it tests nothing")
	}
	check(a, b, c)
	check(-a, b, -c)
	check(a, b, 1) // just below the midpoint above 1: rounds to 1 either way
	// Products far below c, and subnormal results.
	check(0x1p-70, 0x1p-70, 1)
	check(0x1p-75, 0x1p-75, 0x1p-149)
	check(3, 0x1p-130, -0x1p-128)
}
