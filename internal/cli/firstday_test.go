package cli

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/gpu/nvml"
	"github.com/gpuslice/gpuslice/internal/testkit"
)

// The README's first minute on the default simulated host (a DGX A100,
// MIG off, the allocator free to turn it on), as a new user types it:
// after a MIG claim turned MIG on for one GPU, `run --mode mps --compute
// 30` still gets 30% of a whole GPU, not 72% of an idle 3g.20gb; `--gpus
// 2` gives two devices on one node; `--node` naming another host's node
// is refused before any claim is made; a claim whose pinned node is
// removed fails, and run stops CMD and says why.
func TestFirstDayRun(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a server")
	}
	t.Parallel()
	dir, addr, url, _, logs := serveUp(t, "--simulate", "dgx-a100", "--node", "firstday")
	admin := adminToken(t, dir)
	run := func(args ...string) (string, string, error) {
		var out, errOut bytes.Buffer
		cmd := New(&out, &errOut)
		cmd.SetArgs(append([]string{"run", "--server", url, "--token", admin, "--node", "firstday", "--timeout", "20s"}, args...))
		err := cmd.Execute()
		return out.String(), errOut.String(), err
	}
	if _, errOut, err := run("--mode", "mig", "--profile", "3g.20gb", "--", "true"); err != nil {
		t.Fatalf("mig run: %v\n%s\nserve:\n%s", err, errOut, logs.String())
	}
	out, errOut, err := run("--mode", "mps", "--memory", "4GiB", "--compute", "30", "--", "sh", "-c", "echo pct=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE dev=$CUDA_VISIBLE_DEVICES")
	if err != nil || !strings.Contains(out, "pct=30 ") || !strings.Contains(out, "dev=GPU-") || strings.Contains(errOut, "note:") {
		t.Fatalf("mps 30%%: %v\nstdout %s\nstderr %s", err, out, errOut)
	}
	out, errOut, err = run("--gpus", "2", "--memory", "8GiB", "--", "sh", "-c", "echo dev=$CUDA_VISIBLE_DEVICES")
	if err != nil || strings.Count(out, ",") != 1 {
		t.Fatalf("--gpus 2: %v\nstdout %s\nstderr %s", err, out, errOut)
	}
	// Two devices of their own shapes on one GPU: NVIDIA's 4g + 3g.
	out, errOut, err = run("--device", "profile=4g.20gb,mode=mig", "--device", "profile=3g.20gb,mode=mig", "--same-gpu", "--", "sh", "-c", "echo dev=$CUDA_VISIBLE_DEVICES")
	if err != nil || strings.Count(out, "MIG-") != 2 {
		t.Fatalf("--device ×2 --same-gpu: %v\nstdout %s\nstderr %s", err, out, errOut)
	}
	if _, _, err := run("--device", "profile=3g.20gb", "--memory", "1GiB", "--", "true"); err == nil || !strings.Contains(err.Error(), "--memory") {
		t.Fatalf("--device with --memory: %v", err)
	}
	if _, _, err := run("--gpus", "0", "--", "true"); err == nil || !strings.Contains(err.Error(), "--gpus 0") {
		t.Fatalf("--gpus 0: %v", err)
	}

	// A node whose agent runs on another machine.
	far := api.RegisterRequest{Host: "elsewhere", Driver: "580.00",
		Inventory: alloc.Node{GPUs: []alloc.GPU{{UUID: "GPU-0f0f0f0f-1111-2222-3333-444455556666", Model: "L4", Healthy: true, Sharing: alloc.Sharing{Mode: alloc.Dynamic}}}}}
	if code, err := apiCall(addr, admin, "PUT", "/v1/nodes/far", far, nil); err != nil || code != 200 {
		t.Fatalf("registering far: %d %v", code, err)
	}
	var out2, errOut2 bytes.Buffer
	cmd := New(&out2, &errOut2)
	cmd.SetArgs([]string{"run", "--server", url, "--token", admin, "--node", "far", "--", "sh", "-c", "echo ran"})
	err = cmd.Execute()
	if err == nil || !strings.Contains(err.Error(), "host elsewhere") || strings.Contains(out2.String(), "ran") {
		t.Fatalf("run --node far: %v\nstdout %s", err, out2.String())
	}
	var claims []api.Claim
	if _, err := apiCall(addr, admin, "GET", "/v1/claims", nil, &claims); err != nil {
		t.Fatal(err)
	}
	for _, c := range claims {
		if c.Spec.Node == "far" {
			t.Fatalf("a claim was made on far: %+v", c)
		}
	}

	// The node of a running claim is removed: the claim fails, run stops
	// CMD and says why.
	type result struct {
		errOut string
		err    error
	}
	done := make(chan result, 1)
	go func() {
		var out bytes.Buffer
		errOut := &syncBuffer{} // CMD's stderr is copied into it too
		cmd := New(&out, errOut)
		cmd.SetArgs([]string{"run", "--server", url, "--token", admin, "--node", "firstday", "--lease", "3s", "--", "sleep", "60"})
		err := cmd.Execute()
		done <- result{errOut.String(), err}
	}()
	testkit.Eventually(t, 20*time.Second, "the claim to run", func() (bool, string) {
		if _, err := apiCall(addr, admin, "GET", "/v1/claims", nil, &claims); err != nil {
			t.Fatal(err)
		}
		running := false
		for _, c := range claims {
			running = running || (c.State == api.Running && c.Spec.Node == "firstday")
		}
		return running, fmt.Sprintf("%+v", claims)
	})
	if code, err := apiCall(addr, admin, "DELETE", "/v1/nodes/firstday", nil, nil); err != nil || code != 204 {
		t.Fatalf("removing the node: %d %v", code, err)
	}
	select {
	case r := <-done:
		if r.err == nil || !strings.Contains(r.err.Error(), "node firstday was removed") || !strings.Contains(r.errOut, "stopping CMD") {
			t.Fatalf("run after its node was removed: %v\nstderr %s", r.err, r.errOut)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("run kept CMD going after its node was removed")
	}
}

// gpuslice agent never simulates unless told: on a host where NVML does
// not load it exits with the error and what to check.
func TestAgentWithoutNVMLFailsUnlessSimulated(t *testing.T) {
	if dev, err := nvml.Open(); err == nil {
		_ = dev.Close()
		t.Skip("NVML loads here: the agent would drive the real GPUs")
	}
	var out, errOut bytes.Buffer
	cmd := New(&out, &errOut)
	cmd.SetArgs([]string{"agent", "--server", "http://127.0.0.1:1", "--token", "gs_ag_x", "--node", "n1"})
	err := cmd.Execute()
	if err == nil {
		t.Fatalf("the agent started without NVML:\n%s", errOut.String())
	}
	for _, want := range []string{"NVIDIA", "nvidia-smi", "libnvidia-ml.so.1", "Container Toolkit", "--simulate"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if strings.Contains(errOut.String(), "simulated GPUs (") {
		t.Errorf("the agent simulated: %s", errOut.String())
	}
}

func TestParseDevice(t *testing.T) {
	r, err := parseDevice(" memory=10GiB, compute=30 ,mode=mps,profile=3g.20gb,workload=inference", 2)
	if err != nil || r.Name != "dev2" || r.MemoryMiB != 10240 || r.ComputePercent != 30 || r.Mode != alloc.MPS || r.Profile != "3g.20gb" || r.Workload != alloc.WorkloadInference {
		t.Fatalf("got %+v, %v", r, err)
	}
	for in, want := range map[string]string{
		"":                     "empty",
		"memory=10":            "no unit",
		"compute=101":          "0..100",
		"colour=red":           "unknown key",
		"mode=mps,mode=mig":    "twice",
		"profile":              "key=value",
		"memory=1GiB,,mode=ts": "key=value",
	} {
		if _, err := parseDevice(in, 0); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseDevice(%q) = %v, want an error with %q", in, err, want)
		}
	}
}

func FuzzParseDevice(f *testing.F) {
	for _, s := range []string{"memory=10GiB,mode=mps", "profile=3g.20gb", "compute=30", "=", ",", "memory=1.5Gi"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := parseDevice(s, 0)
		if err == nil && (r.ComputePercent < 0 || r.ComputePercent > 100 || r.MemoryMiB < 0) {
			t.Fatalf("parseDevice(%q) accepted %+v", s, r)
		}
	})
}
