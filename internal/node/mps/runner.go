package mps

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Runner runs the control binary. Start runs it with args (["-d"]) and
// returns once the daemon has forked; Send pipes one command to a new
// control client's stdin and returns what it printed. env holds the
// daemon's variables (KEY=value) on top of the agent's own environment.
type Runner interface {
	Start(ctx context.Context, bin string, args []string, env []string) error
	Send(ctx context.Context, bin string, env []string, command string) (string, error)
}

// ExecRunner runs the control binary as a child process.
type ExecRunner struct{}

// waitDelay bounds how long a finished command's output pipes may stay
// open (a forked daemon that kept them would otherwise block Wait).
const waitDelay = 2 * time.Second

// Start runs `bin args...` and waits for it to exit, which
// nvidia-cuda-mps-control -d does once the daemon is in the background.
func (ExecRunner) Start(ctx context.Context, bin string, args []string, env []string) error {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...) // later entries win
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = waitDelay
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w%s", bin, strings.Join(args, " "), err, tail(out.String()))
	}
	return nil
}

// Send pipes command (one line) to `bin` and returns its standard output.
func (ExecRunner) Send(ctx context.Context, bin string, env []string, command string) (string, error) {
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(command + "\n")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.WaitDelay = waitDelay
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%q to %s: %w%s", command, bin, err, tail(errOut.String()+out.String()))
	}
	return out.String(), nil
}

// tail formats the end of a command's output for an error.
func tail(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return ""
	}
	if len(s) > 512 {
		s = "…" + s[len(s)-512:]
	}
	return ": " + s
}
