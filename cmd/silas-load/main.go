// Command silas-load drives Silas's turn pipeline (core/engine over
// core/store) on real PostgreSQL and prints throughput and latency figures.
// `make bench` runs it with its defaults after the Go benchmarks; the
// figures and their analysis are kept in BENCHMARKS.md.
//
// The database is DATABASE_URL when set (its database must be empty or
// hold only Silas's schema: the driver migrates it and writes into it);
// otherwise a throwaway PostgreSQL cluster is started in a temporary
// directory with durable commits (fsync and synchronous_commit on) and
// removed at the end. --nosync starts that cluster without durability, for
// comparison only.
//
// The engine runs in this process with a null channel (sends and edits
// return at once and are counted), the deterministic command agent, the real
// subprocess sandbox, the default policy and a fresh Ed25519 key.
//
// Phases, in this order:
//
//	warm-up      closed loop, not reported
//	(a) closed   C senders, each delivers a text turn and waits for its
//	             TurnDone (reply enqueued) before the next: turns/s
//	(c) approvals --approvals `/run echo x` turns from an owner (low risk:
//	             one tap each) create pending cards, reported as /run
//	             turns/s; then each card is tapped at --tap-rate/s and tap →
//	             execution start (Hooks.ExecutionStarted) latency is measured
//	             from the scheduled tap time
//	(r) reference  with --reference (default): at --tap-rate, an idle tap
//	             interval, a fork+exec of `echo x` (bare and in fresh
//	             namespaces) and two durable commits in three round trips,
//	             each timed as (c) is: what this machine charges in the same
//	             minute for parts of an execution that are not Silas's
//	             (reference.go)
//	(b) open     turns scheduled at --rate/s for --open-duration; latency is
//	             TurnDone time minus the *scheduled* send time, so a stall
//	             shows up in the figures instead of silently lowering the
//	             offered load (no coordinated omission). It runs last because
//	             an overloaded pipeline leaves a backlog behind.
//	(e), (f)     with --silas: the real `silas serve` polling the Telegram
//	             fake, --chats chats at saturation, with the command agent
//	             (e) and the LLM agent against a model endpoint that answers
//	             at once (f): the gateway's peak RSS and its CPU per
//	             answered message (gateway.go)
//
// After each phase the driver waits up to --drain-timeout for the outbox to
// deliver its backlog, and reports how long that took or how much was left.
// Then (--upkeep, on by default) it vacuums the tables the phase changed
// (and analyzes those autovacuum would) and charges the cost to that phase,
// so that the vacuum a phase's rows need is counted with it rather than
// landing, through autovacuum, in a later phase's figures.
// With --cpuprofile and --trace it profiles this process (pprof over all
// phases; an execution trace of phase (a)). The per-turn resource table
// counts CPU of this process, of the PostgreSQL server when it runs on this
// host (its postmaster and children, found through our backend's parent),
// write transactions (xid delta) and WAL bytes; "others" is CPU used on the
// machine by anything else, which makes noisy figures visible.
//
// The exit status is non-zero on errors (a failed Deliver, a turn or
// execution that does not complete within --timeout, an error logged by the
// engine), not when a target is missed or the outbox is slow to drain.
package main

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/agent"
	"github.com/silas-gateway/silas/core/engine"
	"github.com/silas-gateway/silas/core/execute"
	"github.com/silas-gateway/silas/core/gateway"
	"github.com/silas-gateway/silas/core/policy"
	"github.com/silas-gateway/silas/core/sandbox"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/core/verify"
	"github.com/silas-gateway/silas/internal/gcdefault"
	"github.com/silas-gateway/silas/internal/pgcluster"
	"github.com/silas-gateway/silas/internal/telemetry"
)

const (
	channel = core.ChannelName("load")
	owner   = core.IdentityID("load:owner")

	targetTurnsPerSec = 3000
	targetP99         = 25 * time.Millisecond
)

type options struct {
	warmup       time.Duration
	duration     time.Duration
	concurrency  int
	convs        int
	rate         float64
	openDuration time.Duration
	approvals    int
	tapRate      float64
	burst        int
	// reference: after (c), time the parts of an execution that are not
	// Silas's code, referenceN steps each at tapRate (reference.go).
	reference  bool
	referenceN int
	noSync     bool
	// upkeep: after each phase, vacuum (and analyze) what it changed and
	// charge what that costs to the phase (settle).
	upkeep     bool
	cpuProfile string
	memProfile string
	// tapCPUProfile / tapMemProfile: the same, of tap → verified in (c)
	// only (the window its "Go µs" and "alloc kB" are measured over).
	tapCPUProfile string
	tapMemProfile string
	traceFile     string
	maxConns      int
	workers       int
	maxBatch      int
	writers       int
	lazyDelay     time.Duration
	timeout       time.Duration
	drainTimeout  time.Duration
	verbose       bool
	// sampling > 0 turns tracing on as serve would (SDK, batch processor,
	// pgx tracer) with spans exported nowhere: the cost of tracing itself.
	sampling int
	// otlp: export them over OTLP/HTTP to a collector in this process that
	// reads and discards each export (serve's whole cost: protobuf, HTTP).
	otlp bool
	// The gateway phases (gateway.go): the silas binary, chats and
	// messages in flight per chat, measured length.
	silasBin        string
	gateways        string
	chats           int
	chatWindow      int
	gatewayDuration time.Duration
}

func main() {
	// The collector's target as `silas serve` sets it (internal/gcdefault),
	// so that the engine in this process is measured as it is deployed.
	gcdefault.Apply()
	os.Exit(run())
}

func run() int {
	var o options
	fs := flag.NewFlagSet("silas-load", flag.ContinueOnError)
	fs.DurationVar(&o.warmup, "warmup", 2*time.Second, "closed-loop warm-up before measuring (not reported)")
	fs.DurationVar(&o.duration, "duration", 6*time.Second, "closed-loop (max throughput) phase length")
	fs.IntVar(&o.concurrency, "concurrency", 256, "closed-loop concurrent senders")
	fs.IntVar(&o.convs, "convs", 500, "conversations the turns are spread over")
	fs.Float64Var(&o.rate, "rate", 1000, "open-loop offered load, turns/s")
	fs.DurationVar(&o.openDuration, "open-duration", 10*time.Second, "open-loop phase length (0 skips it)")
	fs.IntVar(&o.approvals, "approvals", 200, "pending approvals to create and tap (0 skips the phase)")
	fs.Float64Var(&o.tapRate, "tap-rate", 50, "approval taps per second")
	fs.IntVar(&o.burst, "burst", 200, "after (c), this many more approvals tapped all at once (0 skips it)")
	fs.BoolVar(&o.reference, "reference", true, "after (c), time at --tap-rate what this machine charges now for an idle tap interval, a fork+exec of `echo x` (also in fresh namespaces, as root) and 2 durable commits in 3 round trips: (c)'s reference from the same minute")
	fs.IntVar(&o.referenceN, "reference-n", 100, "--reference: steps of each item")
	fs.BoolVar(&o.upkeep, "upkeep", true, "after each phase, VACUUM (and ANALYZE where autovacuum would) the tables it changed, charged to that phase; false leaves that to autovacuum, in whatever phase comes next (as before 2026-11-27)")
	fs.BoolVar(&o.noSync, "nosync", false, "throwaway cluster without durability (fsync, synchronous_commit off): for comparison only")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of this process (all phases) to `file`")
	fs.StringVar(&o.memProfile, "memprofile", "", "write an allocation profile of this process (all phases; go tool pprof -sample_index=alloc_space) to `file`")
	fs.StringVar(&o.tapCPUProfile, "tap-cpuprofile", "", "write a CPU profile of this process during (c)'s tap → verified only to `file`")
	fs.StringVar(&o.tapMemProfile, "tap-memprofile", "", "write allocation profiles of this process before and after (c)'s tap → verified to `file`.base and `file` (go tool pprof -sample_index=alloc_space -base file.base file)")
	fs.StringVar(&o.traceFile, "trace", "", "write an execution trace (go tool trace) of the closed-loop phase to `file`")
	fs.IntVar(&o.maxConns, "maxconns", 16, "store connection pool size (as `silas serve`)")
	fs.IntVar(&o.workers, "workers", 0, "gateway.Config.Workers (0 = gateway default)")
	fs.IntVar(&o.maxBatch, "maxbatch", 0, "store.Options.MaxBatch (0 = store default)")
	fs.IntVar(&o.writers, "writers", 0, "store.Options.Writers: group-commit transactions open at once (0 = store default)")
	fs.DurationVar(&o.lazyDelay, "lazy-delay", 0, "store.Options.LazyDelay: how long a card edit's delivery mark waits for a transaction to ride in (0 = store default)")
	fs.DurationVar(&o.timeout, "timeout", 60*time.Second, "how long to wait for unfinished turns or executions at the end of a phase before failing")
	fs.DurationVar(&o.drainTimeout, "drain-timeout", 5*time.Second, "how long to wait for the outbox to deliver its backlog after a phase (not draining is reported, not an error)")
	fs.BoolVar(&o.verbose, "v", false, "log engine warnings and progress")
	fs.IntVar(&o.sampling, "trace-sampling", 0, "tracing on with this sampling_rate_per_million, spans exported nowhere (0 = off, as by default)")
	fs.BoolVar(&o.otlp, "trace-otlp", false, "with --trace-sampling: export over OTLP/HTTP to a collector in this process that discards what it gets")
	fs.StringVar(&o.silasBin, "silas", "", "the silas binary for phases (e) and (f): `silas serve` with the Telegram fake, command agent then LLM agent (empty skips them; make bench builds it)")
	fs.StringVar(&o.gateways, "gateways", "command,llm", "(e), (f): which gateway phases run, in order: command (e), llm (f)")
	fs.IntVar(&o.chats, "chats", 50, "(e), (f): Telegram private chats")
	fs.IntVar(&o.chatWindow, "chat-window", 4, "(e), (f): messages each chat keeps in flight")
	fs.DurationVar(&o.gatewayDuration, "gateway-duration", 8*time.Second, "(e), (f): measured length (after --warmup)")
	fs.SetOutput(os.Stderr)
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if o.silasBin != "" {
		abs, err := filepath.Abs(o.silasBin)
		if err != nil {
			fmt.Fprintf(os.Stderr, "silas-load: --silas: %v\n", err)
			return 2
		}
		o.silasBin = abs
	}
	if o.concurrency < 1 || o.convs < 1 || o.rate <= 0 || o.tapRate <= 0 || o.duration <= 0 || o.burst < 0 {
		fmt.Fprintln(os.Stderr, "silas-load: --concurrency, --convs, --rate, --tap-rate and --duration must be positive")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := load(ctx, o); err != nil {
		fmt.Fprintf(os.Stderr, "silas-load: %v\n", err)
		return 1
	}
	return 0
}

// ---------------------------------------------------------------------------
// The system under test.

// nullChannel accepts every send and edit at once and counts them.
type nullChannel struct {
	sends, updates atomic.Int64
}

func (*nullChannel) Name() core.ChannelName { return channel }
func (*nullChannel) Run(ctx context.Context, _ core.Inbox) error {
	<-ctx.Done()
	return nil
}
func (c *nullChannel) Send(context.Context, core.OutMessage) (core.MessageRef, error) {
	return core.MessageRef("m" + strconv.FormatInt(c.sends.Add(1), 10)), nil
}
func (c *nullChannel) Update(context.Context, core.MessageRef, core.OutMessage) error {
	c.updates.Add(1)
	return nil
}

// errorCounter counts records at error level, passing records at or above
// level to the next handler.
type errorCounter struct {
	next   slog.Handler
	level  slog.Level
	errors *atomic.Int64
}

func (h errorCounter) Enabled(_ context.Context, l slog.Level) bool {
	return l >= slog.LevelError || l >= h.level
}
func (h errorCounter) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError {
		h.errors.Add(1)
	}
	if r.Level >= h.level {
		return h.next.Handle(ctx, r)
	}
	return nil
}
func (h errorCounter) WithAttrs(a []slog.Attr) slog.Handler {
	return errorCounter{next: h.next.WithAttrs(a), level: h.level, errors: h.errors}
}
func (h errorCounter) WithGroup(n string) slog.Handler {
	return errorCounter{next: h.next.WithGroup(n), level: h.level, errors: h.errors}
}

// clock is a monotonic nanosecond clock shared by the driver and the hooks.
var epoch = time.Now()

func nowNS() int64 { return int64(time.Since(epoch)) }

// tracker pairs a turn's start (recorded after Deliver returned its seq)
// with its TurnDone, whichever comes first: a worker may finish the turn
// before Deliver has returned to the sender.
type tracker struct {
	mu      sync.Mutex
	pending map[int64]*slot
	done    atomic.Int64
}

type slot struct {
	start, end int64 // 0 = not yet
	rec        *recorder
	ch         chan struct{}
}

func newTracker() *tracker { return &tracker{pending: map[int64]*slot{}} }

// turnDone is the engine's TurnDone hook.
func (t *tracker) turnDone(seq int64, _ core.ConversationID) {
	at := nowNS()
	t.done.Add(1)
	t.mu.Lock()
	s := t.pending[seq]
	if s == nil {
		t.pending[seq] = &slot{end: at}
		t.mu.Unlock()
		return
	}
	delete(t.pending, seq)
	t.mu.Unlock()
	s.end = at
	if s.rec != nil {
		s.rec.add(time.Duration(at - s.start))
	}
	close(s.ch)
}

// begin registers a delivered turn that started (was scheduled) at start;
// its latency goes to rec (nil: not recorded). The channel closes at
// TurnDone.
func (t *tracker) begin(seq, start int64, rec *recorder) <-chan struct{} {
	t.mu.Lock()
	s := t.pending[seq]
	if s != nil {
		delete(t.pending, seq)
		t.mu.Unlock()
		if rec != nil {
			rec.add(time.Duration(s.end - start))
		}
		return closedCh
	}
	s = &slot{start: start, rec: rec, ch: make(chan struct{})}
	t.pending[seq] = s
	t.mu.Unlock()
	return s.ch
}

var closedCh = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// recorder collects latencies.
type recorder struct {
	mu sync.Mutex
	d  []time.Duration
}

func (r *recorder) reset() {
	r.mu.Lock()
	r.d = nil
	r.mu.Unlock()
}

func (r *recorder) add(d time.Duration) {
	r.mu.Lock()
	r.d = append(r.d, d)
	r.mu.Unlock()
}

type dist struct {
	n                        int
	p50, p90, p99, p999, max time.Duration
}

func (r *recorder) dist() dist {
	r.mu.Lock()
	d := slices.Clone(r.d)
	r.mu.Unlock()
	slices.Sort(d)
	q := func(p float64) time.Duration {
		if len(d) == 0 {
			return 0
		}
		i := int(math.Ceil(p*float64(len(d)))) - 1
		return d[max(0, min(i, len(d)-1))]
	}
	out := dist{n: len(d), p50: q(0.50), p90: q(0.90), p99: q(0.99), p999: q(0.999)}
	if len(d) > 0 {
		out.max = d[len(d)-1]
	}
	return out
}

// execTracker pairs scheduled taps with ExecutionStarted.
type execTracker struct {
	mu      sync.Mutex
	sched   map[core.ApprovalID]int64
	started map[core.ApprovalID]int64
	rec     recorder
	// decided is tap → its decision committed (Deliver of a tap in an idle
	// conversation returns once its transaction committed): the first of
	// the path's commits; the rest of rec is the claim's when it has a
	// transaction of its own (not when claimed with the decision).
	decided recorder
	n       atomic.Int64
}

func (x *execTracker) tapped(id core.ApprovalID, at int64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if s, ok := x.started[id]; ok {
		x.rec.add(time.Duration(s - at))
		return
	}
	x.sched[id] = at
}

func (x *execTracker) executionStarted(id core.ApprovalID) {
	at := nowNS()
	x.n.Add(1)
	x.mu.Lock()
	defer x.mu.Unlock()
	if s, ok := x.sched[id]; ok {
		x.rec.add(time.Duration(at - s))
		delete(x.sched, id)
		return
	}
	x.started[id] = at
}

// ---------------------------------------------------------------------------
// Resource accounting.

// clkTck is USER_HZ, the unit of /proc CPU times (100 on Linux).
const clkTck = 100.0

// usage is CPU time used by this process, its children (sandbox
// processes: each run's init, waited for, and the zygote), the PostgreSQL server (when it runs on this host) and the
// whole machine, plus the database's write transactions and WAL.
type usage struct {
	at                 time.Time
	self, kids, pg     time.Duration
	machine            cpuTimes
	xid                int64 // next transaction id: write transactions are its delta
	walBytes           int64
	sends, updates     int64
	turnsDone, execRun int64
	// alloc is what this process allocated on the heap, gcs how many
	// garbage collections ran (runtime/metrics; exact counts, unlike the
	// runtime's GC CPU estimate, which counts wall time of its workers and
	// overstates on a machine whose CPUs are shared).
	alloc, gcs uint64
}

// gcSamples are the runtime/metrics read for usage.alloc and usage.gcs.
var gcSamples = []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}, {Name: "/gc/cycles/total:gc-cycles"}}

func readGC() (alloc, cycles uint64) {
	metrics.Read(gcSamples)
	if v := gcSamples[0].Value; v.Kind() == metrics.KindUint64 {
		alloc = v.Uint64()
	}
	if v := gcSamples[1].Value; v.Kind() == metrics.KindUint64 {
		cycles = v.Uint64()
	}
	return alloc, cycles
}

// cpuTimes is the first line of /proc/stat, in seconds of CPU.
type cpuTimes struct{ busy, idle, steal float64 }

func machineCPU() cpuTimes {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return cpuTimes{}
	}
	v := make([]float64, 8)
	for i := range v {
		v[i], _ = strconv.ParseFloat(f[i+1], 64)
		v[i] /= clkTck
	}
	// user nice system idle iowait irq softirq steal
	return cpuTimes{busy: v[0] + v[1] + v[2] + v[5] + v[6], idle: v[3] + v[4], steal: v[7]}
}

type sampler struct {
	st         *store.Store
	ch         *nullChannel
	tr         *tracker
	ex         *execTracker
	sb         *sandbox.Subprocess
	postmaster int // 0: the server is not on this host (or not found)
}

func (s *sampler) sample(ctx context.Context) (usage, error) {
	u := usage{at: time.Now(), sends: s.ch.sends.Load(), updates: s.ch.updates.Load(), turnsDone: s.tr.done.Load(), execRun: s.ex.n.Load(),
		machine: machineCPU()}
	u.alloc, u.gcs = readGC()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		u.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err == nil {
		u.kids = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	if s.sb != nil {
		// The sandbox's zygote is a child too, but waited for only at
		// the end: its CPU so far counts with the runs it forked.
		u.kids += s.sb.ZygoteCPU()
	}
	if s.postmaster != 0 {
		u.pg = serverCPU(s.postmaster)
	}
	err := s.st.Pool().QueryRow(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint,
		pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint`).Scan(&u.xid, &u.walBytes)
	return u, err
}

// findPostmaster returns the pid of the server's postmaster if it runs on
// this host: the parent of our backend, when that is a postgres process.
func findPostmaster(ctx context.Context, st *store.Store) int {
	var backend int
	if err := st.Pool().QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&backend); err != nil {
		return 0
	}
	comm, ppid, _, ok := procStat(backend)
	if !ok || comm != "postgres" {
		return 0
	}
	if comm, _, _, ok := procStat(ppid); !ok || comm != "postgres" {
		return 0
	}
	return ppid
}

// procStat reads a process's name, parent and CPU fields (utime, stime,
// cutime, cstime in seconds).
func procStat(pid int) (comm string, ppid int, cpu [4]float64, ok bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return "", 0, cpu, false
	}
	s := string(b)
	open, closeP := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closeP < open {
		return "", 0, cpu, false
	}
	f := strings.Fields(s[closeP+1:])
	// After the comm: state(0) ppid(1) ... utime(11) stime(12) cutime(13) cstime(14).
	if len(f) < 15 {
		return "", 0, cpu, false
	}
	ppid, _ = strconv.Atoi(f[1])
	for i := range cpu {
		cpu[i], _ = strconv.ParseFloat(f[11+i], 64)
		cpu[i] /= clkTck
	}
	return s[open+1 : closeP], ppid, cpu, true
}

// serverCPU is the CPU time of one PostgreSQL server: its postmaster
// (including, as children times, backends that exited) and its live
// children.
func serverCPU(postmaster int) time.Duration {
	_, _, pm, ok := procStat(postmaster)
	if !ok {
		return 0
	}
	total := pm[0] + pm[1] + pm[2] + pm[3]
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if _, ppid, c, ok := procStat(pid); ok && ppid == postmaster {
			total += c[0] + c[1]
		}
	}
	return time.Duration(total * float64(time.Second))
}

type delta struct {
	wall           time.Duration
	self, kids, pg time.Duration
	// upkeep is the part of the CPU above (all of it PostgreSQL's, but for
	// the VACUUM and CHECKPOINT requests of this process) spent by settle
	// after the phase; upkeepWAL the WAL it wrote (in walBytes too).
	upkeep                    time.Duration
	upkeepWAL                 int64
	machine                   cpuTimes
	txns, walBytes            int64
	sends, updates, turns, ex int64
	alloc, gcs                uint64
}

func diff(a, b usage) delta {
	return delta{wall: b.at.Sub(a.at), self: b.self - a.self, kids: b.kids - a.kids, pg: b.pg - a.pg,
		machine: cpuTimes{busy: b.machine.busy - a.machine.busy, idle: b.machine.idle - a.machine.idle, steal: b.machine.steal - a.machine.steal},
		txns:    b.xid - a.xid, walBytes: b.walBytes - a.walBytes, sends: b.sends - a.sends, updates: b.updates - a.updates,
		turns: b.turnsDone - a.turnsDone, ex: b.execRun - a.execRun, alloc: b.alloc - a.alloc, gcs: b.gcs - a.gcs}
}

// ---------------------------------------------------------------------------
// The run.

type harness struct {
	o      options
	eng    *gateway.Gateway
	st     *store.Store
	ch     *nullChannel
	tr     *tracker
	ex     *execTracker
	sm     *sampler
	run    string // prefix of event ids
	events atomic.Int64
	errs   atomic.Int64 // engine errors logged
	fails  atomic.Int64 // Deliver errors
	dsn    string       // the database (the gateway phases make theirs next to it)
	tmp    string       // this run's temporary directory
}

func (h *harness) conv(i int) core.ConversationID {
	return core.ConversationID(fmt.Sprintf("%s:c%04d", channel, i%h.o.convs))
}

func (h *harness) sender(i int) core.IdentityID {
	return core.IdentityID(fmt.Sprintf("load:u%04d", i%h.o.convs))
}

func (h *harness) textTurn(i int) core.Turn {
	return core.Turn{Channel: channel, Conversation: h.conv(i), Sender: h.sender(i),
		EventID: h.eventID("t"), Text: "hello, what can you do?",
		Evidence: core.Evidence{Authenticated: true, Method: "load"}}
}

// eventID is unique across runs too (DATABASE_URL may be reused).
func (h *harness) eventID(kind string) string {
	return h.run + kind + strconv.FormatInt(h.events.Add(1), 10)
}

// deliver sends one turn and registers it with the tracker.
func (h *harness) deliver(ctx context.Context, t core.Turn, start int64, rec *recorder) (int64, <-chan struct{}, error) {
	res, err := h.eng.Deliver(ctx, t)
	if err != nil {
		h.fails.Add(1)
		return 0, nil, err
	}
	if res.Duplicate {
		h.fails.Add(1)
		return 0, nil, fmt.Errorf("event %s reported as duplicate", t.EventID)
	}
	return res.Seq, h.tr.begin(res.Seq, start, rec), nil
}

type result struct {
	name  string
	value string
	note  string
}

func load(ctx context.Context, o options) error {
	// Under `go run` argv[0] is a temporary path: show the command's name.
	cmdline := strings.Join(append([]string{"silas-load"}, os.Args[1:]...), " ")
	machine := machineInfo()

	tmp, err := os.MkdirTemp("", "silas-load-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	// Searchable (not listable) by others: as root, the cluster in tmp/pg
	// runs as the postgres user, which must reach it.
	if err := os.Chmod(tmp, 0o711); err != nil {
		return err
	}

	h := &harness{o: o, run: core.NewID()[:8] + "-", ch: &nullChannel{}, tr: newTracker(), ex: &execTracker{sched: map[core.ApprovalID]int64{}, started: map[core.ApprovalID]int64{}}}
	// Engine errors are printed and counted (they fail the run); -v adds
	// warnings.
	level := slog.LevelError
	if o.verbose {
		level = slog.LevelWarn
	}
	logger := slog.New(errorCounter{next: slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}), level: level, errors: &h.errs})

	dsn := os.Getenv("DATABASE_URL")
	dbWhere := "DATABASE_URL"
	if dsn == "" {
		progress("starting a throwaway PostgreSQL cluster in %s (durable: %v)", tmp, !o.noSync)
		c, err := pgcluster.Start(ctx, pgcluster.Options{Dir: filepath.Join(tmp, "pg"), NoSync: o.noSync, Logger: nil})
		if err != nil {
			return err
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := c.Stop(sctx); err != nil {
				fmt.Fprintf(os.Stderr, "silas-load: stop cluster: %v\n", err)
			}
		}()
		dsn = c.DSN()
		dbWhere = "throwaway cluster (internal/pgcluster) on " + fsType(tmp)
	} else if o.noSync {
		return errors.New("--nosync applies to the throwaway cluster only; unset DATABASE_URL")
	}

	tr, traced, stopTracing, err := startTracing(ctx, o, logger)
	if err != nil {
		return err
	}
	defer stopTracing()
	st, err := store.Open(ctx, dsn, store.Options{Logger: logger, MaxConns: int32(o.maxConns), MaxBatch: o.maxBatch, Writers: o.writers, LazyDelay: o.lazyDelay,
		QueryTracer: tr.QueryTracer()})
	if err != nil {
		return err
	}
	defer st.Close()
	if _, err := st.Migrate(ctx); err != nil {
		return err
	}
	h.st, h.dsn, h.tmp = st, dsn, tmp
	var pgVersion, fsync, syncCommit string
	if err := st.Pool().QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('fsync'), current_setting('synchronous_commit')`).
		Scan(&pgVersion, &fsync, &syncCommit); err != nil {
		return err
	}
	durability := fmt.Sprintf("fsync=%s synchronous_commit=%s", fsync, syncCommit)
	if fsync == "on" && syncCommit == "on" {
		durability = "durable commits (" + durability + ")"
	} else {
		durability = "NOT DURABLE (" + durability + "): for comparison only"
	}

	sb, err := sandbox.New(sandbox.Config{BaseDir: filepath.Join(tmp, "sandbox")})
	if err != nil {
		return err
	}
	pol, err := policy.New(nil)
	if err != nil {
		return err
	}
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	allowed := make([]core.IdentityID, o.convs)
	for i := range allowed {
		allowed[i] = h.sender(i)
	}
	eng, err := gateway.New(gateway.Config{
		Store: st, Channels: []core.Channel{h.ch}, Agent: agent.Command{}, Sandbox: sb,
		Verifier: &verify.Runner{Commands: execute.SandboxChecks{Sandbox: sb}, AllowedDirs: []string{filepath.Join(tmp, "sandbox")}},
		Policy:   pol, Key: key, Owners: []core.IdentityID{owner}, Allowed: allowed, Workers: o.workers, Logger: logger,
		Hooks: engine.Hooks{TurnDone: h.tr.turnDone, ExecutionStarted: h.ex.executionStarted},
	})
	if err != nil {
		return err
	}
	h.eng = eng
	runCtx, stopEngine := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- eng.Run(runCtx, 30*time.Second) }()
	engineStopped := false
	shutdown := func() error {
		if engineStopped {
			return nil
		}
		engineStopped = true
		stopEngine()
		return <-runDone
	}
	defer shutdown() //nolint:errcheck // the error path already reports
	select {
	case <-eng.Ready():
	case err := <-runDone:
		engineStopped = true
		return fmt.Errorf("engine stopped at start: %v", err)
	case <-ctx.Done():
		return ctx.Err()
	}

	h.sm = &sampler{st: st, ch: h.ch, tr: h.tr, ex: h.ex, sb: sb, postmaster: findPostmaster(ctx, st)}

	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}

	if o.memProfile != "" || o.tapMemProfile != "" {
		// One sample per 4 kB allocated instead of 512 kB: enough samples
		// in a 6 s phase to rank the allocation sites of a turn, at a cost
		// that leaves the run's figures close to an unprofiled run's.
		runtime.MemProfileRate = 4096
	}
	if o.memProfile != "" {
		defer func() {
			if err := writeHeapProfile(o.memProfile); err != nil {
				fmt.Fprintf(os.Stderr, "silas-load: %v\n", err)
			}
		}()
	}

	rep := &report{cmdline: cmdline, machine: machine,
		postgres: fmt.Sprintf("%s, %s, %s", pgVersion, dbWhere, durability),
		engine: fmt.Sprintf("store pool %d conns, maxbatch %s, workers %s, %d conversations, null channel, command agent, subprocess sandbox, tracing %s",
			o.maxConns, orDefault(o.maxBatch), orDefault(o.workers), o.convs, traced)}
	runErr := h.phases(ctx, rep)
	if err := shutdown(); err != nil && runErr == nil {
		runErr = fmt.Errorf("engine: %w", err)
	}
	rep.print(h)
	if runErr != nil {
		return runErr
	}
	if n := h.errs.Load(); n > 0 {
		return fmt.Errorf("the engine logged %d error(s)", n)
	}
	return nil
}

// startTracing turns tracing on as serve does when --trace-sampling is
// set: spans to a no-op exporter, or with --trace-otlp over OTLP/HTTP to a
// collector in this process that reads and discards each export. traced
// says which, for the report; stop exports what is queued and stops.
func startTracing(ctx context.Context, o options, logger *slog.Logger) (tr *telemetry.Tracing, traced string, stop func(), err error) {
	if o.sampling <= 0 {
		if o.otlp {
			return nil, "", nil, errors.New("--trace-otlp needs --trace-sampling")
		}
		return nil, "off", func() {}, nil
	}
	cfg := telemetry.Config{SamplingRatePerMillion: o.sampling, Exporter: tracetest.NewNoopExporter(), Env: os.Environ()}
	traced = fmt.Sprintf("%d per million, spans exported nowhere", o.sampling)
	closeSink := func() {}
	if o.otlp {
		sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/x-protobuf")
		}))
		closeSink = sink.Close
		cfg.Exporter, cfg.ExporterURL = nil, sink.URL
		traced = fmt.Sprintf("%d per million, OTLP/HTTP to a discarding collector in this process", o.sampling)
	}
	if tr, err = telemetry.Start(ctx, cfg, logger); err != nil {
		closeSink()
		return nil, "", nil, err
	}
	return tr, traced, func() { _ = tr.Shutdown(context.Background()); closeSink() }, nil
}

// writeHeapProfile writes the allocation profile (all allocations since
// MemProfileRate was set) to path.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC() // the profile is as of the last GC
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return fmt.Errorf("memprofile: %w", err)
	}
	return f.Close()
}

// report collects the figures of the phases that ran.
type report struct {
	cmdline, machine, postgres, engine string
	rows                               []result
	resources                          []resRow
	missed, warnings                   []string
	sum                                summary
}

// summary holds the figures issue 26 asks for, printed together at the
// end (printSummary) so that rounds compare like with like.
type summary struct {
	tps          float64
	turns        int64
	closed, exec delta
	execN        int64
	tap, burst   dist
	gw, llm      gatewayResult
	ref          []refResult // --reference, in the order measured
}

func (r *report) add(name, value, note string) { r.rows = append(r.rows, result{name, value, note}) }

// phases runs warm-up, (a), (c) and (b) — the open loop last, since an
// overloaded pipeline leaves a backlog behind it.
func (h *harness) phases(ctx context.Context, rep *report) error {
	o := h.o
	if o.warmup > 0 {
		progress("warm-up: %s closed loop, %d senders", o.warmup, o.concurrency)
		if _, err := h.closedLoop(ctx, o.warmup, o.concurrency); err != nil {
			return err
		}
		if _, _, err := h.drain(ctx); err != nil {
			return err
		}
		// The warm-up's upkeep is nobody's: not reported.
		if _, err := h.settle(ctx); err != nil {
			return err
		}
	}
	if err := h.phaseClosed(ctx, rep); err != nil {
		return err
	}
	if o.approvals > 0 {
		if err := h.phaseApprovals(ctx, rep); err != nil {
			return err
		}
		if o.reference && o.referenceN > 0 {
			if err := h.phaseReference(ctx, rep); err != nil {
				return err
			}
		}
	}
	if o.openDuration > 0 {
		if err := h.phaseOpen(ctx, rep); err != nil {
			return err
		}
	}
	rep.add("(d) token mint+verify/s", "see BenchmarkMintCheck", "go test -bench MintCheck ./core/approval")
	if o.silasBin != "" && o.chats > 0 {
		for _, kind := range strings.Split(o.gateways, ",") {
			if kind != "command" && kind != "llm" {
				return fmt.Errorf("--gateways: %q is neither command nor llm", kind)
			}
			g, err := h.phaseGateway(ctx, h.dsn, kind)
			if err != nil {
				return fmt.Errorf("(%s) gateway: %w", phaseLetter(kind), err)
			}
			rep.gatewayRows(g)
			if kind == "llm" {
				rep.sum.llm = g
			} else {
				rep.sum.gw = g
			}
		}
	}
	return nil
}

// drainAfter waits for the outbox after a phase and reports how long it
// took, or that it did not finish (a finding, not an error).
func (h *harness) drainAfter(ctx context.Context, rep *report, phase string) (string, error) {
	backlog, _ := h.outboxBacklog(ctx)
	took, left, err := h.drain(ctx)
	if err != nil {
		return "", err
	}
	if left > 0 {
		w := fmt.Sprintf("outbox backlog after %s: %d jobs, %d still pending after waiting %s", phase, backlog, left, h.o.drainTimeout)
		rep.warnings = append(rep.warnings, w)
		return fmt.Sprintf("backlog at end %d jobs, NOT drained in %s (%d left)", backlog, h.o.drainTimeout, left), nil
	}
	return fmt.Sprintf("backlog at end %d jobs, drained in %s", backlog, took.Round(time.Millisecond)), nil
}

func (h *harness) phaseClosed(ctx context.Context, rep *report) error {
	o := h.o
	progress("(a) closed loop: %s, %d senders over %d conversations", o.duration, o.concurrency, o.convs)
	u0, err := h.sm.sample(ctx)
	if err != nil {
		return err
	}
	var traceOut *os.File
	if o.traceFile != "" {
		if traceOut, err = os.Create(o.traceFile); err != nil {
			return err
		}
		if err := trace.Start(traceOut); err != nil {
			return err
		}
	}
	cl, err := h.closedLoop(ctx, o.duration, o.concurrency)
	if traceOut != nil {
		trace.Stop()
		traceOut.Close()
	}
	if err != nil {
		return err
	}
	u1, err := h.sm.sample(ctx)
	if err != nil {
		return err
	}
	d := diff(u0, u1)
	drained, err := h.drainAfter(ctx, rep, "(a)")
	if err != nil {
		return err
	}
	if d, err = h.settleInto(ctx, d); err != nil {
		return err
	}
	tps := float64(cl.turns) / cl.wall.Seconds()
	rep.add("(a) turns/s sustained, closed loop (intake → agent → reply enqueued)", fmt.Sprintf("%.0f", tps),
		fmt.Sprintf("%d turns in %s, %d senders; target ≥ %d: %s", cl.turns, cl.wall.Round(time.Millisecond), o.concurrency, targetTurnsPerSec, met(tps >= targetTurnsPerSec)))
	rep.add("    closed-loop turn latency p50 / p99", fmt.Sprintf("%s / %s", ms(cl.lat.p50), ms(cl.lat.p99)), fmt.Sprintf("at %d in flight", o.concurrency))
	rep.add("    replies delivered by the outbox during (a)", fmt.Sprintf("%.0f/s", float64(d.sends)/d.wall.Seconds()), drained)
	if h.sm.postmaster != 0 && d.turns > 0 {
		perTurn := (d.self + d.kids + d.pg) / time.Duration(d.turns)
		rep.add("    CPU per turn (Go + postgres) → CPU-bound ceiling", fmt.Sprintf("%s → %.0f turns/s", ms(perTurn), float64(runtime.NumCPU())/perTurn.Seconds()),
			fmt.Sprintf("if this run had all %d CPUs (others used %.0f%%)", runtime.NumCPU(), 100*max(0, d.machine.busy-(d.self+d.kids+d.pg).Seconds())/(float64(runtime.NumCPU())*d.wall.Seconds())))
	}
	if tps < targetTurnsPerSec {
		rep.missed = append(rep.missed, fmt.Sprintf("(a) %.0f turns/s < %d", tps, targetTurnsPerSec))
	}
	rep.resources = append(rep.resources, resRow{"(a) closed loop", d, d.turns})
	rep.sum.tps, rep.sum.turns, rep.sum.closed = tps, d.turns, d
	return nil
}

func (h *harness) phaseApprovals(ctx context.Context, rep *report) error {
	o := h.o
	progress("(c) approvals: %d `/run echo x` cards, then taps at %.0f/s", o.approvals, o.tapRate)
	taps, d, err := h.approvalRound(ctx, rep, o.approvals, o.tapRate, "(c)")
	if err != nil {
		return err
	}
	rep.sum.tap, rep.sum.exec, rep.sum.execN = taps, d, int64(o.approvals)
	if o.burst == 0 {
		return nil
	}
	progress("(c) burst: %d more cards, tapped all at once", o.burst)
	burst, _, err := h.approvalRound(ctx, rep, o.burst, math.Inf(1), "(c) burst")
	if err != nil {
		return err
	}
	rep.sum.burst = burst
	return nil
}

// startTapProfiles starts --tap-cpuprofile and writes --tap-memprofile's
// base before (c)'s taps; the function it returns stops the one and
// writes the other after them. Other rounds (the burst) are not profiled.
func (h *harness) startTapProfiles(label string) (stop func() error, err error) {
	stop = func() error { return nil }
	if label != "(c)" {
		return stop, nil
	}
	o := h.o
	if o.tapMemProfile != "" {
		if err := writeHeapProfile(o.tapMemProfile + ".base"); err != nil {
			return nil, err
		}
	}
	var f *os.File
	if o.tapCPUProfile != "" {
		if f, err = os.Create(o.tapCPUProfile); err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, fmt.Errorf("tap-cpuprofile (not with --cpuprofile): %w", err)
		}
	}
	return func() error {
		if f != nil {
			pprof.StopCPUProfile()
			if err := f.Close(); err != nil {
				return err
			}
		}
		if o.tapMemProfile != "" {
			return writeHeapProfile(o.tapMemProfile)
		}
		return nil
	}, nil
}

// approvalRound creates n `/run echo x` cards, taps them at rate taps/s
// (+Inf: all at once) and waits for their executions to be verified; it
// reports tap → execution start and the resources of tap → verified.
func (h *harness) approvalRound(ctx context.Context, rep *report, n int, rate float64, label string) (dist, delta, error) {
	u0, err := h.sm.sample(ctx)
	if err != nil {
		return dist{}, delta{}, err
	}
	cardRate, seqs, err := h.createCards(ctx, n)
	if err != nil {
		return dist{}, delta{}, err
	}
	u1, err := h.sm.sample(ctx)
	if err != nil {
		return dist{}, delta{}, err
	}
	if _, err := h.drainAfter(ctx, rep, "the /run turns"); err != nil {
		return dist{}, delta{}, err
	}
	cards, err := h.settleInto(ctx, diff(u0, u1))
	if err != nil {
		return dist{}, delta{}, err
	}
	rep.resources = append(rep.resources, resRow{label + " /run → card", cards, int64(n)})
	stopProfiles, err := h.startTapProfiles(label)
	if err != nil {
		return dist{}, delta{}, err
	}
	u2, err := h.sm.sample(ctx)
	if err != nil {
		return dist{}, delta{}, err
	}
	taps, err := h.tapAll(ctx, rate, seqs)
	if err != nil {
		return dist{}, delta{}, err
	}
	finished, err := h.waitExecutions(ctx, seqs)
	if err != nil {
		return dist{}, delta{}, err
	}
	if err := stopProfiles(); err != nil {
		return dist{}, delta{}, err
	}
	u3, err := h.sm.sample(ctx)
	if err != nil {
		return dist{}, delta{}, err
	}
	if _, err := h.drainAfter(ctx, rep, "the taps"); err != nil {
		return dist{}, delta{}, err
	}
	d, err := h.settleInto(ctx, diff(u2, u3))
	if err != nil {
		return dist{}, delta{}, err
	}
	rep.resources = append(rep.resources, resRow{label + " tap → verified", d, int64(n)})
	how := fmt.Sprintf("%d taps at %.0f/s", taps.n, rate)
	if math.IsInf(rate, 1) {
		how = fmt.Sprintf("%d taps at once", taps.n)
	}
	withDecision, err := h.claimedWithDecision(ctx, seqs)
	if err != nil {
		return dist{}, delta{}, err
	}
	rep.add(label+" approval tap → execution start: p50 / p99 / max", fmt.Sprintf("%s / %s / %s", ms(taps.p50), ms(taps.p99), ms(taps.max)),
		fmt.Sprintf("%s; %d executions verified, %d claimed with their decision", how, finished, withDecision))
	dec := h.ex.decided.dist()
	rep.add("    of which tap → decision committed: p50 / p99 / max", fmt.Sprintf("%s / %s / %s", ms(dec.p50), ms(dec.p99), ms(dec.max)),
		"the tap's transaction; the rest is a claim's own, if any")
	if disk, err := fsyncLatency(h.tmp, 500*time.Millisecond); err == nil {
		rep.add("    this disk now: 8 kB write + fdatasync p50 / p99 / max", fmt.Sprintf("%s / %s / %s", ms(disk.p50), ms(disk.p99), ms(disk.max)),
			fmt.Sprintf("%d syncs in %s after the round, beside %s (each tap waits for its commits)", disk.n, 500*time.Millisecond, filepath.Join(h.tmp, "pg")))
	}
	rep.add("    /run turns/s (card creation)", fmt.Sprintf("%.0f", cardRate), fmt.Sprintf("%d cards, %d senders", n, min(h.o.concurrency, n)))
	return taps, d, nil
}

func (h *harness) phaseOpen(ctx context.Context, rep *report) error {
	o := h.o
	progress("(b) open loop: %.0f turns/s for %s", o.rate, o.openDuration)
	u0, err := h.sm.sample(ctx)
	if err != nil {
		return err
	}
	ol, err := h.openLoop(ctx, o.rate, o.openDuration)
	if err != nil {
		return err
	}
	u1, err := h.sm.sample(ctx)
	if err != nil {
		return err
	}
	d := diff(u0, u1)
	drained, err := h.drainAfter(ctx, rep, "(b)")
	if err != nil {
		return err
	}
	if d, err = h.settleInto(ctx, d); err != nil {
		return err
	}
	rep.add(fmt.Sprintf("(b) latency at %.0f turns/s offered: p50 / p90 / p99 / max", o.rate),
		fmt.Sprintf("%s / %s / %s / %s", ms(ol.lat.p50), ms(ol.lat.p90), ms(ol.lat.p99), ms(ol.lat.max)),
		fmt.Sprintf("%d turns; target p99 ≤ %s: %s", ol.lat.n, ms(targetP99), met(ol.lat.p99 <= targetP99)))
	rep.add("    achieved rate: offered / completed", fmt.Sprintf("%.0f / %.0f turns/s", ol.offered, ol.completed),
		fmt.Sprintf("scheduler lag max %s", ms(ol.maxLag)))
	rep.add("    intake only (Deliver returned): p50 / p99", fmt.Sprintf("%s / %s", ms(ol.intake.p50), ms(ol.intake.p99)), "turn stored durably")
	rep.add("    replies delivered by the outbox during (b)", fmt.Sprintf("%.0f/s", float64(d.sends)/d.wall.Seconds()), drained)
	if ol.lat.p99 > targetP99 {
		rep.missed = append(rep.missed, fmt.Sprintf("(b) p99 %s > %s", ms(ol.lat.p99), ms(targetP99)))
	}
	rep.resources = append(rep.resources, resRow{"(b) open loop", d, d.turns})
	return nil
}

func (r *report) print(h *harness) {
	fmt.Println()
	fmt.Println("silas-load results")
	fmt.Printf("  command:    %s\n", r.cmdline)
	fmt.Printf("  machine:    %s\n", r.machine)
	fmt.Printf("  postgres:   %s\n", r.postgres)
	fmt.Printf("  engine:     %s\n", r.engine)
	fmt.Println()
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	for _, row := range r.rows {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", row.name, row.value, row.note)
	}
	tw.Flush()
	fmt.Println()
	fmt.Println("  resources per turn: CPU µs of this process (Go), its sandbox children and the PostgreSQL server; txns = write transactions;")
	fmt.Println("  machine = all CPUs busy (any process), others = CPU used by processes outside this benchmark, steal = taken by the hypervisor;")
	fmt.Println("  alloc = kB this process allocated per turn, turns/GC = turns per garbage collection (runtime/metrics);")
	fmt.Println("  of it upkeep = the part of the CPU (nearly all PostgreSQL's) spent vacuuming what the phase changed, after it (--upkeep)")
	tw = tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "  phase\tturns\tGo µs\talloc kB\tturns/GC\tsandbox µs\tpostgres µs\tof it upkeep\ttxns/turn\tturns/txn\tWAL B/turn\tmachine\tothers\tsteal\t\n")
	for _, res := range r.resources {
		n := float64(max(res.turns, 1))
		per := func(d time.Duration) string { return fmt.Sprintf("%.0f", float64(d.Microseconds())/n) }
		tpt := "-"
		if res.d.txns > 0 {
			tpt = fmt.Sprintf("%.1f", n/float64(res.d.txns))
		}
		cpus := float64(runtime.NumCPU()) * res.d.wall.Seconds()
		pct := func(sec float64) string { return fmt.Sprintf("%.0f%%", 100*sec/cpus) }
		ours := (res.d.self + res.d.kids + res.d.pg).Seconds()
		pgCPU := per(res.d.pg)
		if h.sm == nil || h.sm.postmaster == 0 {
			pgCPU = "n/a"
		}
		allocPer, perGC := fmt.Sprintf("%.1f", float64(res.d.alloc)/1024/n), "-"
		if res.d.gcs > 0 {
			perGC = fmt.Sprintf("%.0f", n/float64(res.d.gcs))
		}
		fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%.2f\t%s\t%.0f\t%s\t%s\t%s\t\n", res.name, res.turns, per(res.d.self), allocPer, perGC, per(res.d.kids), pgCPU, per(res.d.upkeep),
			float64(res.d.txns)/n, tpt, float64(res.d.walBytes)/n, pct(res.d.machine.busy), pct(max(0, res.d.machine.busy-ours)), pct(res.d.machine.steal))
	}
	tw.Flush()
	fmt.Printf("  channel: %d sends, %d edits; engine errors logged: %d; failed delivers: %d\n",
		h.ch.sends.Load(), h.ch.updates.Load(), h.errs.Load(), h.fails.Load())
	for _, w := range r.warnings {
		fmt.Printf("  WARNING: %s\n", w)
	}
	r.printSummary(h)
	switch {
	case len(r.rows) == 0:
		fmt.Println("  no phase completed")
	case len(r.missed) > 0:
		fmt.Printf("  targets missed: %s\n", strings.Join(r.missed, "; "))
	default:
		fmt.Println("  targets met")
	}
}

type resRow struct {
	name  string
	d     delta
	turns int64
}

func orDefault(n int) string {
	if n == 0 {
		return "default"
	}
	return strconv.Itoa(n)
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

func progress(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "silas-load: "+format+"\n", a...)
}

type closedResult struct {
	turns int64
	wall  time.Duration
	lat   dist
}

// closedLoop runs c senders for d; each waits for its turn's TurnDone
// before sending the next. Sender i uses conversations i, i+c, i+2c, … so a
// conversation never has two turns in flight.
func (h *harness) closedLoop(ctx context.Context, d time.Duration, c int) (closedResult, error) {
	var rec recorder
	var wg sync.WaitGroup
	var firstErr error
	var errOnce sync.Once
	var turns atomic.Int64
	start := time.Now()
	deadline := start.Add(d)
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	convsPer := max(1, h.o.convs/c)
	for s := range c {
		wg.Go(func() {
			for k := 0; time.Now().Before(deadline) && lctx.Err() == nil; k++ {
				i := s + (k%convsPer)*c
				t0 := nowNS()
				_, done, err := h.deliver(lctx, h.textTurn(i), t0, &rec)
				if err != nil {
					errOnce.Do(func() { firstErr = err; cancel() })
					return
				}
				select {
				case <-done:
					turns.Add(1)
				case <-time.After(h.o.timeout):
					errOnce.Do(func() { firstErr = fmt.Errorf("a turn did not complete within %s", h.o.timeout); cancel() })
					return
				case <-lctx.Done():
					return
				}
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	if firstErr == nil && ctx.Err() != nil {
		firstErr = ctx.Err()
	}
	return closedResult{turns: turns.Load(), wall: wall, lat: rec.dist()}, firstErr
}

type openResult struct {
	lat, intake        dist
	offered, completed float64
	maxLag             time.Duration
}

// openLoop offers turns at rate for d, each sent at its scheduled time (or
// at once when the scheduler is behind), without waiting for earlier ones.
// Latency runs from the scheduled time.
func (h *harness) openLoop(ctx context.Context, rate float64, d time.Duration) (openResult, error) {
	var rec, intake recorder
	n := int(rate * d.Seconds())
	interval := time.Duration(float64(time.Second) / rate)
	var wg sync.WaitGroup
	var failed atomic.Int64
	var firstErr atomic.Value
	dones := make([]<-chan struct{}, n)
	var maxLag time.Duration
	start := nowNS() + int64(10*time.Millisecond)
	for i := range n {
		sched := start + int64(i)*int64(interval)
		if wait := time.Duration(sched - nowNS()); wait > 0 {
			time.Sleep(wait)
		}
		if lag := time.Duration(nowNS() - sched); lag > maxLag {
			maxLag = lag
		}
		if ctx.Err() != nil {
			return openResult{}, ctx.Err()
		}
		wg.Go(func() {
			_, done, err := h.deliver(ctx, h.textTurn(i), sched, &rec)
			if err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err)
				return
			}
			intake.add(time.Duration(nowNS() - sched))
			dones[i] = done
		})
	}
	sentAt := nowNS()
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return openResult{}, fmt.Errorf("%d of %d delivers failed: %w", failed.Load(), n, err)
	}
	timeout := time.After(h.o.timeout)
	for _, c := range dones {
		select {
		case <-c:
		case <-timeout:
			return openResult{}, fmt.Errorf("open loop: turns still unfinished %s after the last send", h.o.timeout)
		case <-ctx.Done():
			return openResult{}, ctx.Err()
		}
	}
	lastDone := nowNS()
	return openResult{
		lat: rec.dist(), intake: intake.dist(), maxLag: maxLag,
		offered:   float64(n) / (float64(sentAt-start) / 1e9),
		completed: float64(n) / (float64(lastDone-start) / 1e9),
	}, nil
}

// createCards sends n `/run echo x` turns from the owner, one per
// conversation in turn, and returns the rate at which they completed and
// the turns' seqs.
func (h *harness) createCards(ctx context.Context, n int) (float64, []int64, error) {
	c := min(h.o.concurrency, n)
	seqs := make([]int64, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Value
	start := time.Now()
	for range c {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				t := core.Turn{Channel: channel, Conversation: h.conv(i), Sender: owner,
					EventID: h.eventID("r"), Text: "/run echo x",
					Evidence: core.Evidence{Authenticated: true, Method: "load"}}
				seq, done, err := h.deliver(ctx, t, nowNS(), nil)
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				seqs[i] = seq
				select {
				case <-done:
				case <-time.After(h.o.timeout):
					firstErr.CompareAndSwap(nil, fmt.Errorf("a /run turn did not complete within %s", h.o.timeout))
					return
				case <-ctx.Done():
					return
				}
			}
		})
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return 0, nil, err
	}
	return float64(n) / time.Since(start).Seconds(), seqs, ctx.Err()
}

// tapAll approves every pending card at rate taps/s and returns tap →
// execution start latencies.
func (h *harness) tapAll(ctx context.Context, rate float64, seqs []int64) (dist, error) {
	rows, err := h.st.Pool().Query(ctx, `SELECT id, conversation FROM approvals WHERE status = 'pending' AND turn_seq = ANY($1) ORDER BY created_at`, seqs)
	if err != nil {
		return dist{}, err
	}
	type card struct {
		id   core.ApprovalID
		conv core.ConversationID
	}
	var list []card
	for rows.Next() {
		var c card
		if err := rows.Scan(&c.id, &c.conv); err != nil {
			return dist{}, err
		}
		list = append(list, c)
	}
	if err := rows.Err(); err != nil {
		return dist{}, err
	}
	if len(list) != len(seqs) {
		return dist{}, fmt.Errorf("found %d pending approvals, want %d", len(list), len(seqs))
	}
	h.ex.rec.reset()
	h.ex.decided.reset()
	interval := time.Duration(float64(time.Second) / rate) // 0: all at once
	start := nowNS() + int64(10*time.Millisecond)
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for i, c := range list {
		sched := start + int64(i)*int64(interval)
		if wait := time.Duration(sched - nowNS()); wait > 0 {
			time.Sleep(wait)
		}
		wg.Go(func() {
			h.ex.tapped(c.id, sched)
			t := core.Turn{Channel: channel, Conversation: c.conv, Sender: owner,
				EventID: h.eventID("a"), Tap: &core.Tap{Card: cards.ID(c.id), Choice: "approve"},
				Evidence: core.Evidence{Authenticated: true, Method: "load"}}
			if _, _, err := h.deliver(ctx, t, sched, nil); err != nil {
				firstErr.CompareAndSwap(nil, err)
				return
			}
			h.ex.decided.add(time.Duration(nowNS() - sched))
		})
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return dist{}, err
	}
	deadline := time.Now().Add(h.o.timeout)
	for h.ex.rec.dist().n < len(list) {
		if time.Now().After(deadline) {
			return dist{}, fmt.Errorf("only %d of %d approved executions started within %s", h.ex.rec.dist().n, len(list), h.o.timeout)
		}
		if err := sleepCtx(ctx, 10*time.Millisecond); err != nil {
			return dist{}, err
		}
	}
	return h.ex.rec.dist(), nil
}

// fsyncLatency writes 8 kB and fdatasyncs it in a file under dir (the
// throwaway cluster's disk) every 2 ms for d: what one commit's WAL flush
// costs on this disk right now, whose outliers every commit on the tap's
// path pays too.
func fsyncLatency(dir string, d time.Duration) (dist, error) {
	f, err := os.CreateTemp(dir, "fsync-")
	if err != nil {
		return dist{}, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	var r recorder
	buf := make([]byte, 8192)
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		start := time.Now()
		if _, err := f.WriteAt(buf, 0); err != nil {
			return dist{}, err
		}
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			return dist{}, err
		}
		r.add(time.Since(start))
	}
	return r.dist(), nil
}

// waitExecutions waits until the executions of the approvals requested by
// the turns seqs are verified (or failed) and returns how many verified.
func (h *harness) waitExecutions(ctx context.Context, seqs []int64) (int, error) {
	n := len(seqs)
	deadline := time.Now().Add(h.o.timeout)
	for {
		var ok, total int
		if err := h.st.Pool().QueryRow(ctx, `SELECT count(*) FILTER (WHERE e.status = 'verified'),
			count(*) FILTER (WHERE e.status IN ('verified', 'failed', 'refused', 'interrupted'))
			FROM executions e JOIN approvals a ON a.id = e.approval_id WHERE a.turn_seq = ANY($1)`, seqs).
			Scan(&ok, &total); err != nil {
			return 0, err
		}
		if total >= n {
			if ok != total {
				return ok, fmt.Errorf("%d of %d executions did not verify", total-ok, total)
			}
			return ok, nil
		}
		if time.Now().After(deadline) {
			return ok, fmt.Errorf("only %d of %d executions finished within %s", total, n, h.o.timeout)
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return 0, err
		}
	}
}

// claimedWithDecision counts the executions of the approvals requested by
// the turns seqs whose start was written by their decision's transaction
// (issue 26: "execution.started" and "token.consumed" share an xmin).
func (h *harness) claimedWithDecision(ctx context.Context, seqs []int64) (int, error) {
	var n int
	err := h.st.Pool().QueryRow(ctx, `SELECT count(*) FROM approvals a
		JOIN audit_log s ON s.kind = 'execution.started' AND s.data->>'approval' = a.id
		JOIN audit_log c ON c.kind = 'token.consumed' AND c.data->>'approval' = a.id AND c.xmin::text = s.xmin::text
		WHERE a.turn_seq = ANY($1)`, seqs).Scan(&n)
	return n, err
}

func (h *harness) outboxBacklog(ctx context.Context) (int, error) {
	var n int
	err := h.st.Pool().QueryRow(ctx, `SELECT count(*) FROM outbox WHERE status = 'pending'`).Scan(&n)
	return n, err
}

// drain waits up to --drain-timeout until the outbox has delivered
// everything, so one phase's leftovers do not load the next; it returns how
// long that took and how many jobs were left.
func (h *harness) drain(ctx context.Context) (time.Duration, int, error) {
	start := time.Now()
	deadline := start.Add(h.o.drainTimeout)
	for {
		n, err := h.outboxBacklog(ctx)
		if err != nil {
			return 0, 0, err
		}
		if n == 0 || time.Now().After(deadline) {
			return time.Since(start), n, nil
		}
		if err := sleepCtx(ctx, 10*time.Millisecond); err != nil {
			return 0, 0, err
		}
	}
}

// settle does now the upkeep that the writes so far left to PostgreSQL's
// background workers, and returns what it cost: VACUUM of every table with
// dead or new rows since its last vacuum (the work autovacuum does for them
// sooner or later: pruning, index entries, the visibility map; PostgreSQL
// skips index passes when few rows died), ANALYZE of the tables past
// autovacuum's own analyze threshold (50 rows + 10 % changed: what it would
// analyze next). No CHECKPOINT: right after one, the first change to every
// page writes the whole page to the WAL again, so a checkpoint before each
// short phase would charge it the full-page images that a 5-minute
// checkpoint interval spreads over thousands of changes (27.9 instead of
// 13 kB of WAL per execution when we tried); and the checkpointer does not
// run during a default run (5 minutes, 1 GB of WAL). Without it the upkeep lands in whichever phase runs next, at autovacuum's
// whim: in stop 28, (a)'s 47,000 turns put 11.3 ms of PostgreSQL CPU on each
// of (c)'s executions (3.9 ms when (c) ran after a 1 s (a)), and its writes
// met the taps' commits. Each phase is charged its own upkeep instead
// (settleInto). The write transactions ANALYZE takes are not a phase's: they
// are left out of its count.
func (h *harness) settle(ctx context.Context) (delta, error) {
	if !h.o.upkeep {
		return delta{}, nil
	}
	u0, err := h.sm.sample(ctx)
	if err != nil {
		return delta{}, err
	}
	// A backend reports its table counts to the statistics PostgreSQL keeps
	// at most once a second, and an idle one only after 10 s: ask every idle
	// connection to flush now, so that the list below sees the whole phase.
	for _, c := range h.st.Pool().AcquireAllIdle(ctx) {
		_, err := c.Exec(ctx, `SELECT pg_stat_force_next_flush()`)
		c.Release()
		if err != nil {
			return delta{}, fmt.Errorf("upkeep: %w", err)
		}
	}
	rows, err := h.st.Pool().Query(ctx, `SELECT format($$%I.%I$$, s.schemaname, s.relname),
		s.n_dead_tup > 0 OR s.n_ins_since_vacuum > 0,
		s.n_mod_since_analyze > 50 + 0.1 * greatest(c.reltuples, 0)
		FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
		WHERE s.n_dead_tup > 0 OR s.n_ins_since_vacuum > 0 OR s.n_mod_since_analyze > 50 + 0.1 * greatest(c.reltuples, 0)
		ORDER BY 1`)
	if err != nil {
		return delta{}, fmt.Errorf("upkeep: %w", err)
	}
	type table struct {
		name            string
		vacuum, analyze bool
	}
	var tables []table
	for rows.Next() {
		var t table
		if err := rows.Scan(&t.name, &t.vacuum, &t.analyze); err != nil {
			rows.Close()
			return delta{}, fmt.Errorf("upkeep: %w", err)
		}
		tables = append(tables, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return delta{}, fmt.Errorf("upkeep: %w", err)
	}
	for _, t := range tables {
		what := "VACUUM"
		switch {
		case t.vacuum && t.analyze:
			what = "VACUUM (ANALYZE)"
		case t.analyze:
			what = "ANALYZE"
		}
		start := time.Now()
		if _, err := h.st.Pool().Exec(ctx, what+" "+t.name); err != nil {
			return delta{}, fmt.Errorf("upkeep: %s %s: %w", what, t.name, err)
		}
		if h.o.verbose {
			progress("upkeep: %s %s: %s", what, t.name, time.Since(start).Round(10*time.Microsecond))
		}
	}
	u1, err := h.sm.sample(ctx)
	if err != nil {
		return delta{}, err
	}
	return diff(u0, u1), nil
}

// settleInto settles after a phase and adds the upkeep's CPU, WAL and time
// to the phase's figures d (not its write transactions: see settle).
func (h *harness) settleInto(ctx context.Context, d delta) (delta, error) {
	up, err := h.settle(ctx)
	if err != nil {
		return d, err
	}
	d.wall += up.wall
	d.self += up.self
	d.kids += up.kids
	d.pg += up.pg
	d.machine.busy += up.machine.busy
	d.machine.idle += up.machine.idle
	d.machine.steal += up.machine.steal
	d.walBytes += up.walBytes
	d.upkeep += up.self + up.kids + up.pg
	d.upkeepWAL += up.walBytes
	return d, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ---------------------------------------------------------------------------
// Machine description.

func machineInfo() string {
	model := "unknown CPU"
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "MemTotal:" {
				kb, _ := strconv.ParseFloat(f[1], 64)
				mem = fmt.Sprintf(", %.0f GiB", kb/(1<<20))
			}
		}
	}
	kernel := ""
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = ", Linux " + strings.TrimSpace(string(b))
	}
	return fmt.Sprintf("nproc %d (GOMAXPROCS %d), %s%s%s, %s %s/%s", runtime.NumCPU(), runtime.GOMAXPROCS(0), model, mem, kernel,
		runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// fsType names the file system holding dir (fsync cost depends on it).
func fsType(dir string) string {
	var s syscall.Statfs_t
	if err := syscall.Statfs(dir, &s); err != nil {
		return "unknown file system"
	}
	switch s.Type {
	case 0xEF53:
		return "ext4"
	case 0x01021994:
		return "tmpfs (fsync is free: not representative)"
	case 0x58465342:
		return "xfs"
	case 0x9123683E:
		return "btrfs"
	case 0x794C7630:
		return "overlayfs"
	}
	return fmt.Sprintf("file system 0x%x", s.Type)
}

// printSummary prints issue 26's figures in one table, each with its
// target: what `make bench` reports for the next round to compare with.
func (r *report) printSummary(h *harness) {
	sm := r.sum
	pgOK := h.sm != nil && h.sm.postmaster != 0
	fmt.Println()
	fmt.Println("  issue 26 figures (one run; BENCHMARKS.md compares rounds):")
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  figure\tthis run\ttarget\t\n")
	row := func(name, value, target string, ok bool, known bool) {
		verdict := ": MISSED"
		switch {
		case !known:
			verdict = " (not measured here)"
		case ok:
			verdict = ": met"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s%s\t\n", name, value, target, verdict)
	}
	if sm.execN > 0 {
		n := time.Duration(sm.execN)
		total := (sm.exec.self + sm.exec.kids + sm.exec.pg) / n
		pg := "n/a"
		if pgOK {
			pg = ms(sm.exec.pg / n)
		}
		row("1. CPU per execution, tap → verified (Go + sandbox + postgres)",
			fmt.Sprintf("%s (%s + %s + %s)", ms(total), ms(sm.exec.self/n), ms(sm.exec.kids/n), pg), "≤ 5 ms", total <= 5*time.Millisecond, pgOK)
		txns := float64(sm.exec.txns) / float64(sm.execN)
		row("   write transactions per execution (incl. delivery marks)", fmt.Sprintf("%.2f", txns), "≤ 3", txns <= 3, true)
		fmt.Fprintf(tw, "  %s\t%s\t%s\t\n", "   WAL per execution", fmt.Sprintf("%.0f B", float64(sm.exec.walBytes)/float64(sm.execN)), "reported")
		for _, r := range sm.ref {
			v := ms(r.total())
			if r.skipped != "" {
				v = "skipped"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t\n", "   reference now, per step: "+r.name, v, "reported")
		}
	}
	if sm.tap.n > 0 {
		row(fmt.Sprintf("2. tap → execution start p50 / p99 at %.0f taps/s", h.o.tapRate), fmt.Sprintf("%s / %s", ms(sm.tap.p50), ms(sm.tap.p99)),
			"p99 ≤ 10 ms", sm.tap.p99 <= 10*time.Millisecond, true)
	}
	if sm.burst.n > 0 {
		row(fmt.Sprintf("   the same, %d taps at once", sm.burst.n), fmt.Sprintf("%s / %s", ms(sm.burst.p50), ms(sm.burst.p99)),
			"p99 ≤ 10 ms", sm.burst.p99 <= 10*time.Millisecond, true)
	}
	if sm.turns > 0 {
		per := (sm.closed.self + sm.closed.kids + sm.closed.pg) / time.Duration(sm.turns)
		row("3. CPU per text turn (Go + postgres), closed loop", ms(per), "≤ 0.25 ms", per <= 250*time.Microsecond, pgOK)
		row("   closed-loop turns/s", fmt.Sprintf("%.0f", sm.tps), "≥ 6,000", sm.tps >= 6000, true)
	}
	if g := sm.gw; g.answered > 0 {
		row(fmt.Sprintf("4. gateway peak RSS, %d Telegram chats at saturation", h.o.chats), fmt.Sprintf("%.1f MB", mb(g.peakRSS)), "≤ 50 MB",
			g.peakRSS <= 50<<20, true)
	} else {
		row("4. gateway peak RSS, 50 Telegram chats at saturation", "-", "≤ 50 MB", false, false)
	}
	if g := sm.llm; g.answered > 0 {
		per := g.cpu / time.Duration(g.answered)
		row("5. gateway CPU per answered LLM message", ms(per), "≤ 1.5 ms", per <= 1500*time.Microsecond, true)
		fmt.Fprintf(tw, "  %s\t%s\t%s\t\n", "   its peak RSS (LLM agent)", fmt.Sprintf("%.1f MB", mb(g.peakRSS)), "reported")
	} else {
		row("5. gateway CPU per answered LLM message", "-", "≤ 1.5 ms", false, false)
	}
	tw.Flush()
	if sm.gw.answered == 0 || sm.llm.answered == 0 {
		fmt.Println("  (4 and 5 need the real gateway: --silas ./silas, as make bench passes)")
	}
}
