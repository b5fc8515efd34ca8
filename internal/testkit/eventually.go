package testkit

import (
	"context"
	"testing"
	"time"
)

// Eventually polls cond until it reports true, failing the test after
// timeout with what cond last said. It polls quickly at first (5 ms) and
// backs off to 200 ms, so a condition that holds at once costs nothing
// and a slow one does not burn a shared CPU.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := Wait(ctx, cond); err != nil {
		t.Fatalf("after %s, still waiting for %s: %v", timeout, what, err)
	}
}

// EventuallyCtx is Eventually bounded by ctx instead of a duration.
func EventuallyCtx(t testing.TB, ctx context.Context, what string, cond func() (bool, string)) {
	t.Helper()
	if err := Wait(ctx, cond); err != nil {
		t.Fatalf("still waiting for %s: %v", what, err)
	}
}

// Wait polls cond until it reports true or ctx ends; the error then holds
// what cond last said. For harnesses that return errors instead of failing.
func Wait(ctx context.Context, cond func() (bool, string)) error {
	delay := 5 * time.Millisecond
	for {
		ok, last := cond()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			if last == "" {
				last = "condition never held"
			}
			return &waitError{last: last, err: ctx.Err()}
		case <-time.After(delay):
		}
		if delay < 200*time.Millisecond {
			delay *= 2
		}
	}
}

type waitError struct {
	last string
	err  error
}

func (e *waitError) Error() string { return e.last + " (" + e.err.Error() + ")" }
func (e *waitError) Unwrap() error { return e.err }

// Bool adapts a condition without a description.
func Bool(f func() bool) func() (bool, string) {
	return func() (bool, string) { return f(), "" }
}
