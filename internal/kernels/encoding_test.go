package kernels

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestArm64Encodings checks every instruction the arm64 generator wrote as a WORD
// against llvm-mc's encoding of the GNU-syntax text beside it, so that no hand-made
// encoding in _genarm64 goes unchecked. It runs on any machine with llvm-mc.
func TestArm64Encodings(t *testing.T) {
	mc, err := exec.LookPath("llvm-mc")
	if err != nil {
		t.Skip("arm64 encodings not checked: llvm-mc not found")
	}
	files, err := filepath.Glob("*_arm64.s")
	if err != nil || len(files) == 0 {
		t.Fatalf("no arm64 assembly: %v", err)
	}
	word := regexp.MustCompile(`^\s*WORD \$0x([0-9a-f]{8}) // (.*)$`)
	seen := map[string]string{} // text → word, each instruction checked once
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(src), "\n") {
			if m := word.FindStringSubmatch(line); m != nil {
				if w, ok := seen[m[2]]; ok && w != m[1] {
					t.Errorf("%s: %q is both %s and %s", f, m[2], w, m[1])
				}
				seen[m[2]] = m[1]
			}
		}
	}
	texts := make([]string, 0, len(seen))
	for text := range seen {
		texts = append(texts, text)
	}
	cmd := exec.Command(mc, "-triple=aarch64", "-mattr=+dotprod,+i8mm,+fullfp16", "-show-encoding")
	cmd.Stdin = strings.NewReader(strings.Join(texts, "\n") + "\n")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("llvm-mc: %v: %s", err, out.String())
	}
	enc := regexp.MustCompile(`encoding: \[0x(..),0x(..),0x(..),0x(..)\]`)
	got := enc.FindAllStringSubmatch(out.String(), -1)
	if len(got) != len(texts) {
		t.Fatalf("llvm-mc encoded %d of %d instructions:\n%s", len(got), len(texts), out.String())
	}
	for i, text := range texts {
		want := fmt.Sprintf("%s%s%s%s", got[i][4], got[i][3], got[i][2], got[i][1])
		if seen[text] != want {
			t.Errorf("%s: generator wrote %s, llvm-mc encodes %s", text, seen[text], want)
		}
	}
	t.Logf("%d distinct instructions checked", len(texts))
}
