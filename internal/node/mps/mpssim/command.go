package mpssim

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// MaxLine is the longest command line the simulator reads.
const MaxLine = 1024

// Command is one control command, as a client writes it on a line.
type Command struct {
	Name string
	Args []string
}

// commands are the control commands the simulator knows, with the usage
// of their arguments.
var commands = map[string]string{
	"quit":                                 "[-t SECONDS]",
	"get_server_list":                      "",
	"get_device_client_list":               "",
	"ps":                                   "",
	"set_default_active_thread_percentage": "PERCENT",
	"get_default_active_thread_percentage": "",
	"set_default_device_pinned_mem_limit":  "DEVICE LIMIT",
	"get_default_device_pinned_mem_limit":  "DEVICE",
}

// ParseCommand reads one command line strictly: a known command with the
// arguments it takes, each checked (a percentage in (0, 100], a device
// ordinal, a memory limit such as 1024M or 2G). Errors say what is valid.
func ParseCommand(line string) (Command, error) {
	if len(line) > MaxLine {
		return Command{}, fmt.Errorf("command of %d bytes: at most %d", len(line), MaxLine)
	}
	f := strings.Fields(line)
	if len(f) == 0 {
		return Command{}, fmt.Errorf("empty command")
	}
	c := Command{Name: f[0], Args: f[1:]}
	usage, ok := commands[c.Name]
	if !ok {
		return Command{}, fmt.Errorf("unknown command %.64q: the simulator knows %s", c.Name, strings.Join(slices.Sorted(maps.Keys(commands)), ", "))
	}
	bad := func(why string) (Command, error) {
		return Command{}, fmt.Errorf("%s %s: %s (usage: %s %s)", c.Name, strings.Join(c.Args, " "), why, c.Name, usage)
	}
	switch c.Name {
	case "quit":
		if len(c.Args) == 0 {
			return c, nil
		}
		if len(c.Args) != 2 || c.Args[0] != "-t" {
			return bad("want no argument or -t SECONDS")
		}
		if n, err := strconv.Atoi(c.Args[1]); err != nil || n < 0 {
			return bad("the timeout is a whole number of seconds ≥ 0")
		}
	case "set_default_active_thread_percentage":
		if len(c.Args) != 1 {
			return bad("want one percentage")
		}
		if _, err := ParsePercent(c.Args[0]); err != nil {
			return bad(err.Error())
		}
	case "set_default_device_pinned_mem_limit":
		if len(c.Args) != 2 {
			return bad("want a device ordinal and a limit")
		}
		if _, err := parseOrdinal(c.Args[0]); err != nil {
			return bad(err.Error())
		}
		if _, err := ParseMemLimit(c.Args[1]); err != nil {
			return bad(err.Error())
		}
	case "get_default_device_pinned_mem_limit":
		if len(c.Args) != 1 {
			return bad("want a device ordinal")
		}
		if _, err := parseOrdinal(c.Args[0]); err != nil {
			return bad(err.Error())
		}
	default:
		if len(c.Args) != 0 {
			return bad("takes no argument")
		}
	}
	return c, nil
}

// ParsePercent reads an active thread percentage: a number in (0, 100].
func ParsePercent(s string) (float64, error) {
	p, err := strconv.ParseFloat(s, 64)
	if err != nil || !(p > 0 && p <= 100) {
		return 0, fmt.Errorf("percentage %.32q: want a number in (0, 100]", s)
	}
	return p, nil
}

// ParseMemLimit reads a pinned memory limit, a whole number of MiB (M) or
// GiB (G) as nvidia-cuda-mps-control takes it, and returns MiB.
func ParseMemLimit(s string) (int64, error) {
	num, unit := s[:max(len(s)-1, 0)], strings.ToUpper(s[max(len(s)-1, 0):])
	mul := map[string]int64{"M": 1, "G": 1024}[unit]
	n, err := strconv.ParseInt(num, 10, 64)
	if mul == 0 || err != nil || n < 0 || n > 1<<40 {
		return 0, fmt.Errorf("limit %.32q: want a whole number followed by M or G, e.g. 10240M or 10G", s)
	}
	return n * mul, nil
}

func parseOrdinal(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > 64 {
		return 0, fmt.Errorf("device %.32q: want a device ordinal (0 for the one device the daemon sees)", s)
	}
	return n, nil
}

// Limits is what a daemon was told: the file LimitsFile in its pipe
// directory, which a container mounting the directory can read.
type Limits struct {
	Device string `json:"device"` // CUDA_VISIBLE_DEVICES
	PID    int    `json:"pid"`
	// DefaultActiveThreadPercentage is 0 until set (the daemon's
	// default is 100).
	DefaultActiveThreadPercentage float64 `json:"defaultActiveThreadPercentage,omitempty"`
	// DefaultDevicePinnedMemLimitMiB maps a device ordinal to its limit.
	DefaultDevicePinnedMemLimitMiB map[string]int64 `json:"defaultDevicePinnedMemLimitMiB,omitempty"`
}

// Reply is a daemon's answer to one command.
type Reply struct {
	Out string `json:"out,omitempty"`
	Err string `json:"err,omitempty"`
}

// Apply is the daemon's decision on one command: the limits after it,
// its answer, and whether the daemon quits. It does no I/O.
func Apply(l Limits, c Command) (Limits, Reply, bool) {
	switch c.Name {
	case "quit":
		return l, Reply{}, true
	case "get_server_list", "get_device_client_list", "ps":
		return l, Reply{}, false // no CUDA client ever connects to a simulated daemon
	case "set_default_active_thread_percentage":
		p, err := ParsePercent(c.Args[0])
		if err != nil {
			return l, Reply{Err: err.Error()}, false
		}
		l.DefaultActiveThreadPercentage = p
		return l, Reply{Out: strconv.FormatFloat(p, 'f', 1, 64)}, false
	case "get_default_active_thread_percentage":
		p := l.DefaultActiveThreadPercentage
		if p == 0 {
			p = 100
		}
		return l, Reply{Out: strconv.FormatFloat(p, 'f', 1, 64)}, false
	case "set_default_device_pinned_mem_limit":
		mib, err := ParseMemLimit(c.Args[1])
		if err != nil {
			return l, Reply{Err: err.Error()}, false
		}
		m := maps.Clone(l.DefaultDevicePinnedMemLimitMiB)
		if m == nil {
			m = map[string]int64{}
		}
		m[c.Args[0]] = mib
		l.DefaultDevicePinnedMemLimitMiB = m
		return l, Reply{}, false
	case "get_default_device_pinned_mem_limit":
		if mib, ok := l.DefaultDevicePinnedMemLimitMiB[c.Args[0]]; ok {
			return l, Reply{Out: strconv.FormatInt(mib, 10) + "M"}, false
		}
		return l, Reply{Out: "0"}, false
	}
	return l, Reply{Err: "unknown command " + c.Name}, false
}

// String is the limits as one line, for logs.
func (l Limits) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "device=%s pid=%d", l.Device, l.PID)
	if l.DefaultActiveThreadPercentage > 0 {
		fmt.Fprintf(&b, " defaultActiveThreadPercentage=%s", strconv.FormatFloat(l.DefaultActiveThreadPercentage, 'f', -1, 64))
	}
	for _, dev := range slices.Sorted(maps.Keys(l.DefaultDevicePinnedMemLimitMiB)) {
		fmt.Fprintf(&b, " defaultDevicePinnedMemLimit[%s]=%dM", dev, l.DefaultDevicePinnedMemLimitMiB[dev])
	}
	return b.String()
}
