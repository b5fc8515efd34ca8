// Package datadir guards a data directory of `gpuslice serve`: one process
// at a time.
//
// Acquire takes an exclusive flock(2) on <dir>/lock and writes the holder's
// pid into it; the lock is held until Release or the process ends. The
// kernel drops the lock with the process, however it ends (kill -9
// included), so a lock file left behind by a dead process does not block a
// restart: the next Acquire takes the lock again and rewrites the pid. The
// file itself is never removed (removing it would let two processes lock
// two different files of the same name); its content only names the holder
// for the error a second process gets (InUseError).
//
// flock is advisory and local: it keeps out another gpuslice, not other
// programs, and it does not guard a directory on a network file system that
// does not carry flock across machines.
package datadir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// LockFile is the name of the lock file inside the data directory.
const LockFile = "lock"

// ErrInUse is wrapped by the error Acquire returns when another process
// holds the directory.
var ErrInUse = errors.New("data directory is in use")

// InUseError says which process holds the directory. PID is 0 when the
// holder had not written its pid yet.
type InUseError struct {
	Dir string
	PID int
}

func (e *InUseError) Error() string {
	holder := "pid unknown"
	if e.PID > 0 {
		holder = "pid " + strconv.Itoa(e.PID)
	}
	return fmt.Sprintf("data directory %s is in use by another gpuslice serve (%s); stop it or pass another --data-dir", e.Dir, holder)
}

// Unwrap makes errors.Is(err, ErrInUse) true.
func (e *InUseError) Unwrap() error { return ErrInUse }

// Lock is a held data directory lock.
type Lock struct {
	dir string
	f   *os.File
}

// Acquire takes the lock of dir (which must exist) without waiting: if
// another process holds it, it returns an *InUseError naming that
// process's pid.
func Acquire(dir string) (*Lock, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("data directory %s: %w", dir, err)
	}
	path := filepath.Join(abs, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("data directory lock: %w", err)
	}
	if err := flock(f, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, &InUseError{Dir: abs, PID: readPID(f)}
		}
		return nil, fmt.Errorf("data directory lock %s: %w", path, err)
	}
	l := &Lock{dir: abs, f: f}
	if err := l.writePID(os.Getpid()); err != nil {
		l.Release()
		return nil, fmt.Errorf("data directory lock %s: %w", path, err)
	}
	return l, nil
}

// Dir is the locked directory (absolute).
func (l *Lock) Dir() string { return l.dir }

// Release empties the lock file and drops the lock. It is safe to call more
// than once.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	// Emptied while still held: nobody else can have written it.
	terr := l.f.Truncate(0)
	uerr := flock(l.f, unix.LOCK_UN)
	cerr := l.f.Close()
	l.f = nil
	return errors.Join(terr, uerr, cerr)
}

func (l *Lock) writePID(pid int) error {
	if err := l.f.Truncate(0); err != nil {
		return err
	}
	if _, err := l.f.WriteAt([]byte(strconv.Itoa(pid)+"\n"), 0); err != nil {
		return err
	}
	return l.f.Sync()
}

// flock retries on EINTR (a signal arriving during the call).
func flock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how)
		if err != unix.EINTR {
			return err
		}
	}
}

// readPID reads the holder's pid from the lock file; 0 if there is none
// (yet) or it does not parse.
func readPID(f *os.File) int {
	buf := make([]byte, 32)
	n, _ := f.ReadAt(buf, 0)
	pid, err := strconv.Atoi(strings.TrimSpace(string(buf[:n])))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}
