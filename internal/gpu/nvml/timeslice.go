package nvml

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"

	"github.com/gpuslice/gpuslice/internal/gpu"
)

// NvidiaSMI is the command SetTimeSlice runs: NVML has no call that sets
// a GPU's time-slice length, nvidia-smi does (as NVIDIA's DRA driver
// does it).
const NvidiaSMI = "nvidia-smi"

// Runner runs a command and returns its combined output. SetTimeSlice
// runs nvidia-smi through one; tests inject a fake.
type Runner func(ctx context.Context, name string, args ...string) ([]byte, error)

// ExecRunner runs the command with os/exec.
func ExecRunner(ctx context.Context, name string, args ...string) ([]byte, error) {
	return exec.CommandContext(ctx, name, args...).CombinedOutput()
}

// WithCommandRunner makes SetTimeSlice run nvidia-smi through run
// (default ExecRunner; nil keeps it).
func WithCommandRunner(run Runner) Option {
	return func(c *config) {
		if run != nil {
			c.run = run
		}
	}
}

// WithNvidiaSMI names the nvidia-smi binary (default NvidiaSMI, looked up
// in $PATH; "" keeps it).
func WithNvidiaSMI(path string) Option {
	return func(c *config) {
		if path != "" {
			c.smi = path
		}
	}
}

// timeSliceArgs is nvidia-smi's argv (after the binary) that sets the GPU
// uuid's time-slice level: compute-policy -i <uuid> --set-timeslice=<0..3>.
func timeSliceArgs(uuid string, level gpu.TimeSlice) ([]string, error) {
	if !level.Valid() {
		return nil, fmt.Errorf("time-slice level %d: valid are 0 (Default), 1 (Short), 2 (Medium), 3 (Long)", int(level))
	}
	return []string{"compute-policy", "-i", uuid, "--set-timeslice=" + strconv.Itoa(int(level))}, nil
}

// runTimeSlice runs nvidia-smi; its output goes into the error.
func runTimeSlice(ctx context.Context, run Runner, smi, label, uuid string, level gpu.TimeSlice) error {
	args, err := timeSliceArgs(uuid, level)
	if err != nil {
		return fmt.Errorf("nvml: %s: %w", label, err)
	}
	out, err := run(ctx, smi, args...)
	if err != nil {
		msg := strings.TrimSpace(string(bytes.ToValidUTF8(out, []byte("?"))))
		if len(msg) > 512 {
			msg = msg[:512] + "…"
		}
		if msg != "" {
			return fmt.Errorf("nvml: %s: %s %s: %w: %s", label, smi, strings.Join(args, " "), err, msg)
		}
		return fmt.Errorf("nvml: %s: %s %s: %w", label, smi, strings.Join(args, " "), err)
	}
	return nil
}
