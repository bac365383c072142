package gpu

import (
	"fmt"
	"unsafe"
)

// blas holds the cuBLAS entry points the backend uses.
type blas struct {
	lib                                library
	create, destroy, setStream, gemmEx uintptr
	getStatusName                      uintptr // optional
}

// cuBLAS and CUDA library constants (cublas_api.h, library_types.h).
const (
	cublasOpN         = 0
	cublasOpT         = 1
	cudaR32F          = 0
	cudaR16F          = 2
	cudaR16BF         = 14
	cublasCompute32F  = 68
	cublasGemmDefault = -1
)

func loadBLAS(env searchEnv) (*blas, error) {
	lib, err := openLibrary(specCUBLAS(), searchDirs(env, specCUBLAS()))
	if err != nil {
		return nil, err
	}
	b := &blas{lib: lib}
	if err := lib.symbols(map[string]*uintptr{
		"cublasCreate_v2":    &b.create,
		"cublasDestroy_v2":   &b.destroy,
		"cublasSetStream_v2": &b.setStream,
		"cublasGemmEx":       &b.gemmEx,
	}); err != nil {
		return nil, err
	}
	b.getStatusName = lib.optional("cublasGetStatusName")
	return b, nil
}

// cublasStatusNames names the cublasStatus_t values.
func cublasStatusName(code uint32) string {
	switch code {
	case 1:
		return "CUBLAS_STATUS_NOT_INITIALIZED"
	case 3:
		return "CUBLAS_STATUS_ALLOC_FAILED"
	case 7:
		return "CUBLAS_STATUS_INVALID_VALUE"
	case 8:
		return "CUBLAS_STATUS_ARCH_MISMATCH"
	case 11:
		return "CUBLAS_STATUS_MAPPING_ERROR"
	case 13:
		return "CUBLAS_STATUS_EXECUTION_FAILED"
	case 14:
		return "CUBLAS_STATUS_INTERNAL_ERROR"
	case 15:
		return "CUBLAS_STATUS_NOT_SUPPORTED"
	case 16:
		return "CUBLAS_STATUS_LICENSE_ERROR"
	}
	return fmt.Sprintf("cublasStatus %d", code)
}

func (b *blas) check(what string, r uintptr) error {
	code := uint32(r)
	if code == 0 {
		return nil
	}
	name := ""
	if b.getStatusName != 0 {
		name = goString(call(b.getStatusName, uintptr(code)))
	}
	if name == "" {
		name = cublasStatusName(code)
	}
	return fmt.Errorf("cuda: %s: %s", what, name)
}

func (b *blas) newHandle() (uintptr, error) {
	var h uintptr
	if err := b.check("cublasCreate", call(b.create, uintptr(unsafe.Pointer(&h)))); err != nil {
		return 0, err
	}
	// The default (legacy) stream, which the kernels and copies use too.
	if err := b.check("cublasSetStream", call(b.setStream, h, 0)); err != nil {
		_ = b.check("cublasDestroy", call(b.destroy, h))
		return 0, err
	}
	return h, nil
}

// gemmScalars holds alpha and beta where cuBLAS can read them (host pointer mode).
type gemmScalars struct{ alpha, beta float32 }

// gemm computes, in column-major terms, C[m×n] = alpha·op(A)·op(B) + beta·C with fp32
// accumulation.
func (b *blas) gemm(h uintptr, s *gemmScalars, transA, transB, m, n, k int, a devptr, aType, lda int,
	bp devptr, bType, ldb int, c devptr, cType, ldc int) error {
	r := call(b.gemmEx, h, uintptr(transA), uintptr(transB), uintptr(m), uintptr(n), uintptr(k),
		uintptr(unsafe.Pointer(&s.alpha)), uintptr(a), uintptr(aType), uintptr(lda),
		uintptr(bp), uintptr(bType), uintptr(ldb),
		uintptr(unsafe.Pointer(&s.beta)), uintptr(c), uintptr(cType), uintptr(ldc),
		uintptr(cublasCompute32F), uintptr(uint32(0xffffffff))) // CUBLAS_GEMM_DEFAULT (-1) as a 32-bit int
	return b.check(fmt.Sprintf("cublasGemmEx(m=%d, n=%d, k=%d)", m, n, k), r)
}
