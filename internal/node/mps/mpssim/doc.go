// Package mpssim is a simulated nvidia-cuda-mps-control: the MPS control
// daemon and its control client, as far as gpuslice uses them
// (internal/node/mps), for simulated GPUs where no NVIDIA driver is.
//
// The gpuslice binary runs Main when it is called by the control binary's
// name (a symbolic link made by Install, as `gpuslice dra-driver
// --simulate` does in its state directory) or as the hidden `gpuslice
// sim-mps-control`. Like the real one, `-d` starts the daemon in the
// background (it re-runs the executable with `-f` in a session of its
// own) and returns once it listens; the daemon keeps its control socket
// (SocketFile, a unix socket) and pid file (mps.PIDFile) in
// $CUDA_MPS_PIPE_DIRECTORY and a log (LogFile) in $CUDA_MPS_LOG_DIRECTORY;
// without arguments the program is a control client that sends each line
// of its standard input to the daemon and prints the answers, failing
// with "Cannot find MPS control daemon process" when none runs.
//
// The daemon knows quit, get_server_list (never a server: no CUDA client
// reaches a simulated GPU), set_/get_default_active_thread_percentage,
// set_/get_default_device_pinned_mem_limit, get_device_client_list and
// ps (ParseCommand; anything else is refused, naming what it knows). The
// defaults it is given are kept in LimitsFile, JSON beside the socket, so
// that a container mounting the pipe directory can check them; quit
// removes the socket, the pid file and LimitsFile, then the daemon exits.
// Apply is the daemon's decision on a command, without I/O.
package mpssim
