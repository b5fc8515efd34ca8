package state

import (
	"errors"
	"testing"

	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/model"
)

// Services behave the same in every backend: put replaces, list is by
// name, a failed Update keeps nothing, delete of a missing one is
// ErrNotFound.
func TestServicesContract(t *testing.T) {
	t.Parallel()
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			s := b.open(t)
			svc := api.Service{Name: "web", Tenant: "acme", Spec: api.ServiceSpec{Command: []string{"srv"},
				Autoscaling: model.Autoscaling{MinReplicas: 1, MaxReplicas: 3, TargetPort: 5000, EnableAutoStop: true}}}
			update(t, s, func(tx Tx) error {
				if err := tx.PutService(api.Service{Name: "batch", Tenant: "acme"}); err != nil {
					return err
				}
				return tx.PutService(svc)
			})
			svc.Status.Replicas, svc.Status.Claims = 2, []string{"c-1", "c-2"}
			update(t, s, func(tx Tx) error { return tx.PutService(svc) })
			failed := errors.New("no")
			if err := s.Update(t.Context(), func(tx Tx) error {
				_ = tx.PutService(api.Service{Name: "ghost"})
				_ = tx.DeleteService("web")
				return failed
			}); !errors.Is(err, failed) {
				t.Fatal(err)
			}
			view(t, s, func(tx Tx) error {
				got, err := tx.GetService("web")
				if err != nil {
					return err
				}
				same(t, "web", got, svc)
				all, err := tx.ListServices()
				if err != nil {
					return err
				}
				if len(all) != 2 || all[0].Name != "batch" || all[1].Name != "web" {
					t.Fatalf("list %+v", all)
				}
				_, err = tx.GetService("ghost")
				wantErr(t, err, ErrNotFound, `service "ghost": not found`)
				return nil
			})
			update(t, s, func(tx Tx) error { return tx.DeleteService("web") })
			err := s.Update(t.Context(), func(tx Tx) error { return tx.DeleteService("web") })
			wantErr(t, err, ErrNotFound, `service "web": not found`)
		})
	}
}
