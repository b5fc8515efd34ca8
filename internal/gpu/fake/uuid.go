package fake

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// gpuUUID is "GPU-" and a hash of the seed and the index in NVML's
// 8-4-4-4-12 form.
func gpuUUID(seed int64, index int) string {
	return "GPU-" + hashUUID(fmt.Sprintf("gpuslice/fake/gpu/%d/%d", seed, index))
}

// migUUID is "MIG-" and a hash of the GPU's uuid and the GPU-instance id.
func migUUID(gpuUUID string, giID int) string {
	return "MIG-" + hashUUID(fmt.Sprintf("gpuslice/fake/mig/%s/%d", gpuUUID, giID))
}

func hashUUID(key string) string {
	sum := sha256.Sum256([]byte(key))
	h := hex.EncodeToString(sum[:16])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}
