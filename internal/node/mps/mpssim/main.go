//go:build unix

package mpssim

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpuslice/gpuslice/internal/node/mps"
)

// Default directories, as nvidia-cuda-mps-control's when
// CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_LOG_DIRECTORY are not set.
const (
	DefaultPipeDir = "/tmp/nvidia-mps"
	DefaultLogDir  = "/var/log/nvidia-mps"
)

// StartWait bounds how long `-d` waits for the daemon to be ready.
const StartWait = 5 * time.Second

// clientTimeout bounds one control client's session.
const clientTimeout = 30 * time.Second

const usage = `Usage: nvidia-cuda-mps-control [-d | -f]    (gpuslice's simulator)

  -d   start the control daemon in the background; returns once it listens
  -f   run the control daemon in the foreground
       (no argument: a control client, reading commands from standard input)

Environment: CUDA_MPS_PIPE_DIRECTORY (default ` + DefaultPipeDir + `),
CUDA_MPS_LOG_DIRECTORY (default ` + DefaultLogDir + `), CUDA_VISIBLE_DEVICES.
No MPS server ever starts: the simulated daemon records the defaults it is
given in $CUDA_MPS_PIPE_DIRECTORY/` + LimitsFile + ` (JSON) and answers
get_server_list with none.
`

// Main runs the simulator as the process: args are its arguments without
// the program name. It is a process entry point: the daemon and the
// client change the working directory to the pipe directory (so that the
// socket's path is short whatever the directory's).
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	pipe := cmp.Or(os.Getenv("CUDA_MPS_PIPE_DIRECTORY"), DefaultPipeDir)
	logDir := cmp.Or(os.Getenv("CUDA_MPS_LOG_DIRECTORY"), DefaultLogDir)
	switch {
	case len(args) == 0:
		return client(pipe, stdin, stdout, stderr)
	case len(args) == 1 && args[0] == "-d":
		return daemonize(pipe, logDir, stderr)
	case len(args) == 1 && args[0] == "-f":
		return foreground(pipe, logDir, stderr)
	case len(args) == 1 && (args[0] == "-h" || args[0] == "--help"):
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "unknown arguments %q\n%s", args, usage)
	return 2
}

// daemonize starts `-f` in a session of its own, as the program named
// mps.ControlBinary (so that a multicall binary runs Main), and returns
// once it has written its pid file.
func daemonize(pipe, logDir string, stderr io.Writer) int {
	if code := prepareDirs(pipe, logDir, stderr); code != 0 {
		return code
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	logPath := filepath.Join(logDir, LogFile)
	logf, err := os.OpenFile(logPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	cmd := &exec.Cmd{Path: self, Args: []string{mps.ControlBinary, "-f"}, Env: os.Environ(),
		Stdout: logf, Stderr: logf, SysProcAttr: &syscall.SysProcAttr{Setsid: true}}
	err = cmd.Start()
	logf.Close()
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.After(StartWait)
	for {
		if pid, ok := running(pipe); ok && pid == cmd.Process.Pid {
			return 0
		}
		select {
		case err := <-exited:
			fmt.Fprintf(stderr, "the control daemon exited before it was ready (%v)%s\n", err, logTail(logPath))
			return 1
		case <-deadline:
			_ = cmd.Process.Kill()
			fmt.Fprintf(stderr, "the control daemon was not ready after %s%s\n", StartWait, logTail(logPath))
			return 1
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// prepareDirs makes the directories and refuses a second daemon.
func prepareDirs(pipe, logDir string, stderr io.Writer) int {
	for _, dir := range []string{pipe, logDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
	}
	if pid, ok := running(pipe); ok && pid != os.Getpid() {
		fmt.Fprintln(stderr, "An instance of this daemon is already running")
		return 1
	}
	return 0
}

// foreground runs the daemon until quit, SIGTERM or SIGINT.
func foreground(pipe, logDir string, stderr io.Writer) int {
	if code := prepareDirs(pipe, logDir, stderr); code != 0 {
		return code
	}
	logf, err := os.OpenFile(filepath.Join(logDir, LogFile), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	defer logf.Close()
	if err := os.Chdir(pipe); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	_ = os.Remove(SocketFile) // a dead daemon's
	ln, err := net.Listen("unix", SocketFile)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	d := &daemon{pipe: ".", now: time.Now, log: logf, ln: ln, shutdown: make(chan struct{}),
		limits: Limits{Device: os.Getenv("CUDA_VISIBLE_DEVICES"), PID: os.Getpid()}}
	if err := writeLimits(d.pipe, d.limits); err == nil {
		err = writeAtomic(mps.PIDFile, []byte(strconv.Itoa(os.Getpid())+"\n"))
	}
	if err != nil {
		_ = ln.Close()
		fmt.Fprintln(stderr, err)
		return 1
	}
	d.logf("Starting control daemon using socket %s", filepath.Join(pipe, SocketFile))
	d.logf("To connect CUDA applications to this daemon, set env CUDA_MPS_PIPE_DIRECTORY=%s", pipe)
	d.logf("gpuslice simulator: CUDA_VISIBLE_DEVICES=%s; no MPS server will start; limits in %s", d.limits.Device, filepath.Join(pipe, LimitsFile))
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		select {
		case s := <-sig:
			d.logf("Signal %v", s)
			d.stop()
		case <-d.shutdown:
		}
	}()
	d.serve()
	<-d.shutdown
	return 0
}

// client sends each line of stdin to the daemon and prints its answers,
// as `nvidia-cuda-mps-control` without arguments does. It fails when no
// daemon runs or a command is refused.
func client(pipe string, stdin io.Reader, stdout, stderr io.Writer) int {
	const noDaemon = "Cannot find MPS control daemon process"
	if _, ok := running(pipe); !ok {
		fmt.Fprintln(stderr, noDaemon)
		return 1
	}
	if err := os.Chdir(pipe); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	conn, err := net.DialTimeout("unix", SocketFile, 5*time.Second)
	if err != nil {
		fmt.Fprintf(stderr, "%s (%v)\n", noDaemon, err)
		return 1
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(clientTimeout))
	in := bufio.NewScanner(stdin)
	replies := bufio.NewReader(conn)
	rc := 0
	for in.Scan() {
		line := strings.TrimSpace(in.Text())
		if line == "" {
			continue
		}
		if _, err := fmt.Fprintln(conn, line); err != nil {
			fmt.Fprintf(stderr, "%q: lost the control daemon: %v\n", line, err)
			return 1
		}
		b, err := replies.ReadBytes('\n')
		var r Reply
		if err == nil {
			err = json.Unmarshal(b, &r)
		}
		if err != nil {
			fmt.Fprintf(stderr, "%q: lost the control daemon: %v\n", line, err)
			return 1
		}
		if r.Out != "" {
			fmt.Fprintln(stdout, r.Out)
		}
		if r.Err != "" {
			fmt.Fprintln(stderr, r.Err)
			rc = 1
		}
	}
	return rc
}

// logTail is the end of the daemon's log, for an error.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return ""
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 1024 {
		s = "…" + s[len(s)-1024:]
	}
	return "; " + path + ":\n" + s
}

// Install makes dir/nvidia-cuda-mps-control (mps.ControlBinary) a
// symbolic link to this executable and returns its path: a multicall
// binary that runs Main when called by that name (see IsControlBinary) is
// then a control binary mps.Manager can run.
func Install(dir string) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	if s, err := filepath.EvalSymlinks(self); err == nil {
		self = s
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	link := filepath.Join(dir, mps.ControlBinary)
	if cur, err := os.Readlink(link); err == nil && cur == self {
		return link, nil
	}
	tmp := filepath.Join(dir, "."+mps.ControlBinary+".tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(self, tmp); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, link); err != nil {
		_ = os.Remove(tmp)
		return "", err
	}
	return link, nil
}
