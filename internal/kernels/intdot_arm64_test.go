//go:build arm64 && !purego

package kernels

import "github.com/specula/specula/format/dtype"

// asmIntTables are the assembly integer kernels of each family, by type.
func asmIntTables() map[string]map[dtype.DType]intTable {
	tables := map[string]map[dtype.DType]intTable{"NEON i8mm": {}, "NEON dotprod": {}, "NEON": {}}
	for _, t := range quantTypes {
		if k := intI8MMTable(t); k[2] != nil {
			tables["NEON i8mm"][t] = k
		}
		if k := intDotTable(t); k[1] != nil {
			tables["NEON dotprod"][t] = k
		}
		if k := intNEONTable(t); k[1] != nil {
			tables["NEON"][t] = k
		}
	}
	return tables
}

// familyRuns reports whether this machine can run a kernel family, and if not why.
func familyRuns(name string) (bool, string) {
	switch name {
	case "NEON i8mm":
		return hasI8MM, "the CPU lacks the int8 matrix multiply (i8mm) or the dot product"
	case "NEON dotprod":
		return hasDot, "the CPU lacks the dot product (asimddp)"
	}
	return hasNEON, "SPECULA_CPU=generic"
}
