package dtype

import (
	"math"
	"testing"
)

func TestF16RoundTrip(t *testing.T) {
	// Every half value converts to float32 and back to itself (NaNs to a NaN).
	for h := range 1 << 16 {
		f := F16ToF32(uint16(h))
		back := F32ToF16(f)
		if f != f {
			if back&0x7c00 != 0x7c00 || back&0x3ff == 0 {
				t.Fatalf("NaN %#04x came back as %#04x", h, back)
			}
			continue
		}
		if back != uint16(h) {
			t.Fatalf("%#04x -> %v -> %#04x", h, f, back)
		}
	}
}

func TestF32ToF16Rounding(t *testing.T) {
	tests := []struct {
		f    float32
		want uint16
	}{
		{1, 0x3c00},
		{-2, 0xc000},
		{65504, 0x7bff},
		{65520, 0x7c00}, // rounds up to Inf
		{1e10, 0x7c00},
		{float32(math.Inf(-1)), 0xfc00},
		{5.960464477539063e-08, 0x0001}, // smallest subnormal
		{2.98e-08, 0x0000},              // just below half of it: rounds to 0
		{1 + 1.0/2048, 0x3c00},          // tie: rounds to even
		{1 + 3.0/2048, 0x3c02},          // tie: rounds to even (up)
		{6.097555160522461e-05, 0x03ff}, // largest subnormal
	}
	for _, tt := range tests {
		if got := F32ToF16(tt.f); got != tt.want {
			t.Errorf("F32ToF16(%v) = %#04x, want %#04x", tt.f, got, tt.want)
		}
	}
}

func TestBF16(t *testing.T) {
	for _, f := range []float32{0, 1, -1.5, 3.140625, 1e30, -1e-30} {
		if got := BF16ToF32(F32ToBF16(f)); math.Abs(float64(got-f)) > math.Abs(float64(f))/128 {
			t.Errorf("bf16 round trip of %v gave %v", f, got)
		}
	}
	if F32ToBF16(1+1.0/256) != 0x3f80 { // tie to even
		t.Errorf("tie rounding: %#04x", F32ToBF16(1+1.0/256))
	}
	if g := BF16ToF32(F32ToBF16(float32(math.NaN()))); g == g {
		t.Error("NaN lost")
	}
}
