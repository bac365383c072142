// Command _genarm64 writes specula's arm64 assembly kernels (avo, which writes the
// amd64 ones in ../_gen, has no arm64 back end):
//
//	go run ./internal/kernels/_genarm64 -out internal/kernels/int_arm64.s -stubs internal/kernels/int_arm64_stubs.go
//
// (the go:generate line in internal/kernels/dispatch_arm64.go runs exactly that). Every
// vector instruction is written as a WORD with its GNU-syntax text beside it (enc.go);
// the kernels' TestArm64Encodings checks each word against llvm-mc. The pure-Go twins
// in the package define the arithmetic, and every kernel here reproduces it bit for
// bit: the same exact integer sums, then the same float32 operations in the same
// order, none fused unless the twin's is.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/format"
	"log"
	"os"
	"strings"
)

func main() {
	out := flag.String("out", "int_arm64.s", "the assembly file to write")
	stubs := flag.String("stubs", "int_arm64_stubs.go", "the Go declarations to write")
	counts := flag.Bool("counts", false, "write nothing; print each product kernel's instructions per 16 rows × 256 values instead (the table of docs/platforms.md)")
	flag.Parse()
	var f file
	intKernels(&f)
	floatKernels(&f)
	attnKernels(&f)
	quantKernels(&f)
	if *counts {
		printCounts(&f)
		return
	}
	if err := f.write(*out, *stubs); err != nil {
		log.Fatal(err)
	}
}

// printCounts prints, for every product kernel, the instructions of its loop scaled
// to 16 weight rows × 256 values (all, vector, loads) and the weight bytes they read.
func printCounts(f *file) {
	fmt.Println("| kernel | instructions | vector | loads | weight bytes |")
	fmt.Println("|---|---|---|---|---|")
	for _, g := range f.funcs {
		if g.per == 0 {
			continue
		}
		c, k := g.loopCost(), 256/g.per
		fmt.Printf("| %s | %d | %d | %d | %d |\n", g.name, k*c.all, k*c.vector, k*c.loads, g.wbytes*256/g.per)
	}
}

// file collects the functions of one assembly file, their Go declarations and the
// constant tables they read.
type file struct {
	funcs  []*fn
	tables strings.Builder
	// goCode is Go written after the declarations (the kernel tables); imports the
	// packages it names in goImports.
	goCode    strings.Builder
	goImports []string
}

// table adds a read-only table of bytes named name (a multiple of 8 bytes) and
// returns the assembler's name for it, to take its address with MOVD $name(SB), R.
func (f *file) table(name string, b []byte) string {
	for i := 0; i < len(b); i += 8 {
		var w uint64
		for k := 7; k >= 0; k-- {
			w = w<<8 | uint64(b[i+k])
		}
		fmt.Fprintf(&f.tables, "DATA ·%s+%d(SB)/8, $0x%016x\n", name, i, w)
	}
	fmt.Fprintf(&f.tables, "GLOBL ·%s(SB), RODATA|NOPTR, $%d\n", name, len(b))
	return "·" + name
}

// fn is one assembly function being written.
type fn struct {
	name, decl, doc string
	args            int // bytes of arguments
	body            strings.Builder
	// per and wbytes are, for the product kernels, the values one pass of the main
	// loop takes for each of the 16 rows and the weight bytes it reads (for -counts).
	per, wbytes int
}

// newFn starts function name with the Go signature sig (parameters and results, as
// in a func type: "(w *byte, n int)") and argument bytes args.
func (f *file) newFn(name, sig string, args int, doc string) *fn {
	g := &fn{name: name, decl: "func " + name + sig, doc: doc, args: args}
	f.funcs = append(f.funcs, g)
	return g
}

// find returns the function written under name.
func (f *file) find(name string) *fn {
	for _, g := range f.funcs {
		if g.name == name {
			return g
		}
	}
	panic("no function " + name)
}

// loopLen is the number of instructions in the function's main loop (from the label
// loop, or quad for the float kernels, to its branch back), the measure the generator
// compares kernels by.
func (g *fn) loopLen() int {
	c := g.loopCost()
	return c.all
}

// cost counts the instructions of a loop body: all, the vector ones (the WORDs) and
// the loads.
type cost struct{ all, vector, loads int }

// loopCost counts the instructions of the function's main loop.
func (g *fn) loopCost() cost {
	body := g.body.String()
	var loop string
	for _, label := range []string{"loop", "quad"} {
		if _, after, ok := strings.Cut(body, "\n"+label+":\n"); ok {
			loop, _, _ = strings.Cut(after, "\tB "+label+"\n")
			break
		}
	}
	var c cost
	for _, line := range strings.Split(strings.TrimSpace(loop), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasSuffix(line, ":") {
			continue
		}
		c.all++
		switch {
		case strings.HasPrefix(line, "WORD"):
			c.vector++
		case strings.HasPrefix(line, "VLD1"), strings.HasPrefix(line, "FMOV") && strings.Contains(strings.Fields(line)[1], "("):
			c.loads++
		}
	}
	return c
}

// i emits an encoded vector instruction.
func (g *fn) i(in inst) { fmt.Fprintf(&g.body, "\tWORD $0x%08x // %s\n", in.word, in.text) }

// op emits a line of Go assembly.
func (g *fn) op(format string, args ...any) { fmt.Fprintf(&g.body, "\t"+format+"\n", args...) }

// label emits a label.
func (g *fn) label(l string) { fmt.Fprintf(&g.body, "%s:\n", l) }

// write writes the assembly and the stubs.
func (f *file) write(asmPath, stubPath string) error {
	var s bytes.Buffer
	s.WriteString("// Code generated by internal/kernels/_genarm64. DO NOT EDIT.\n\n//go:build arm64 && !purego\n\n#include \"textflag.h\"\n\n")
	s.WriteString(f.tables.String())
	for _, g := range f.funcs {
		fmt.Fprintf(&s, "\n// %s\nTEXT ·%s(SB), NOSPLIT|NOFRAME, $0-%d\n%s\tRET\n", g.decl, g.name, g.args, g.body.String())
	}
	if err := os.WriteFile(asmPath, s.Bytes(), 0o644); err != nil {
		return err
	}
	var d bytes.Buffer
	d.WriteString("// Code generated by internal/kernels/_genarm64. DO NOT EDIT.\n\n//go:build arm64 && !purego\n\npackage kernels\n")
	for _, imp := range f.goImports {
		fmt.Fprintf(&d, "import %q\n", imp)
	}
	for _, g := range f.funcs {
		fmt.Fprintf(&d, "\n// %s\n//\n//go:noescape\n%s\n", g.doc, g.decl)
	}
	d.WriteString(f.goCode.String())
	src, err := format.Source(d.Bytes())
	if err != nil {
		return fmt.Errorf("stubs: %w", err)
	}
	return os.WriteFile(stubPath, src, 0o644)
}
