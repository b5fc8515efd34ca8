package fake

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Fault directory file names: a request is NAME.json; its outcome, once
// applied, is NAME.done (what happened) or NAME.error (why not), and the
// request is removed. Names starting with "." are ignored, so a writer
// writes .NAME.tmp and renames it.
const (
	FaultRequestExt = ".json"
	FaultDoneExt    = ".done"
	FaultErrorExt   = ".error"
)

// FaultSettle is how long a request that does not parse may be left
// alone as possibly still being written (`echo … > NAME.json` creates the
// file before it writes it).
const FaultSettle = 2 * time.Second

// FaultWatcher applies the fault requests (FaultRequest) written to a
// directory to a simulated machine: faults injected from outside the
// process — a tester's script, `gpuslice dra simulate-fault` — as
// InjectXID and friends are from inside. Each request is applied once, in
// name order, and answered by an outcome file. Only simulated machines
// have one; the directory should be writable by root alone (whoever writes
// there can break the simulated GPUs).
type FaultWatcher struct {
	Dir     string
	Machine *Machine
	// Tick paces Run's scans (a time.Ticker's C; nil: only the first).
	Tick <-chan time.Time
	// Clock tells how old an unparsable request is (default time.Now).
	Clock func() time.Time
	Log   *slog.Logger
	// AwaitSubscriber holds requests until the machine has an Events
	// subscriber (the driver's or agent's health watch), so that one
	// waiting when the process starts is not raised before anyone listens.
	AwaitSubscriber bool

	stuck map[string]bool // requests answered but not removable
}

// FaultOutcome is what Scan did with one request.
type FaultOutcome struct {
	Name string // the request's file name
	Done string // what happened, when applied
	Err  error  // why not, otherwise
}

// Run makes the directory (0700), scans it at once and on every tick
// until ctx ends (with AwaitSubscriber, only once the machine has a
// subscriber).
func (w *FaultWatcher) Run(ctx context.Context) error {
	if err := os.MkdirAll(w.Dir, 0o700); err != nil {
		return fmt.Errorf("fault directory: %w", err)
	}
	for {
		if !w.AwaitSubscriber || w.Machine.Subscribers() > 0 {
			w.Scan()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-w.Tick:
		}
	}
}

// Scan applies every request in the directory, in name order, and
// returns what it did. A request that cannot be read or applied gets a
// .error file; a missing directory is nothing to do.
func (w *FaultWatcher) Scan() []FaultOutcome {
	log := cmp.Or(w.Log, slog.New(slog.DiscardHandler))
	entries, err := os.ReadDir(w.Dir)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			log.Warn("reading the fault directory", "dir", w.Dir, "err", err)
		}
		return nil
	}
	var out []FaultOutcome
	for _, e := range entries { // sorted by name
		name := e.Name()
		if !IsFaultRequestName(name) || w.stuck[name] {
			continue
		}
		o, ready := w.one(name)
		if !ready {
			continue
		}
		out = append(out, o)
		if o.Err != nil {
			log.Warn("simulated fault refused", "request", filepath.Join(w.Dir, name), "err", o.Err)
		} else {
			log.Info("simulated fault", "request", filepath.Join(w.Dir, name), "fault", o.Done)
		}
		if err := w.answer(o); err != nil {
			log.Warn("answering a fault request", "request", filepath.Join(w.Dir, name), "err", err)
			if w.stuck == nil {
				w.stuck = map[string]bool{}
			}
			w.stuck[name] = true
		}
	}
	return out
}

// IsFaultRequestName reports whether a file name in a fault directory is
// a request (NAME.json, NAME not empty nor starting with ".").
func IsFaultRequestName(name string) bool {
	base, ok := strings.CutSuffix(name, FaultRequestExt)
	return ok && base != "" && !strings.HasPrefix(name, ".")
}

// one reads and applies one request; ready is false for one that may
// still be being written.
func (w *FaultWatcher) one(name string) (o FaultOutcome, ready bool) {
	o.Name = name
	path := filepath.Join(w.Dir, name)
	fi, err := os.Lstat(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return o, false // withdrawn
		}
		o.Err = err
		return o, true
	}
	if !fi.Mode().IsRegular() {
		kind := "special file"
		switch {
		case fi.IsDir():
			kind = "directory"
		case fi.Mode()&os.ModeSymlink != 0:
			kind = "symbolic link"
		}
		o.Err = fmt.Errorf("%s is a %s: a fault request is a regular file", name, kind)
		return o, true
	}
	data, err := readLimited(path, MaxFaultRequest)
	if err != nil {
		o.Err = err
		return o, true
	}
	r, err := ParseFaultRequest(data)
	if err != nil {
		now := time.Now
		if w.Clock != nil {
			now = w.Clock
		}
		if now().Sub(fi.ModTime()) < FaultSettle {
			return o, false // perhaps half written: look again later
		}
		o.Err = err
		return o, true
	}
	o.Done, o.Err = w.Machine.ApplyFault(r)
	return o, true
}

// readLimited reads at most limit+1 bytes, so a request over the limit is
// refused by its size without reading it all.
func readLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, limit+1))
}

// answer writes a request's outcome file (atomically) and removes it.
func (w *FaultWatcher) answer(o FaultOutcome) error {
	base := strings.TrimSuffix(o.Name, FaultRequestExt)
	ext, text := FaultDoneExt, o.Done
	if o.Err != nil {
		ext, text = FaultErrorExt, o.Err.Error()
	}
	tmp := filepath.Join(w.Dir, "."+base+ext+".tmp")
	if err := os.WriteFile(tmp, []byte(text+"\n"), 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(w.Dir, base+ext)); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if err := os.Remove(filepath.Join(w.Dir, o.Name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// FaultOutcomeFiles are the outcome files a request named name can get.
func FaultOutcomeFiles(name string) (done, failed string) {
	base := strings.TrimSuffix(name, FaultRequestExt)
	return base + FaultDoneExt, base + FaultErrorExt
}

// WriteFaultRequest writes r to dir as a new request, atomically (a
// hidden temporary file, then a rename), and returns its name: the time
// and the writer's pid, so that requests sort in the order they were made
// and two writers never collide.
func WriteFaultRequest(dir string, r FaultRequest, now time.Time) (string, error) {
	if err := r.Validate(); err != nil {
		return "", err
	}
	data, err := json.Marshal(r)
	if err != nil {
		return "", err
	}
	name := fmt.Sprintf("%s-%d%s", now.UTC().Format("20060102T150405.000000000Z"), os.Getpid(), FaultRequestExt)
	tmp := filepath.Join(dir, "."+name+".tmp")
	if err := os.WriteFile(tmp, append(data, '\n'), 0o600); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		_ = os.Remove(tmp)
		return "", err
	}
	return name, nil
}

// ReadFaultOutcome reads the outcome of the request named name in dir:
// ok is false while there is none. The refusal of a request is o.Err.
func ReadFaultOutcome(dir, name string) (o FaultOutcome, ok bool, err error) {
	o.Name = name
	done, failed := FaultOutcomeFiles(name)
	b, err := os.ReadFile(filepath.Join(dir, failed))
	if err == nil {
		o.Err = errors.New(strings.TrimSpace(string(b)))
		return o, true, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return o, false, err
	}
	b, err = os.ReadFile(filepath.Join(dir, done))
	if err == nil {
		o.Done = strings.TrimSpace(string(b))
		return o, true, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return o, false, err
	}
	return o, false, nil
}
