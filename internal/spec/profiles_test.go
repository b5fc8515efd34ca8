package spec

import (
	"strings"
	"testing"
	"time"
)

func TestReadProfiles(t *testing.T) {
	src := `apiVersion: gpuslice.dev/v1alpha1
kind: Profiles
fleet: {gpu: A100-80GB, gpusPerNode: 8, nodes: 4}
workloads:
  - name: chat
    kind: online-inference
    tenant: a
    memory: 8Gi
    utilization: 30
    replicas: 3
    arrivalsPerHour: 2.5
    duration: 90m
  - name: nb
    kind: notebook
    memory: 4Gi
    utilization: 5
    latencySensitive: false
    isolation: hardware
simulation: {duration: 7d, seed: 42}
`
	p, diags := ReadProfiles("p.yaml", []byte(src))
	if diags.Err() != nil {
		t.Fatal(diags)
	}
	if p.Fleet.GPU != "A100-80GB" || p.Fleet.GPUsPerNode != 8 || p.Fleet.Nodes != 4 {
		t.Fatalf("fleet %+v", p.Fleet)
	}
	c, n := p.Workloads[0], p.Workloads[1]
	if c.MemoryMiB != 8192 || c.Utilization != 30 || !c.LatencySensitive || c.ArrivalsPerHour != 2.5 || c.Duration != 90*time.Minute || c.Replicas != 3 {
		t.Fatalf("chat %+v", c)
	}
	if n.Tenant != "default" || n.LatencySensitive || !n.HardwareIsolation || n.Replicas != 1 {
		t.Fatalf("nb %+v", n)
	}
	if p.Sim.Duration != 7*24*time.Hour || p.Sim.Seed != 42 || p.Sim.SampleEvery <= 0 {
		t.Fatalf("sim %+v", p.Sim)
	}
}

func TestReadProfilesErrors(t *testing.T) {
	cases := map[string]struct{ src, want string }{
		"unknown kind": {`apiVersion: gpuslice.dev/v1alpha1
kind: Profiles
fleet: {gpu: A100-80GB}
workloads:
  - {name: a, kind: online-inferense, memory: 1Gi, utilization: 5}
`, `p.yaml:5:21: error: workloads[0].kind: unknown kind "online-inferense" (did you mean "online-inference"?`},
		"unknown field": {`apiVersion: gpuslice.dev/v1alpha1
kind: Profiles
fleet: {gpu: A100-80GB}
workloads:
  - {name: a, kind: notebook, memory: 1Gi, utilisation: 5}
`, `workloads[0].utilisation: unknown field "utilisation" (did you mean "utilization"?`},
		"utilization range": {`apiVersion: gpuslice.dev/v1alpha1
kind: Profiles
fleet: {gpu: A100-80GB}
workloads:
  - {name: a, kind: notebook, memory: 1Gi, utilization: 150}
`, `workloads[0].utilization: 150 is out of range (want 1..100)`},
		"no fleet": {`apiVersion: gpuslice.dev/v1alpha1
kind: Profiles
workloads:
  - {name: a, kind: notebook, memory: 1Gi, utilization: 5}
`, `fleet: no fleet`},
		"bad gpu": {`apiVersion: gpuslice.dev/v1alpha1
kind: Profiles
fleet: {gpu: A100-80G}
workloads:
  - {name: a, kind: notebook, memory: 1Gi, utilization: 5}
`, `fleet.gpu:`},
		"duplicate name": {`apiVersion: gpuslice.dev/v1alpha1
kind: Profiles
fleet: {gpu: T4}
workloads:
  - {name: a, kind: notebook, memory: 1Gi, utilization: 5}
  - {name: a, kind: notebook, memory: 1Gi, utilization: 5}
`, `workloads[1].name: workload "a" is also workloads[0]`},
		"bad duration": {`apiVersion: gpuslice.dev/v1alpha1
kind: Profiles
fleet: {gpu: T4}
workloads:
  - {name: a, kind: notebook, memory: 1Gi, utilization: 5, duration: soon}
`, `workloads[0].duration: "soon" is not a duration`},
		"missing memory": {`apiVersion: gpuslice.dev/v1alpha1
kind: Profiles
fleet: {gpu: T4}
workloads:
  - {name: a, kind: notebook, utilization: 5}
`, `workloads[0].memory: workload "a" says no memory`},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, diags := ReadProfiles("p.yaml", []byte(c.src))
			err := diags.Err()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v\nwant %q", err, c.want)
			}
		})
	}
}

func TestReadTrace(t *testing.T) {
	tr, err := ReadTrace("t.csv", []byte("time,utilization,memory\n0,10,1Gi\n60,50,2048\n# a comment\n2m,30,1.5Gi\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Samples) != 3 || tr.Samples[1].MemoryMiB != 2048 || tr.Samples[2].At != 2*time.Minute || tr.Samples[2].MemoryMiB != 1536 {
		t.Fatalf("%+v", tr.Samples)
	}
	for src, want := range map[string]string{
		"0,10,1Gi\n0,20,1Gi\n":                    "t.csv:2: time 0s is not after",
		"0,10,1Gi\n60,120,1Gi\n":                  "t.csv:2: utilization \"120\"",
		"0,10,1Gi\n60,20\n":                       "t.csv:2: 2 fields",
		"0,10,1Gi\n60,20,lots\n":                  "t.csv:2: memory \"lots\"",
		"0,10,1Gi\n":                              "at least 2 lines",
		"0,10,1Gi\n\"60,20,1Gi\n":                 "t.csv:2:",
		"time,utilization,memory\nx,1,1\n0,1,1\n": "t.csv:2: time \"x\"",
	} {
		if _, err := ReadTrace("t.csv", []byte(src)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want %q", src, err, want)
		}
	}
}

func FuzzReadProfiles(f *testing.F) {
	f.Add([]byte("apiVersion: gpuslice.dev/v1alpha1\nkind: Profiles\nfleet: {gpu: T4}\nworkloads:\n  - {name: a, kind: notebook, memory: 1Gi, utilization: 5, duration: 1w}\nsimulation: {duration: 1d, seed: 3, sampleEvery: 1h}\n"))
	f.Add([]byte("kind: Profiles\nworkloads: 3\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, diags := ReadProfiles("f.yaml", data)
		if p == nil {
			t.Fatal("nil profiles")
		}
		for _, d := range diags {
			if d.Message == "" {
				t.Fatalf("empty diagnostic %+v", d)
			}
		}
	})
}

func FuzzReadTrace(f *testing.F) {
	f.Add([]byte("time,utilization,memory\n0,10,1Gi\n60,50,2048\n"))
	f.Add([]byte("0,1,1\n1m,2,2Mi\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		tr, err := ReadTrace("f.csv", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f.csv") {
				t.Fatalf("error without the file: %v", err)
			}
			return
		}
		for i := 1; i < len(tr.Samples); i++ {
			if tr.Samples[i].At <= tr.Samples[i-1].At {
				t.Fatal("times must increase")
			}
		}
	})
}
