package main

import (
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// TestEncodings checks one of each instruction form against llvm-mc.
func TestEncodings(t *testing.T) {
	if _, err := exec.LookPath("llvm-mc"); err != nil {
		t.Skip("llvm-mc not found")
	}
	ins := []inst{
		add("4s", 1, 2, 3), mla("4s", 10, 11, 12), addp("4s", 1, 2, 3),
		smax("4s", 1, 2, 3), cmtst("16b", 1, 2, 3), and(1, 2, 3), eor(7, 8, 9), bit(10, 11, 12),
		sdot(1, 2, 3, 0), sdot(31, 30, 29, 3), sdot(5, 6, 17, 2), smmla(1, 2, 3), mlaElem(1, 2, 19, 3),
		smull("8b", 1, 2, 3), smull("16b", 1, 2, 3), smull("4h", 1, 2, 3), smlal("8h", 4, 5, 6), smlal("4h", 4, 5, 6),
		saddlp("8h", 1, 2), sadalp("16b", 3, 4), sadalp("8h", 3, 4), sqxtn("4s", 3, 4), sqxtn("8h", 3, 4),
		ushr("16b", 1, 2, 4), ushr("4s", 1, 2, 16), shl("16b", 1, 2, 4), shl("4s", 1, 2, 16),
		sxtl("8b", 1, 2), sxtl("16b", 1, 2), uxtl("4h", 1, 2), uxtl("8h", 1, 2), sxtl("4h", 3, 4),
		dupElem("4s", 1, 2, 3), dupElem("16b", 1, 2, 9), dupElem("8h", 1, 2, 5), tbl(1, 2, 3),
		uzp1("8h", 1, 2, 3), uzp2("4s", 1, 2, 3), zip1("2d", 1, 2, 3), zip2("16b", 1, 2, 3),
		fadd(1, 2, 3), fsub(1, 2, 3), fmul(1, 2, 3), fmax(1, 2, 3), fmulElem(1, 2, 3, 2), fmlaElem(1, 2, 20, 1), scvtf(1, 2), fcvtns(1, 2), fabs(1, 2), fcvtl(1, 2, false), fcvtl(1, 2, true), fmaxv(1, 2),
		shll(1, 2, false), shll(3, 4, true),
		sqxtn2("4s", 1, 2), sqxtn2("8h", 3, 4), neg("8h", 1, 2), neg("4s", 5, 6), saddlv(1, 2), movi16b(31, 0x81), movi16b(3, 0x7f),
		sshll("4h", 1, 2, 5), sshll("8h", 3, 4, 5), sshll("8b", 5, 6, 1),
	}
	var src strings.Builder
	for _, in := range ins {
		src.WriteString(in.text + "\n")
	}
	cmd := exec.Command("llvm-mc", "-triple=aarch64", "-mattr=+dotprod,+i8mm", "-show-encoding")
	cmd.Stdin = strings.NewReader(src.String())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	re := regexp.MustCompile(`encoding: \[0x(..),0x(..),0x(..),0x(..)\]`)
	m := re.FindAllStringSubmatch(string(out), -1)
	if len(m) != len(ins) {
		t.Fatalf("%d encodings for %d instructions: %s", len(m), len(ins), out)
	}
	for i, in := range ins {
		want := m[i][4] + m[i][3] + m[i][2] + m[i][1]
		if got := fmt.Sprintf("%08x", in.word); got != want {
			t.Errorf("%s: %s, llvm-mc %s", in.text, got, want)
		}
	}
}
