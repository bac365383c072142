package llama

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// release tells the kernel that the memory-mapped bytes of a tensor that was copied
// (repacked) will not be read again, so that they stop counting in the process's
// resident memory; the file's pages stay in the page cache.
func release(data []byte) {
	page := uintptr(os.Getpagesize())
	start := uintptr(unsafe.Pointer(unsafe.SliceData(data)))
	lo, hi := (start+page-1)&^(page-1), (start+uintptr(len(data)))&^(page-1)
	if hi <= lo {
		return
	}
	_ = unix.Madvise(data[lo-start:hi-start], unix.MADV_DONTNEED) // advice
}
