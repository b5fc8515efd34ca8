package plugin

import (
	"testing"

	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpuslice/gpuslice/internal/admit"
	"github.com/gpuslice/gpuslice/internal/k8s/schedcore"
)

// schedcore scores on kube-scheduler's scale.
func TestScoreScale(t *testing.T) {
	if schedcore.MaxNodeScore != fwk.MaxNodeScore {
		t.Fatalf("schedcore.MaxNodeScore %d, framework's %d", schedcore.MaxNodeScore, fwk.MaxNodeScore)
	}
}

// Outcomes map to framework statuses: admitted is success, a pod no node
// could ever hold is unresolvable, anything that may change (a node
// full, a quota, a hold) is unschedulable with the outcome's reason.
func TestStatus(t *testing.T) {
	for _, tc := range []struct {
		out  admit.Outcome
		code fwk.Code
		msg  string
	}{
		{nil, fwk.Success, ""},
		{admit.Admit{}, fwk.Success, ""},
		{admit.Unfit{Why: "insufficient GPU memory"}, fwk.Unschedulable, "p: insufficient GPU memory"},
		{&admit.OverQuota{Scope: admit.NamespaceScope, Name: "team-a", Resource: admit.Compute, Used: 100, Limit: 150, Asked: 51}, fwk.Unschedulable,
			"p: namespace team-a GPU compute quota 150%: 100% in use, the pod's claims need 51%"},
		{&admit.Held{Scope: admit.NamespaceScope, Node: "n", Holder: "team-a/big"}, fwk.Unschedulable, "p: node n is held for GPU pod team-a/big, pending for 0s (reserveAfter)"},
		{&admit.NeverFits{Why: "too big"}, fwk.UnschedulableAndUnresolvable, "p: this claim can never fit"},
	} {
		st := status(tc.out, "p: ")
		if st.Code() != tc.code {
			t.Errorf("%#v: code %v, want %v", tc.out, st.Code(), tc.code)
		}
		if tc.msg != "" && (len(st.Reasons()) != 1 || len(st.Reasons()[0]) < len(tc.msg) || st.Reasons()[0][:len(tc.msg)] != tc.msg) {
			t.Errorf("%#v: reasons %q, want %q…", tc.out, st.Reasons(), tc.msg)
		}
	}
}
