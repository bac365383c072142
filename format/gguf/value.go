package gguf

import (
	"fmt"
	"math"
	"strings"
)

// Type is a GGUF metadata value type, as stored in the file.
type Type uint32

// The GGUF metadata value types.
const (
	TypeUint8   Type = 0
	TypeInt8    Type = 1
	TypeUint16  Type = 2
	TypeInt16   Type = 3
	TypeUint32  Type = 4
	TypeInt32   Type = 5
	TypeFloat32 Type = 6
	TypeBool    Type = 7
	TypeString  Type = 8
	TypeArray   Type = 9
	TypeUint64  Type = 10
	TypeInt64   Type = 11
	TypeFloat64 Type = 12
)

// invalidType is what the zero Value reports: no GGUF type.
const invalidType Type = math.MaxUint32

var typeNames = [...]string{"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool", "string", "array", "uint64", "int64", "float64"}

// String is the type's name, such as "uint32" or "array".
func (t Type) String() string {
	if int64(t) < int64(len(typeNames)) {
		return typeNames[t]
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// size is the encoded size of one value of a fixed-size type, 0 for strings, arrays
// and unknown types.
func (t Type) size() int {
	switch t {
	case TypeUint8, TypeInt8, TypeBool:
		return 1
	case TypeUint16, TypeInt16:
		return 2
	case TypeUint32, TypeInt32, TypeFloat32:
		return 4
	case TypeUint64, TypeInt64, TypeFloat64:
		return 8
	}
	return 0
}

// Value is one GGUF metadata value: a scalar, a string, or an array. Its Go value
// (see [Value.Any]) is one of uint8, int8, uint16, int16, uint32, int32, float32,
// bool, string, uint64, int64 or float64 for scalars; a slice of one of those for an
// array of scalars ([]string for an array of strings, and so on); and []Value for an
// array of arrays, each element itself an array.
//
// Values are made with the constructors ([String], [Uint32], [Array], …) or read
// from a file. The zero Value holds nothing and cannot be written. Arrays share
// their slice with whoever made them: do not modify it afterwards.
type Value struct {
	x any
}

// Element is the set of Go types an array can hold: the scalar types, and Value for an
// array of arrays.
type Element interface {
	uint8 | int8 | uint16 | int16 | uint32 | int32 | float32 | bool | string | uint64 | int64 | float64 | Value
}

// Uint8 returns a uint8 value.
func Uint8(x uint8) Value { return Value{x} }

// Int8 returns an int8 value.
func Int8(x int8) Value { return Value{x} }

// Uint16 returns a uint16 value.
func Uint16(x uint16) Value { return Value{x} }

// Int16 returns an int16 value.
func Int16(x int16) Value { return Value{x} }

// Uint32 returns a uint32 value.
func Uint32(x uint32) Value { return Value{x} }

// Int32 returns an int32 value.
func Int32(x int32) Value { return Value{x} }

// Float32 returns a float32 value.
func Float32(x float32) Value { return Value{x} }

// Bool returns a bool value.
func Bool(x bool) Value { return Value{x} }

// String returns a string value.
func String(x string) Value { return Value{x} }

// Uint64 returns a uint64 value.
func Uint64(x uint64) Value { return Value{x} }

// Int64 returns an int64 value.
func Int64(x int64) Value { return Value{x} }

// Float64 returns a float64 value.
func Float64(x float64) Value { return Value{x} }

// Array returns an array of the given elements; with []Value, an array of arrays
// (every element must then be an array, or the value cannot be written). The slice is
// not copied.
func Array[E Element](elems []E) Value {
	if elems == nil {
		elems = []E{} // keep the element type; a nil slice is still an empty array
	}
	return Value{elems}
}

// Strings returns an array of strings, such as a tokenizer vocabulary.
func Strings(s []string) Value { return Array(s) }

// Float32s returns an array of float32, such as tokenizer scores.
func Float32s(s []float32) Value { return Array(s) }

// Int32s returns an array of int32, such as tokenizer token types.
func Int32s(s []int32) Value { return Array(s) }

// Type is the value's GGUF type; TypeArray for any array.
func (v Value) Type() Type {
	switch v.x.(type) {
	case uint8:
		return TypeUint8
	case int8:
		return TypeInt8
	case uint16:
		return TypeUint16
	case int16:
		return TypeInt16
	case uint32:
		return TypeUint32
	case int32:
		return TypeInt32
	case float32:
		return TypeFloat32
	case bool:
		return TypeBool
	case string:
		return TypeString
	case uint64:
		return TypeUint64
	case int64:
		return TypeInt64
	case float64:
		return TypeFloat64
	case []uint8, []int8, []uint16, []int16, []uint32, []int32, []float32, []bool, []string, []uint64, []int64, []float64, []Value:
		return TypeArray
	}
	return invalidType
}

// Elem is the element type of an array (TypeArray for an array of arrays); for
// anything else it is the value's own type.
func (v Value) Elem() Type {
	switch v.x.(type) {
	case []uint8:
		return TypeUint8
	case []int8:
		return TypeInt8
	case []uint16:
		return TypeUint16
	case []int16:
		return TypeInt16
	case []uint32:
		return TypeUint32
	case []int32:
		return TypeInt32
	case []float32:
		return TypeFloat32
	case []bool:
		return TypeBool
	case []string:
		return TypeString
	case []uint64:
		return TypeUint64
	case []int64:
		return TypeInt64
	case []float64:
		return TypeFloat64
	case []Value:
		return TypeArray
	}
	return v.Type()
}

// Any is the value's Go value (see [Value]); nil for the zero Value.
func (v Value) Any() any { return v.x }

// String formats the value for people: strings quoted, long arrays cut short.
func (v Value) String() string {
	const show = 8
	var b strings.Builder
	switch x := v.x.(type) {
	case nil:
		return "<nil>"
	case string:
		return fmt.Sprintf("%q", x)
	case []string:
		writeList(&b, x, show, func(s string) string { return fmt.Sprintf("%q", s) })
	case []Value:
		writeList(&b, x, show, Value.String)
	case []uint8:
		writeList(&b, x, show, fmtAny)
	case []int8:
		writeList(&b, x, show, fmtAny)
	case []uint16:
		writeList(&b, x, show, fmtAny)
	case []int16:
		writeList(&b, x, show, fmtAny)
	case []uint32:
		writeList(&b, x, show, fmtAny)
	case []int32:
		writeList(&b, x, show, fmtAny)
	case []float32:
		writeList(&b, x, show, fmtAny)
	case []bool:
		writeList(&b, x, show, fmtAny)
	case []uint64:
		writeList(&b, x, show, fmtAny)
	case []int64:
		writeList(&b, x, show, fmtAny)
	case []float64:
		writeList(&b, x, show, fmtAny)
	default:
		return fmt.Sprint(x)
	}
	return b.String()
}

func fmtAny[T any](x T) string { return fmt.Sprint(x) }

// writeList writes "[a b c … (n elements)]", showing at most show elements.
func writeList[T any](b *strings.Builder, s []T, show int, f func(T) string) {
	b.WriteByte('[')
	for i, e := range s[:min(len(s), show)] {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(f(e))
	}
	if len(s) > show {
		fmt.Fprintf(b, " … (%d elements)", len(s))
	}
	b.WriteByte(']')
}

// uint64Of returns the value as a uint64 if it is an integer that is not negative.
func (v Value) uint64Of() (uint64, bool) {
	switch x := v.x.(type) {
	case uint8:
		return uint64(x), true
	case uint16:
		return uint64(x), true
	case uint32:
		return uint64(x), true
	case uint64:
		return x, true
	case int8:
		return uint64(x), x >= 0
	case int16:
		return uint64(x), x >= 0
	case int32:
		return uint64(x), x >= 0
	case int64:
		return uint64(x), x >= 0
	}
	return 0, false
}

// int64Of returns the value as an int64 if it is an integer that fits.
func (v Value) int64Of() (int64, bool) {
	switch x := v.x.(type) {
	case int8:
		return int64(x), true
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case uint8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case uint64:
		return int64(x), x <= math.MaxInt64
	}
	return 0, false
}

// int32sOf returns an array of integers as []int32 when every element fits; an
// []int32 array is returned as is, others are converted.
func (v Value) int32sOf() ([]int32, bool) {
	switch x := v.x.(type) {
	case []int32:
		return x, true
	case []int8:
		return convert(x, func(e int8) bool { return true })
	case []uint8:
		return convert(x, func(e uint8) bool { return true })
	case []int16:
		return convert(x, func(e int16) bool { return true })
	case []uint16:
		return convert(x, func(e uint16) bool { return true })
	case []uint32:
		return convert(x, func(e uint32) bool { return e <= math.MaxInt32 })
	case []int64:
		return convert(x, func(e int64) bool { return e >= math.MinInt32 && e <= math.MaxInt32 })
	case []uint64:
		return convert(x, func(e uint64) bool { return e <= math.MaxInt32 })
	}
	return nil, false
}

func convert[T int8 | uint8 | int16 | uint16 | uint32 | int64 | uint64](s []T, fits func(T) bool) ([]int32, bool) {
	out := make([]int32, len(s))
	for i, e := range s {
		if !fits(e) {
			return nil, false
		}
		out[i] = int32(e)
	}
	return out, true
}
