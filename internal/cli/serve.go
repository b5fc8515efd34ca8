package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuslice/gpuslice/internal/agent"
	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/autoscale"
	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/datadir"
	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/gpu/fake"
	"github.com/gpuslice/gpuslice/internal/gpu/nvml"
	"github.com/gpuslice/gpuslice/internal/node/mps"
	"github.com/gpuslice/gpuslice/internal/node/watchdog"
	"github.com/gpuslice/gpuslice/internal/server"
	"github.com/gpuslice/gpuslice/internal/state"
)

// defaultDataDir is where serve keeps its database and tokens.
func defaultDataDir() string {
	if d := os.Getenv("GPUSLICE_DATA_DIR"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "gpuslice")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ".gpuslice"
	}
	return filepath.Join(home, ".local", "share", "gpuslice")
}

func hostName() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "localhost"
	}
	return strings.ToLower(strings.SplitN(h, ".", 2)[0])
}

// openDeviceFor picks the device layer: the simulated machine named by
// --simulate (a preset or a YAML file), else the real GPUs through NVML,
// else — no NVIDIA driver, and only where fallback allows it (serve's
// friendly default) — the dgx-a100 simulation, saying so; without fallback
// (gpuslice agent, which joins real hosts to a fleet) a host where NVML
// does not load is an error that says what to check. A simulated
// machine is seeded from the node name, so that two simulated nodes on one
// host (serve's and an agent's --simulate … --node sim-1) report different
// GPU UUIDs. With a stateFile a simulated machine keeps its MIG layout
// there across restarts, as real GPUs keep theirs (fake.WithStateFile).
func openDeviceFor(simulate, node string, fallback bool, log *slog.Logger, stateFile ...string) (gpu.Device, string, error) {
	name := simulate
	noDriver := ""
	if name == "" {
		dev, err := nvml.Open()
		if err == nil {
			info := dev.Info()
			return dev, "using the real GPUs through NVML (driver " + info.DriverVersion + ")", nil
		}
		if !errors.Is(err, gpu.ErrNoDriver) || !fallback {
			return nil, "", fmt.Errorf("%w\n%s", err, nvmlChecklist)
		}
		noDriver = strings.TrimSuffix(err.Error(), ": use --simulate")
		name = "dgx-a100"
	}
	var spec fake.MachineSpec
	var err error
	if data, rerr := os.ReadFile(name); rerr == nil {
		spec, err = fake.LoadSpec(name, data)
	} else {
		spec, err = fake.Preset(name)
		if err != nil {
			err = fmt.Errorf("--simulate %q is neither a file nor a preset (%s): %w", name, strings.Join(fake.Presets(), ", "), err)
		}
	}
	if err != nil {
		return nil, "", err
	}
	opts := []fake.Option{fake.WithSeed(seedOf(node))}
	if len(stateFile) > 0 && stateFile[0] != "" {
		opts = append(opts, fake.WithStateFile(stateFile[0]))
	}
	m, err := fake.New(spec, opts...)
	if err != nil {
		return nil, "", err
	}
	why := "simulated GPUs (" + name + ")"
	if simulate == "" {
		why = noDriver + ": running on SIMULATED GPUs (dgx-a100: 8× A100-40GB, fake uuids; nodes ls shows the node as simulated); pass --simulate PRESET|FILE to choose the machine"
	}
	return m, why, nil
}

// agentDuties configures what the agent does beyond MIG layouts on this
// device layer: on real GPUs MPS daemons, process ownership from the
// environment and SIGKILL for policy kill; on the simulated machine its own
// process table, with a simulated process for every running claim.
func agentDuties(cfg *agent.Config, dev gpu.Device, log *slog.Logger, cdiDir string) {
	cfg.CDIDir = cdiDir
	if m, ok := dev.(*fake.Machine); ok {
		cfg.Kill, cfg.Workloads = m.StopProcess, m
		return
	}
	cfg.MPS = mps.NewManager(mps.Config{Compute: dev, Root: alloc.MPSPipeRoot, Log: log})
	cfg.Owner = watchdog.EnvOwner("")
	cfg.Kill = func(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }
}

// nvmlChecklist is what to check when NVML does not load on a host meant
// to drive real GPUs.
const nvmlChecklist = `NVML could not drive this host's GPUs. Check:
  - the NVIDIA kernel driver is loaded: nvidia-smi lists the GPUs (lsmod | grep nvidia)
  - libnvidia-ml.so.1 is on the loader path: ldconfig -p | grep libnvidia-ml (or LD_LIBRARY_PATH)
  - in a container: the NVIDIA Container Toolkit mounts the driver (docker run --gpus all, or runtime nvidia)
  - gpuslice was built with cgo (CGO_ENABLED=1): NVML is loaded through it
To run on simulated GPUs instead, say so: --simulate dgx-a100 (or another preset, or a YAML file).`

func seedOf(s string) int64 {
	var h int64
	for _, r := range s {
		h = h*31 + int64(r)
	}
	return h
}

// handlerTransport sends requests straight to an in-process handler: the
// local agent of serve talks to its server without a network hop.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, r)
	return rec.Result(), nil
}

func serveCmd(e *env) *cobra.Command {
	var listen, dataDir, storeKind, simulate, nodeName, tlsCert, tlsKey, placement, cdiDir, faultDir string
	var nodeTimeout, reserveAfter, nodeTTL, nodeInterval, leaseGrace time.Duration
	var replicaUser, replicaUIDs, replicaDir string
	var nodePools string
	var maxQueued, defReplicas int
	var ret retentionFlags
	var maxStreamsToken, maxStreamsTenant int
	var noAgent, modeSwitch, selfSigned, preferMIG bool
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the control plane with an embedded store and a local node agent",
		Long: `Runs the API, the scheduler and a local node agent in one process. Defaults work
on a fresh machine: it listens on 127.0.0.1:7777, keeps a SQLite database (WAL) in the
data directory, and on first start creates an admin token, written to
<data-dir>/admin.token (mode 0600) and printed once, and a tenant named "default".
Without an NVIDIA driver it runs on simulated GPUs and says so.

One server at a time per data directory: it holds a lock on <data-dir>/lock (which
names its pid) until it exits. It refuses a damaged database, and once admin.token
exists it refuses a database that is missing or empty instead of starting afresh.`,
		Example: "  gpuslice serve\n  gpuslice serve --simulate dgx-h100 --listen 0.0.0.0:7777 --tls-cert c.pem --tls-key k.pem\n  gpuslice serve --listen 0.0.0.0:7777 --tls-self-signed",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, f := range []struct {
				name string
				v    int
			}{{"max-streams-per-token", maxStreamsToken}, {"max-streams-per-tenant", maxStreamsTenant}} {
				if f.v == 0 {
					return fmt.Errorf("--%s 0: want at least 1, or a negative number for no bound", f.name)
				}
			}
			// SIGHUP (the terminal serve runs in closed) stops it as
			// SIGTERM does: replicas are stopped and their claims released,
			// rather than killed by the parent-death signal.
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
			defer stop()
			log := slog.New(slog.NewTextHandler(e.errOut, &slog.HandlerOptions{Level: slog.LevelInfo}))
			if err := os.MkdirAll(dataDir, 0o700); err != nil {
				return fmt.Errorf("data directory: %w", err)
			}
			// One server per data directory, before anything in it is
			// read or written; held until the process ends.
			lock, err := datadir.Acquire(dataDir)
			if err != nil {
				return err
			}
			defer lock.Release()
			// Simulated GPUs keep their MIG layout in the data directory, so a
			// restart adopts running claims' instances instead of losing them.
			dev, why, err := openDeviceFor(simulate, nodeName, true, log, filepath.Join(dataDir, "simulated-gpus-"+nodeName+".json"))
			if err != nil {
				return err
			}
			log.Info(why)
			faults := cmp.Or(faultDir, filepath.Join(dataDir, FaultDirName))
			if err := watchFaults(ctx, dev, faults, faultDir != "", log); err != nil {
				return err
			}
			var store state.Store
			switch storeKind {
			case "sqlite":
				db, err := openDatabase(dataDir)
				if err != nil {
					return err
				}
				store = db
			case "memory":
				// A memory store writes its own admin and agent tokens to the
				// data directory; over a SQLite store's they would lock its
				// user out of the database they belong to.
				for _, f := range []string{"gpuslice.db", "admin.token"} {
					if _, err := os.Lstat(filepath.Join(dataDir, f)); err == nil {
						return fmt.Errorf("--store memory: %s holds a SQLite store (%s); its tokens would be replaced. "+
							"Pass --data-dir with another directory for a memory store", dataDir, f)
					}
				}
				store = state.NewMemory()
			default:
				return fmt.Errorf("--store %q: want sqlite or memory", storeKind)
			}
			defer store.Close()
			if defReplicas < 1 || defReplicas > 64 {
				return fmt.Errorf("--default-replicas %d: want 1..%d", defReplicas, 64)
			}
			policy := alloc.Policy{Placement: placement, AllowModeSwitch: modeSwitch, DefaultReplicas: defReplicas, PreferMIG: preferMIG}
			if !cmd.Flags().Changed("allow-mode-switch") {
				policy.AllowModeSwitch = dev.Info().Simulated // harmless on simulated GPUs
			}
			scfg := server.Config{Store: store, Log: log, NodeTimeout: nodeTimeout,
				Simulated: dev.Info().Simulated, Policy: policy, ReserveAfter: reserveAfter, MaxQueuedPerTenant: maxQueued, LeaseGrace: leaseGrace,
				MaxStreamsPerToken: maxStreamsToken, MaxStreamsPerTenant: maxStreamsTenant}
			if err := ret.apply(&scfg); err != nil {
				return err
			}
			srv, err := server.New(ctx, scfg)
			if err != nil {
				return err
			}
			// Everything that can fail about serving — the certificate,
			// the address — is checked before bootstrap makes an admin
			// token, so a failed start prints no secret nobody can use.
			tlsConf, err := serveTLS(e, dataDir, tlsCert, tlsKey, selfSigned)
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return err
			}
			defer ln.Close()
			if err := bootstrap(ctx, e, srv, store, dataDir); err != nil {
				return err
			}
			srv.Run(ctx)
			var servicesDone <-chan struct{}
			if !noAgent {
				tok, err := agentToken(ctx, srv, store, dataDir, nodeName)
				if err != nil {
					return err
				}
				c, err := client.New("http://in-process", tok, &http.Client{Transport: handlerTransport{srv.Handler()}})
				if err != nil {
					return err
				}
				acfg := agent.Config{Name: nodeName, Host: hostName(), Client: c, Device: dev, Log: log.With("agent", nodeName), Interval: 2 * time.Second}
				agentDuties(&acfg, dev, log, cdiDir)
				a, err := agent.New(acfg)
				if err != nil {
					return err
				}
				// Register before serving, so a client that sees the server
				// answer also finds the local node (Run retries on failure).
				if err := a.Register(ctx); err != nil {
					log.Warn("local node registration failed; the agent retries", "err", err)
				}
				go func() { _ = a.Run(ctx) }()
				// Services run on the local node (services.go).
				users, err := replicaUsers(replicaUser, replicaUIDs, cmd.Flags().Changed("replica-uids"), log)
				if err != nil {
					return err
				}
				if servicesDone, err = startServices(ctx, srv, store, dataDir, nodeName, listen, users, replicaDir, log); err != nil {
					return err
				}
			}
			if nodePools != "" {
				if !dev.Info().Simulated {
					return fmt.Errorf("--node-pools: only simulated nodes can be made yet (no cloud provider is built); run on simulated GPUs (--simulate)")
				}
				pools, err := readNodePools(nodePools, nodeTTL)
				if err != nil {
					return err
				}
				if err := startNodePools(ctx, srv, store, dataDir, pools, nodeInterval, log); err != nil {
					return err
				}
			}
			hs := srv.NewHTTPServer(listen)
			scheme := "http"
			if tlsConf != nil {
				hs.TLSConfig, scheme = tlsConf, "https"
			}
			serveErr := make(chan error, 1)
			go func() {
				var err error
				if tlsConf != nil {
					err = hs.ServeTLS(ln, "", "") // the certificate is in hs.TLSConfig
				} else {
					err = hs.Serve(ln)
				}
				if err != nil && !errors.Is(err, http.ErrServerClosed) {
					serveErr <- err
					stop()
				}
			}()
			log.Info("gpuslice serving", "url", scheme+"://"+ln.Addr().String(), "data", dataDir, "store", storeKind)
			<-ctx.Done()
			if servicesDone != nil {
				// SIGTERM stops the replicas (and releases their claims)
				// before serve exits: none outlives it.
				log.Info("stopping service replicas")
				<-servicesDone
			}
			shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			shutErr := hs.Shutdown(shut)
			select {
			case err := <-serveErr:
				return fmt.Errorf("http server: %w", err)
			default:
				return shutErr
			}
		},
	}
	defListen := "127.0.0.1:7777"
	if l := os.Getenv("GPUSLICE_LISTEN"); l != "" {
		defListen = l
	}
	cmd.Flags().StringVar(&listen, "listen", defListen, "address to listen on (env GPUSLICE_LISTEN)")
	cmd.Flags().StringVar(&dataDir, "data-dir", defaultDataDir(), "where the database and tokens live")
	cmd.Flags().StringVar(&faultDir, "fault-dir", "", "simulated GPUs: apply the fault requests written here (default <data-dir>/"+FaultDirName+"; gpuslice dra simulate-fault --fault-dir)")
	cmd.Flags().StringVar(&storeKind, "store", "sqlite", "sqlite (durable) or memory")
	cmd.Flags().StringVar(&simulate, "simulate", "", "simulate GPUs: a preset ("+strings.Join(fake.Presets(), ", ")+") or a YAML file")
	cmd.Flags().StringVar(&nodeName, "node", hostName(), "name of the local node")
	cmd.Flags().StringVar(&tlsCert, "tls-cert", "", "serve HTTPS with this certificate")
	cmd.Flags().StringVar(&tlsKey, "tls-key", "", "and this key")
	cmd.Flags().BoolVar(&selfSigned, "tls-self-signed", false, "serve HTTPS with a self-signed certificate kept in the data directory (made on first use); clients pass it as --ca")
	cmd.Flags().StringVar(&placement, "placement", "binpack", "binpack or spread")
	cmd.Flags().StringVar(&nodePools, "node-pools", "", "a gpuslice spec whose pools the node autoscaler grows for pending claims and shrinks when empty (simulated nodes)")
	cmd.Flags().DurationVar(&nodeTTL, "node-ttl", autoscale.DefaultEmptyTTL, "how long a node of --node-pools stays empty before it is removed")
	cmd.Flags().DurationVar(&nodeInterval, "node-interval", 15*time.Second, "how often the node autoscaler decides")
	cmd.Flags().IntVar(&defReplicas, "default-replicas", alloc.DefaultReplicas,
		"time-slicing replicas of a device the allocator sets up; a shared claim with no memory is promised the GPU's memory divided by this")
	cmd.Flags().DurationVar(&nodeTimeout, "node-timeout", 30*time.Second, "mark a node lost after this long without a heartbeat")
	cmd.Flags().DurationVar(&reserveAfter, "reserve-after", 5*time.Minute, "after a queued claim waits this long, the GPUs it could use on one node are held for it: claims behind it of its priority or lower use only other GPUs (the rest of that node included); negative: always backfill")
	cmd.Flags().IntVar(&maxQueued, "max-queued", 1000, "most claims a tenant may have waiting; past it a claim that would wait is refused with 429 (negative: no bound)")
	ret.register(cmd)
	cmd.Flags().IntVar(&maxStreamsToken, "max-streams-per-token", server.DefaultMaxStreamsPerToken,
		"most event streams (GET /v1/events) and long polls (GET /v1/claims/{id}?wait=) one token of any role may hold open; past it 429 with Retry-After (negative: no bound)")
	cmd.Flags().IntVar(&maxStreamsTenant, "max-streams-per-tenant", server.DefaultMaxStreamsPerTenant,
		"most event streams and long polls all of one tenant's tokens together may hold open; past it 429 with Retry-After (negative: no bound)")
	cmd.Flags().StringVar(&cdiDir, "cdi-dir", "", "write a CDI spec per claim here for container runtimes (e.g. /var/run/cdi)")
	cmd.Flags().DurationVar(&leaseGrace, "lease-grace", 10*time.Second, "how long past its lease a leased claim (gpuslice run, service replicas) is kept before it is released")
	cmd.Flags().StringVar(&replicaUIDs, "replica-uids", "2100000000-2100065535", "as root: each service replica runs as a uid (and gid) of its own from this range, FROM-TO (ids no account of the host uses)")
	cmd.Flags().StringVar(&replicaUser, "replica-user", "", "as root: run every service replica as this unprivileged user instead of --replica-uids (never root)")
	cmd.Flags().StringVar(&replicaDir, "replica-dir", filepath.Join(os.TempDir(), "gpuslice-replicas"), "where each service replica gets a working directory of its own (outside the data directory)")
	cmd.Flags().BoolVar(&noAgent, "no-agent", false, "run no local node agent (nodes join with gpuslice agent)")
	cmd.Flags().BoolVar(&preferMIG, "prefer-mig", false, "put time-sliced, MPS and auto claims that name no MIG profile into MIG instances (which hold less of a GPU) even while a whole GPU could take them; default: whole GPUs first, MIG instances only when none can, and the claim's notes say so")
	cmd.Flags().BoolVar(&modeSwitch, "allow-mode-switch", false, "let the allocator turn MIG on or off on idle GPUs (resets them; default: on for simulated GPUs only)")
	return cmd
}

// openDatabase opens the data directory's SQLite database. Once bootstrap
// has written admin.token the database must be there with its schema: a
// missing or emptied database is refused rather than silently made anew
// (new admin token, every claim forgotten while its processes still run).
func openDatabase(dataDir string) (*state.SQLite, error) {
	dbPath := filepath.Join(dataDir, "gpuslice.db")
	tokPath := filepath.Join(dataDir, "admin.token")
	if _, err := os.Lstat(tokPath); errors.Is(err, os.ErrNotExist) {
		return state.OpenSQLite(dbPath, state.SQLiteOptions{}) // a fresh directory
	} else if err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	db, err := state.OpenSQLite(dbPath, state.SQLiteOptions{MustExist: true})
	if errors.Is(err, state.ErrNoSchema) {
		return nil, fmt.Errorf("refusing to start: %s, but %s exists (this data directory held a database before); "+
			"restore %s from a backup, or remove %s to start afresh deliberately (a new admin token; every tenant, token and claim is gone)",
			strings.TrimPrefix(err.Error(), "state: "), tokPath, dbPath, tokPath)
	}
	return db, err
}

// bootstrap creates the admin token and the default tenant on first start.
func bootstrap(ctx context.Context, e *env, srv *server.Server, store state.Store, dataDir string) error {
	has, err := srv.HasAdminToken(ctx)
	if err != nil {
		return err
	}
	if !has {
		tok, err := srv.CreateToken(ctx, api.RoleAdmin, "")
		if err != nil {
			return err
		}
		path := filepath.Join(dataDir, "admin.token")
		if err := os.WriteFile(path, []byte(tok.Secret+"\n"), 0o600); err != nil {
			return fmt.Errorf("writing %s: %w", path, err)
		}
		fmt.Fprintf(e.errOut, "admin token (shown once; also in %s):\n  %s\n", path, tok.Secret)
	}
	return srv.EnsureTenant(ctx, "default")
}

// agentToken reads or makes the local agent's token, bound to node: an
// agent credential acts for one node only, so a token left from a run
// with another --node is replaced.
func agentToken(ctx context.Context, srv *server.Server, store state.Store, dataDir, node string) (string, error) {
	path := filepath.Join(dataDir, "agent.token")
	if b, err := os.ReadFile(path); err == nil {
		secret := strings.TrimSpace(string(b))
		ok := false
		_ = store.View(ctx, func(tx state.Tx) error {
			t, err := tx.TokenByHash(server.HashToken(secret))
			ok = err == nil && t.Node == node
			return nil
		})
		if ok {
			return secret, nil
		}
	}
	tok, err := srv.CreateTokenFor(ctx, api.RoleAgent, "", node)
	if err != nil {
		return "", err
	}
	return tok.Secret, os.WriteFile(path, []byte(tok.Secret+"\n"), 0o600)
}
