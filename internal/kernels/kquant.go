package kernels

import (
	"fmt"

	"github.com/specula/specula/model/dtype"
)

// dequantizeK decodes the K-quant types.
func dequantizeK(t dtype.DType, src []byte, dst []float32) error {
	return fmt.Errorf("kernels: type %s is not supported", t)
}
