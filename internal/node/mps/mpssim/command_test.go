package mpssim_test

import (
	"maps"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/node/mps/mpssim"
)

// The commands gpuslice sends are read; anything else is refused with the
// usage or the list of known commands.
func TestParseCommand(t *testing.T) {
	for _, tc := range []struct{ line, want string }{
		{"quit", ""},
		{"quit -t 10", ""},
		{"get_server_list", ""},
		{"  set_default_active_thread_percentage 50 ", ""},
		{"set_default_active_thread_percentage 12.5", ""},
		{"set_default_device_pinned_mem_limit 0 10240M", ""},
		{"set_default_device_pinned_mem_limit 0 2g", ""},
		{"get_default_device_pinned_mem_limit 0", ""},
		{"", "empty command"},
		{"start_server -uid 0", `unknown command "start_server": the simulator knows get_default_active_thread_percentage, get_default_device_pinned_mem_limit, get_device_client_list, get_server_list, ps, quit, set_default_active_thread_percentage, set_default_device_pinned_mem_limit`},
		{"quit now", "quit now: want no argument or -t SECONDS (usage: quit [-t SECONDS])"},
		{"quit -t -1", "the timeout is a whole number of seconds ≥ 0"},
		{"set_default_active_thread_percentage 0", `percentage "0": want a number in (0, 100]`},
		{"set_default_active_thread_percentage 101", `want a number in (0, 100]`},
		{"set_default_active_thread_percentage NaN", `want a number in (0, 100]`},
		{"set_default_active_thread_percentage", "want one percentage (usage: set_default_active_thread_percentage PERCENT)"},
		{"set_default_device_pinned_mem_limit 0 10240", `limit "10240": want a whole number followed by M or G, e.g. 10240M or 10G`},
		{"set_default_device_pinned_mem_limit 0 -1M", `want a whole number followed by M or G`},
		{"set_default_device_pinned_mem_limit x 1G", `device "x": want a device ordinal`},
		{"set_default_device_pinned_mem_limit 1G", "want a device ordinal and a limit"},
		{"get_server_list 1", "takes no argument"},
		{strings.Repeat("x", mpssim.MaxLine+1), "at most 1024"},
	} {
		_, err := mpssim.ParseCommand(tc.line)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v", tc.line, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%.60q: error %v, want one containing %q", tc.line, err, tc.want)
		}
	}
}

// Apply keeps the defaults it is given and answers as the daemon does.
func TestApply(t *testing.T) {
	l := mpssim.Limits{Device: "GPU-x", PID: 7}
	step := func(line string) (mpssim.Reply, bool) {
		t.Helper()
		c, err := mpssim.ParseCommand(line)
		if err != nil {
			t.Fatal(err)
		}
		var r mpssim.Reply
		var quit bool
		l, r, quit = mpssim.Apply(l, c)
		return r, quit
	}
	for _, tc := range []struct {
		line, out string
		quit      bool
	}{
		{"get_default_active_thread_percentage", "100.0", false},
		{"set_default_active_thread_percentage 50", "50.0", false},
		{"get_default_active_thread_percentage", "50.0", false},
		{"get_default_device_pinned_mem_limit 0", "0", false},
		{"set_default_device_pinned_mem_limit 0 10G", "", false},
		{"get_default_device_pinned_mem_limit 0", "10240M", false},
		{"get_server_list", "", false},
		{"quit", "", true},
	} {
		if r, quit := step(tc.line); r.Out != tc.out || r.Err != "" || quit != tc.quit {
			t.Errorf("%s: %+v quit=%v, want out %q quit=%v", tc.line, r, quit, tc.out, tc.quit)
		}
	}
	want := mpssim.Limits{Device: "GPU-x", PID: 7, DefaultActiveThreadPercentage: 50, DefaultDevicePinnedMemLimitMiB: map[string]int64{"0": 10240}}
	if l.DefaultActiveThreadPercentage != want.DefaultActiveThreadPercentage || !maps.Equal(l.DefaultDevicePinnedMemLimitMiB, want.DefaultDevicePinnedMemLimitMiB) {
		t.Fatalf("limits %+v, want %+v", l, want)
	}
	if s := l.String(); s != "device=GPU-x pid=7 defaultActiveThreadPercentage=50 defaultDevicePinnedMemLimit[0]=10240M" {
		t.Fatalf("String: %q", s)
	}
}

// FuzzParseCommand: never a panic, every error says something, and an
// accepted command is applied without one.
func FuzzParseCommand(f *testing.F) {
	for _, s := range []string{"quit", "quit -t 5", "get_server_list", "set_default_active_thread_percentage 50",
		"set_default_device_pinned_mem_limit 0 10240M", "get_default_device_pinned_mem_limit 0", "set_default_device_pinned_mem_limit 0 9999999999999999999G",
		"set_default_active_thread_percentage 1e-300", "ps", "\x00", "quit -t"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		c, err := mpssim.ParseCommand(line)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		if _, r, _ := mpssim.Apply(mpssim.Limits{}, c); r.Err != "" {
			t.Fatalf("%q parsed but Apply refused it: %s", line, r.Err)
		}
	})
}
