//go:build unix

package mpssim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpuslice/gpuslice/internal/node/mps"
)

// Files of a simulated daemon: SocketFile, LimitsFile and mps.PIDFile in
// the pipe directory (as nvidia-cuda-mps-control keeps its control socket
// and pid file there), LogFile in the log directory.
const (
	SocketFile = "control"
	LimitsFile = "gpuslice-sim-limits"
	LogFile    = "control.log"
)

// daemon is a running simulated control daemon. Its working directory is
// the pipe directory.
type daemon struct {
	pipe string
	now  func() time.Time
	log  io.Writer

	mu       sync.Mutex
	limits   Limits
	ln       net.Listener
	stopped  bool
	shutdown chan struct{}
}

// serve answers clients until a quit (or stop).
func (d *daemon) serve() {
	for {
		conn, err := d.ln.Accept()
		if err != nil {
			return // closed by stop
		}
		go d.handle(conn)
	}
}

// handle answers one client: a command per line, a Reply (JSON) per
// command.
func (d *daemon) handle(conn net.Conn) {
	defer conn.Close()
	d.logf("NEW UI")
	defer d.logf("UI closed")
	sc := bufio.NewScanner(conn)
	sc.Buffer(make([]byte, 0, 256), MaxLine+1)
	enc := json.NewEncoder(conn)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		d.logf("Cmd:%s", line)
		r, quit := d.command(line)
		if r.Err != "" {
			d.logf("Cmd failed: %s", r.Err)
		}
		if quit {
			d.stop() // before the answer: once the client returns, the daemon is gone
		}
		if err := enc.Encode(r); err != nil || quit {
			return
		}
	}
}

// command applies one command line under the lock and keeps LimitsFile
// current.
func (d *daemon) command(line string) (Reply, bool) {
	c, err := ParseCommand(line)
	if err != nil {
		return Reply{Err: err.Error()}, false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	next, r, quit := Apply(d.limits, c)
	if !quit && !sameLimits(next, d.limits) {
		if err := writeLimits(d.pipe, next); err != nil {
			return Reply{Err: fmt.Sprintf("recording the limits: %v", err)}, false
		}
		d.logf("Limits: %s", next)
	}
	d.limits = next
	return r, quit
}

func sameLimits(a, b Limits) bool {
	return a.Device == b.Device && a.PID == b.PID && a.DefaultActiveThreadPercentage == b.DefaultActiveThreadPercentage &&
		maps.Equal(a.DefaultDevicePinnedMemLimitMiB, b.DefaultDevicePinnedMemLimitMiB)
}

// stop closes the socket (which removes it) and removes the pid and
// limits files; serve returns.
func (d *daemon) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return
	}
	d.stopped = true
	_ = d.ln.Close()
	_ = os.Remove(filepath.Join(d.pipe, mps.PIDFile))
	_ = os.Remove(filepath.Join(d.pipe, LimitsFile))
	d.logf("Exit")
	close(d.shutdown)
}

func (d *daemon) logf(format string, args ...any) {
	fmt.Fprintf(d.log, "[%s Control %6d] %s\n", d.now().Format("2006-01-02 15:04:05.000"), os.Getpid(), fmt.Sprintf(format, args...))
}

// writeLimits writes LimitsFile atomically, readable by everyone who can
// reach the pipe directory.
func writeLimits(pipe string, l Limits) error {
	b, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return err
	}
	return writeAtomic(filepath.Join(pipe, LimitsFile), append(b, '\n'))
}

func writeAtomic(path string, data []byte) error {
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

// ReadLimits reads a simulated daemon's LimitsFile.
func ReadLimits(pipe string) (Limits, error) {
	var l Limits
	b, err := os.ReadFile(filepath.Join(pipe, LimitsFile))
	if err != nil {
		return l, err
	}
	if err := json.Unmarshal(b, &l); err != nil {
		return l, fmt.Errorf("%s: %w", filepath.Join(pipe, LimitsFile), err)
	}
	return l, nil
}

// running reads a pipe directory's pid file: the daemon's pid and whether
// it runs.
func running(pipe string) (int, bool) {
	b, err := os.ReadFile(filepath.Join(pipe, mps.PIDFile))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, false
	}
	return pid, alive(pid)
}

// alive reports whether pid runs; a zombie counts as gone (as
// mps.Manager's check).
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true // no procfs: trust kill(0)
	}
	if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && b[i+2] == 'Z' {
		return false
	}
	return true
}
