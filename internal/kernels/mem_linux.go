package kernels

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// hugePage is the size of a transparent huge page on amd64 and arm64 Linux.
const hugePage = 2 << 20

// weightBytes allocates the storage of a repacked matrix. Large ones are mapped
// anonymously and advised to use transparent huge pages: a decoding pass streams
// every weight once, and with 4 KiB pages every 4 KiB of it costs a TLB miss. owner is the value whose lifetime
// the memory follows: it is unmapped when the matrix is collected.
func weightBytes(n int, owner *Matrix) []byte {
	if n < hugePage {
		return make([]byte, n)
	}
	size := (n + hugePage - 1) &^ (hugePage - 1)
	b, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		return make([]byte, n)
	}
	_ = unix.Madvise(b, unix.MADV_HUGEPAGE) // advice: without it the pages are small
	runtime.AddCleanup(owner, func(b []byte) { _ = unix.Munmap(b) }, b)
	owner.mapped = int64(size)
	return b[:n]
}
