package apitest_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuslice/gpuslice/internal/k8s/apitest"
	"github.com/gpuslice/gpuslice/internal/testkit"
)

// StartScheduler runs the stock kube-scheduler: a pod is bound to the one
// node with room for its extended resource, and a named profile from
// SchedulerOptions.Profiles schedules pods that name it. It runs on the
// package's shared control plane, whose other tests start no scheduler
// (one with a default-scheduler profile would race this one for the pods)
// and create no Nodes.
func TestStartSchedulerBindsPods(t *testing.T) {
	t.Parallel()
	srv := apitest.Shared(t)
	apitest.StartScheduler(t, srv, apitest.SchedulerOptions{Profiles: `
- schedulerName: default-scheduler
- schedulerName: binpack
  pluginConfig:
  - name: NodeResourcesFit
    args: {scoringStrategy: {type: MostAllocated, resources: [{name: cpu, weight: 1}]}}
`})
	cs, err := kubernetes.NewForConfig(srv.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	// The shared control plane may run the test again (-count=2).
	t.Cleanup(func() {
		ctx := context.Background()
		for _, sched := range []string{"default-scheduler", "binpack"} {
			_ = cs.CoreV1().Pods("default").Delete(ctx, "p-"+sched, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		}
		for _, n := range []string{"small", "big"} {
			_ = cs.CoreV1().Nodes().Delete(ctx, n, metav1.DeleteOptions{})
		}
	})
	for name, gpus := range map[string]string{"small": "1", "big": "8"} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
			Status: corev1.NodeStatus{
				Capacity:    corev1.ResourceList{"cpu": resource.MustParse("8"), "memory": resource.MustParse("32Gi"), "pods": resource.MustParse("110"), "example.com/gpu": resource.MustParse(gpus)},
				Allocatable: corev1.ResourceList{"cpu": resource.MustParse("8"), "memory": resource.MustParse("32Gi"), "pods": resource.MustParse("110"), "example.com/gpu": resource.MustParse(gpus)},
			}}
		if _, err := srv.CreateReadyNode(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	if err := srv.EnsureNamespace(ctx, "default"); err != nil {
		t.Fatal(err)
	}
	for _, sched := range []string{"default-scheduler", "binpack"} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p-" + sched, Namespace: "default"},
			Spec: corev1.PodSpec{SchedulerName: sched, Containers: []corev1.Container{{Name: "c", Image: "x",
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"example.com/gpu": resource.MustParse("3")}}}}}}
		if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, sched := range []string{"default-scheduler", "binpack"} {
		var node string
		testkit.EventuallyCtx(t, ctx, "pod p-"+sched+" to be bound", func() (bool, string) {
			p, err := cs.CoreV1().Pods("default").Get(ctx, "p-"+sched, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			node = p.Spec.NodeName
			return node != "", "pod p-" + sched + " was never bound"
		})
		// Only "big" has 3 of example.com/gpu, so only it fits.
		if node != "big" {
			t.Errorf("pod p-%s bound to %s, want big", sched, node)
		}
	}
}
