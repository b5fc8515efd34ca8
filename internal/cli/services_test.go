package cli

import (
	"os"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/server"
)

// The seed's compose file becomes a service with its autoscaling and
// serverless settings; without a command it says how to give one.
func TestReadServicesFromCompose(t *testing.T) {
	compose := `services:
  gpuinfo:
    image: ghcr.io/omnistrate-community/gpu-slicing-example:0.0.3
    x-omnistrate-capabilities:
      autoscaling: {maxReplicas: 3, minReplicas: 1, idleMinutesBeforeScalingDown: 2, idleThreshold: 20, overUtilizedMinutesBeforeScalingUp: 3, overUtilizedThreshold: 80}
      serverlessConfiguration: {targetPort: 5000, enableAutoStop: true, minimumNodesInPool: 1}
x-internal-integrations:
  multiTenantGpu: {instanceType: g4dn.xlarge, timeSlicingReplicas: 2}
`
	if _, err := readServices("compose.yaml", []byte(compose), nil); err == nil || !strings.Contains(err.Error(), "give the command after --") {
		t.Fatalf("no command: %v", err)
	}
	svcs, err := readServices("compose.yaml", []byte(compose), []string{"python", "serve.py"})
	if err != nil {
		t.Fatal(err)
	}
	a := svcs[0].Autoscaling
	if len(svcs) != 1 || svcs[0].Name != "gpuinfo" || a.MaxReplicas != 3 || a.TargetPort != 5000 || !a.EnableAutoStop ||
		a.OverUtilizedMinutesBeforeScalingUp != 3 || len(svcs[0].Claim.Requests) == 0 || svcs[0].Command[0] != "python" {
		t.Fatalf("%+v", svcs)
	}
	if _, err := readServices("s.yaml", []byte("name: x\ncommand: [a]\nclaim: {requests: [{name: gpu}]}\nautoscaling: {maxReplicas: 2, enableAutoStop: true}\n"), nil); err == nil ||
		!strings.Contains(err.Error(), "targetPort") {
		t.Fatalf("auto-stop without a port: %v", err)
	}
	if _, err := readServices("s.yaml", []byte("name: x\ncomand: [a]\n"), nil); err == nil || !strings.Contains(err.Error(), "comand") {
		t.Fatalf("unknown field: %v", err)
	}
}

// The seed's MIG compose file, as written, makes a service on the default
// metric; x-gpuslice.metric chooses requests (with targetConcurrency).
func TestComposeChoosesTheServiceMetric(t *testing.T) {
	seed, err := os.ReadFile("testdata/seeds/compose-mig.yaml")
	if err != nil {
		t.Fatal(err)
	}
	svcs, err := readServices("compose-mig.yaml", seed, []string{"python3", "serve.py"})
	if err != nil || len(svcs) != 1 || svcs[0].Metric != "" || svcs[0].Claim.Requests[0].Profile != "1g.5gb" {
		t.Fatalf("seed as written: %+v %v", svcs, err)
	}
	chosen := strings.Replace(string(seed), "    x-omnistrate-capabilities:", "    x-gpuslice: {metric: requests, targetConcurrency: 4}\n    x-omnistrate-capabilities:", 1)
	svcs, err = readServices("compose-mig.yaml", []byte(chosen), []string{"python3", "serve.py"})
	if err != nil || svcs[0].Metric != "requests" || svcs[0].TargetConcurrency != 4 {
		t.Fatalf("metric requests: %+v %v", svcs, err)
	}
	if err := server.ValidateServiceSpec(svcs[0].ServiceSpec); err != nil {
		t.Fatal(err)
	}
}
