package state

import (
	"encoding/json"

	"github.com/gpuslice/gpuslice/internal/api"
)

// Services are stored as JSON under their name, in both backends.

func (tx *sqlTx) PutService(s api.Service) error {
	if err := tx.write(); err != nil {
		return err
	}
	if err := checkKey("service", s.Name); err != nil {
		return err
	}
	data, err := json.Marshal(s)
	if err != nil {
		return err
	}
	_, err = tx.r.exec(`INSERT INTO services (name, data) VALUES (?, ?)
		ON CONFLICT (name) DO UPDATE SET data = excluded.data`, s.Name, data)
	return wrap(err)
}

func (tx *sqlTx) GetService(name string) (api.Service, error) {
	if err := tx.read(); err != nil {
		return api.Service{}, err
	}
	var data []byte
	found, err := tx.queryRow([]any{&data}, `SELECT data FROM services WHERE name = ?`, name)
	if err != nil {
		return api.Service{}, err
	}
	if !found {
		return api.Service{}, notFound("service", name)
	}
	return decode[api.Service]("service", data)
}

func (tx *sqlTx) ListServices() ([]api.Service, error) {
	if err := tx.read(); err != nil {
		return nil, err
	}
	return queryList(tx, false, decoder[api.Service]("service"), `SELECT data FROM services ORDER BY name`)
}

func (tx *sqlTx) DeleteService(name string) error {
	if err := tx.write(); err != nil {
		return err
	}
	res, err := tx.r.exec(`DELETE FROM services WHERE name = ?`, name)
	if err != nil {
		return wrap(err)
	}
	return affected(res, "service", name)
}

func (tx *memTx) PutService(s api.Service) error {
	if err := tx.write(); err != nil {
		return err
	}
	if err := checkKey("service", s.Name); err != nil {
		return err
	}
	data, err := json.Marshal(s)
	if err != nil {
		return err
	}
	setUndo(tx, tx.m.services, s.Name)
	tx.m.services[s.Name] = data
	return nil
}

func (tx *memTx) GetService(name string) (api.Service, error) {
	if err := tx.read(); err != nil {
		return api.Service{}, err
	}
	data, ok := tx.m.services[name]
	if !ok {
		return api.Service{}, notFound("service", name)
	}
	return decode[api.Service]("service", data)
}

func (tx *memTx) ListServices() ([]api.Service, error) {
	if err := tx.read(); err != nil {
		return nil, err
	}
	return listSorted[api.Service]("service", tx.m.services)
}

func (tx *memTx) DeleteService(name string) error {
	if err := tx.write(); err != nil {
		return err
	}
	if _, ok := tx.m.services[name]; !ok {
		return notFound("service", name)
	}
	setUndo(tx, tx.m.services, name)
	delete(tx.m.services, name)
	return nil
}
