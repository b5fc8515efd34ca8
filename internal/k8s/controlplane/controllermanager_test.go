package controlplane

import (
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

// A controller list that is not names is refused before anything starts.
func TestControllerManagerRefusesBadControllerNames(t *testing.T) {
	s := &Server{URL: "https://127.0.0.1:1", Config: &rest.Config{}, BinDir: t.TempDir()}
	for _, bad := range [][]string{{""}, {"resourceclaim-controller,replicaset-controller"}, {"device taint"}} {
		cm, err := startControllerManager(t.Context(), s, "/nonexistent/kube-controller-manager", t.TempDir(), ControllerManagerOptions{Controllers: bad})
		if cm != nil || err == nil || !strings.Contains(err.Error(), "ControllerManagerOptions.Controllers") ||
			!strings.Contains(err.Error(), DeviceTaintEvictionController) {
			t.Errorf("controllers %q: %v, %v", bad, cm, err)
		}
	}
}
