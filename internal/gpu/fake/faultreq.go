package fake

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/gpuslice/gpuslice/internal/gpu"
)

// MaxFaultRequest is the largest fault request ParseFaultRequest reads.
const MaxFaultRequest = 4096

// FaultRequest is a fault asked of a simulated machine from outside its
// process: one JSON object in a file of its fault directory (FaultWatcher).
// One of GPU and Instance names the device; one of XID, Lost and Recover
// says what happens to it:
//
//	{"gpu": 0, "xid": 79}               XID 79 on GPU 0 (InjectXID)
//	{"instance": "MIG-…", "xid": 94}    XID 94 on a MIG instance, or a GPU, by uuid (InjectInstanceXID)
//	{"gpu": 1, "lost": true}            GPU 1 falls off the bus (Remove)
//	{"gpu": 1, "recover": true}         GPU 1 is reset and healthy again (Recover)
type FaultRequest struct {
	GPU      *int   `json:"gpu,omitempty"`
	Instance string `json:"instance,omitempty"`
	XID      *int   `json:"xid,omitempty"`
	Lost     bool   `json:"lost,omitempty"`
	Recover  bool   `json:"recover,omitempty"`
}

// faultFields are FaultRequest's fields, for error messages.
var faultFields = []string{"gpu", "instance", "xid", "lost", "recover"}

// ParseFaultRequest reads one fault request strictly: one JSON object of
// at most MaxFaultRequest bytes, no unknown field, and the combination
// FaultRequest describes. Every problem is reported at once, each naming
// the field and what is valid.
func ParseFaultRequest(data []byte) (FaultRequest, error) {
	var r FaultRequest
	if len(data) > MaxFaultRequest {
		return r, fmt.Errorf("fault request of %d bytes: at most %d", len(data), MaxFaultRequest)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return r, errors.New(`empty fault request: want a JSON object such as {"gpu": 0, "xid": 79}`)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return FaultRequest{}, decodeError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return FaultRequest{}, errors.New("fault request: one JSON object, with nothing after it")
	}
	return r, r.Validate()
}

// decodeError rewrites encoding/json's errors to name the field and what
// it takes.
func decodeError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		want := "a number"
		switch te.Field {
		case "instance":
			want = `a string (a MIG or GPU uuid)`
		case "lost", "recover":
			want = "true or false"
		case "":
			return fmt.Errorf(`fault request is a JSON %s: want an object such as {"gpu": 0, "xid": 79}`, te.Value)
		case "gpu":
			want = "an index (0, 1, …)"
		case "xid":
			want = "a positive XID such as 79"
		}
		return fmt.Errorf("%q: a JSON %s: want %s", te.Field, te.Value, want)
	}
	if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return fmt.Errorf("unknown field %.64s: valid fields are %s", f, strings.Join(faultFields, ", "))
	}
	return fmt.Errorf(`fault request is not valid JSON (%v): want an object such as {"gpu": 0, "xid": 79}`, err)
}

// Validate checks the combination of fields; every problem at once.
func (r FaultRequest) Validate() error {
	var errs []error
	switch {
	case r.GPU == nil && r.Instance == "":
		errs = append(errs, errors.New(`name the device: "gpu" (an index) or "instance" (a MIG or GPU uuid)`))
	case r.GPU != nil && r.Instance != "":
		errs = append(errs, errors.New(`"gpu" and "instance": give one of them`))
	case r.GPU != nil && *r.GPU < 0:
		errs = append(errs, fmt.Errorf(`"gpu": %d: want an index ≥ 0`, *r.GPU))
	case r.Instance != "" && !uuidLike(r.Instance):
		errs = append(errs, fmt.Errorf(`"instance": %.80q: want a MIG or GPU uuid as NVML prints it (MIG-… or GPU-…)`, r.Instance))
	}
	var actions []string
	if r.XID != nil {
		actions = append(actions, `"xid"`)
		if *r.XID <= 0 {
			errs = append(errs, fmt.Errorf(`"xid": %d: want a positive XID (fatal ones: %s)`, *r.XID, fatalXIDs()))
		}
	}
	if r.Lost {
		actions = append(actions, `"lost"`)
	}
	if r.Recover {
		actions = append(actions, `"recover"`)
	}
	switch {
	case len(actions) == 0:
		errs = append(errs, errors.New(`say what happens: "xid" (a number), "lost": true or "recover": true`))
	case len(actions) > 1:
		errs = append(errs, fmt.Errorf("%s: give one of them", strings.Join(actions, " and ")))
	case (r.Lost || r.Recover) && r.Instance != "":
		errs = append(errs, fmt.Errorf(`%s: a whole GPU is lost or recovers: name it by "gpu", not "instance"`, actions[0]))
	}
	return errors.Join(errs...)
}

func uuidLike(s string) bool {
	return len(s) <= 128 && (strings.HasPrefix(s, "MIG-") || strings.HasPrefix(s, "GPU-")) &&
		!strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r > '~' })
}

func fatalXIDs() string {
	var xs []int
	for x, info := range gpu.XIDs {
		if info.Fatal {
			xs = append(xs, x)
		}
	}
	slices.Sort(xs)
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}

// String describes the request as a sentence's object ("XID 79 on GPU 0").
func (r FaultRequest) String() string {
	dev := r.Instance
	if r.GPU != nil {
		dev = "GPU " + strconv.Itoa(*r.GPU)
	}
	switch {
	case r.XID != nil:
		return fmt.Sprintf("XID %d on %s", *r.XID, dev)
	case r.Lost:
		return dev + " lost"
	case r.Recover:
		return dev + " recovered"
	}
	return dev
}

// ApplyFault carries out a valid request and says what happened. A GPU
// index out of range or lost, or an unknown uuid, is an error naming the
// field and what is valid.
func (m *Machine) ApplyFault(r FaultRequest) (string, error) {
	if err := r.Validate(); err != nil {
		return "", err
	}
	if r.GPU != nil {
		m.mu.Lock()
		n := len(m.gpus)
		lost := *r.GPU < n && m.gpus[*r.GPU].lost
		m.mu.Unlock()
		switch {
		case *r.GPU >= n:
			return "", fmt.Errorf(`"gpu": %d: this machine has GPUs 0..%d`, *r.GPU, n-1)
		case lost:
			return "", fmt.Errorf(`"gpu": %d: the GPU is lost, and stays lost until the simulated machine restarts`, *r.GPU)
		}
	}
	var err error
	switch {
	case r.XID != nil && r.GPU != nil:
		err = m.InjectXID(*r.GPU, *r.XID)
	case r.XID != nil:
		err = m.InjectInstanceXID(r.Instance, *r.XID)
		if errors.Is(err, gpu.ErrNotFound) {
			err = fmt.Errorf(`"instance": %q: no such MIG instance or GPU on this machine`, r.Instance)
		}
	case r.Lost:
		err = m.Remove(*r.GPU)
	case r.Recover:
		err = m.Recover(*r.GPU)
	}
	if err != nil {
		return "", err
	}
	what := r.String()
	if r.XID != nil {
		kind := "non-fatal"
		if FatalXID(*r.XID) {
			kind = "fatal: the GPU is unhealthy"
		}
		what += fmt.Sprintf(" (%s, %s)", gpu.XIDName(*r.XID), kind)
	}
	return what, nil
}
