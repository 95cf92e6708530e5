//go:build linux

package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/silas-gateway/silas/core"
)

// BenchmarkRunTrue measures one isolated run of `true` from Run's call to
// its return (what a tap waits for end to end, minus the engine's commits),
// back to back. It reports p50/p99 alongside ns/op, and cpu-ms: the CPU
// time of this process, its sandbox children and the zygote per run (what
// silas-load reports as "sandbox µs", plus the gateway's side), a steadier
// figure than ns/op on a shared machine.
func BenchmarkRunTrue(b *testing.B) {
	s := benchSandbox(b)
	ds := make([]time.Duration, 0, b.N)
	cpu0, sb0 := cpuTime()+s.ZygoteCPU(), childrenCPU()+s.ZygoteCPU()
	self0, csw0 := selfUsage()
	for b.Loop() {
		t0 := time.Now()
		res, err := s.Run(context.Background(), core.ExecRequest{Argv: []string{"true"}})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("run: %v exit %d %s", err, res.ExitCode, res.Stderr)
		}
		ds = append(ds, time.Since(t0))
		_ = s.Cleanup(res.Dir)
	}
	b.ReportMetric(float64((cpuTime()+s.ZygoteCPU()-cpu0).Microseconds())/1000/float64(len(ds)), "cpu-ms")
	// What silas-load's "sandbox µs" counts: the runs' processes and the
	// zygote, without the gateway's side (whose work dir mkdir varies
	// with what else deletes files on the disk: see BENCHMARKS.md).
	b.ReportMetric(float64((childrenCPU()+s.ZygoteCPU()-sb0).Microseconds())/1000/float64(len(ds)), "sandbox-ms")
	// The gateway's side alone (silas-load's "Go µs" share of a run), and
	// how often its threads went to sleep per run: each wake-up of an
	// idle Go process costs far more than its system call.
	self1, csw1 := selfUsage()
	b.ReportMetric(float64((self1-self0).Microseconds())/1000/float64(len(ds)), "self-ms")
	b.ReportMetric(float64(csw1-csw0)/float64(len(ds)), "csw/op")
	reportPercentiles(b, ds, "")
}

// BenchmarkRunEcho is BenchmarkRunTrue with `echo x`, the program
// silas-load's phase (c) runs: a dynamically linked program that loads
// the run's locale (LANG) through the sandbox's mounts and Landlock.
func BenchmarkRunEcho(b *testing.B) { benchRunEcho(b, 0) }

// BenchmarkRunEchoPaced is BenchmarkRunEcho with 20 ms between runs, as
// silas-load's phase (c) taps at 50/s: the gateway and the zygote idle
// between runs, so each of their wake-ups is one from idle.
func BenchmarkRunEchoPaced(b *testing.B) { benchRunEcho(b, 20*time.Millisecond) }

func benchRunEcho(b *testing.B, pause time.Duration) {
	s := benchSandbox(b)
	n := 0
	// The zygote starts with the first run.
	if res, err := s.Run(context.Background(), core.ExecRequest{Argv: []string{"true"}}); err == nil {
		_ = s.Cleanup(res.Dir)
	}
	cpu0, sb0 := cpuTime()+s.ZygoteCPU(), childrenCPU()+s.ZygoteCPU()
	self0, csw0 := selfUsage()
	zcpu0, zsl0 := s.ZygoteCPU(), zygoteSlices(s)
	for b.Loop() {
		res, err := s.Run(context.Background(), core.ExecRequest{Argv: []string{"echo", "x"}})
		if err != nil || res.ExitCode != 0 || string(res.Stdout) != "x\n" {
			b.Fatalf("run: %v exit %d %q %s", err, res.ExitCode, res.Stdout, res.Stderr)
		}
		n++
		_ = s.Cleanup(res.Dir)
		if pause > 0 {
			time.Sleep(pause)
		}
	}
	b.ReportMetric(float64((cpuTime()+s.ZygoteCPU()-cpu0).Microseconds())/1000/float64(n), "cpu-ms")
	b.ReportMetric(float64((childrenCPU()+s.ZygoteCPU()-sb0).Microseconds())/1000/float64(n), "sandbox-ms")
	self1, csw1 := selfUsage()
	b.ReportMetric(float64((self1-self0).Microseconds())/1000/float64(n), "self-ms")
	b.ReportMetric(float64(csw1-csw0)/float64(n), "csw/op")
	// The zygote alone: its CPU and how often its threads got a CPU (each
	// a wake-up) per run.
	b.ReportMetric(float64((s.ZygoteCPU()-zcpu0).Microseconds())/1000/float64(n), "zygote-ms")
	b.ReportMetric(float64(zygoteSlices(s)-zsl0)/float64(n), "zygote-wakes/op")
}

// zygoteSlices sums the zygote's threads' timeslices (schedstat's third
// field: how many times each got a CPU).
func zygoteSlices(s *Subprocess) int64 {
	s.zygMu.Lock()
	z := s.zyg
	s.zygMu.Unlock()
	if z == nil {
		return 0
	}
	dir := "/proc/" + strconv.Itoa(z.cmd.Process.Pid) + "/task/"
	tasks, _ := os.ReadDir(dir)
	var n int64
	for _, t := range tasks {
		b, err := os.ReadFile(dir + t.Name() + "/schedstat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) == 3 {
			v, _ := strconv.ParseInt(f[2], 10, 64)
			n += v
		}
	}
	return n
}

// BenchmarkRunBurst is BenchmarkRunTrue with 8 runs at a time (taps in a
// burst: the warm pool is empty most of the time and runs end together),
// reporting cpu-ms per run and the start latency (Run's call to the
// program's start).
func BenchmarkRunBurst(b *testing.B) {
	s := benchSandbox(b)
	var mu sync.Mutex
	ds := make([]time.Duration, 0, b.N)
	cpu0 := cpuTime() + s.ZygoteCPU()
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for b.Loop() {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			t0 := time.Now()
			res, err := s.Run(context.Background(), core.ExecRequest{Argv: []string{"date", "+%s%N"}})
			if err != nil || res.ExitCode != 0 {
				b.Errorf("run: %v exit %d %s", err, res.ExitCode, res.Stderr)
				return
			}
			ns, err := strconv.ParseInt(strings.TrimSpace(string(res.Stdout)), 10, 64)
			if err != nil {
				b.Errorf("date output %q", res.Stdout)
				return
			}
			mu.Lock()
			ds = append(ds, time.Unix(0, ns).Sub(t0))
			mu.Unlock()
			_ = s.Cleanup(res.Dir)
		})
	}
	wg.Wait()
	b.ReportMetric(float64((cpuTime()+s.ZygoteCPU()-cpu0).Microseconds())/1000/float64(max(1, len(ds))), "cpu-ms")
	reportPercentiles(b, ds, "start-")
}

// BenchmarkRelease measures what the gateway spends on a run's work dir
// outside the run: made (newWorkDir) and released, kept as by default
// (keep_work_for 24h). Each op adds a kept dir, so a cost that grows with
// the kept dirs shows as cpu-ms rising with -benchtime.
func BenchmarkRelease(b *testing.B) {
	s := benchSandbox(b)
	n := 0
	cpu0 := cpuTime()
	for b.Loop() {
		d, err := s.newWorkDir()
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Release(d); err != nil {
			b.Fatal(err)
		}
		n++
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/1000/float64(max(1, n)), "cpu-ms")
}

// cpuTime is the user and system time of this process and of its children
// that were waited for (each run's init, and through it the program).
func cpuTime() time.Duration {
	var d time.Duration
	for _, who := range []int{syscall.RUSAGE_SELF, syscall.RUSAGE_CHILDREN} {
		var ru syscall.Rusage
		if syscall.Getrusage(who, &ru) == nil {
			d += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
	}
	return d
}

// selfUsage is this process's own user and system time and its voluntary
// context switches (its threads' sleeps: every wait it parks a thread in).
func selfUsage() (time.Duration, int64) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), ru.Nvcsw
}

// childrenCPU is the user and system time of this process's children
// that were waited for.
func childrenCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkStartLatency measures what the isolation adds before a program
// starts: from Run's call to the program's start (`date` prints the wall
// clock as it starts), and to Run's return (exit-). Taps are not back to
// back in real use, so each run follows a 50 ms pause (not timed).
func BenchmarkStartLatency(b *testing.B) { startLatency(b, false, 50*time.Millisecond) }

// BenchmarkStartLatencyNetwork is BenchmarkStartLatency for network-on
// runs: their own network namespace, pasta attached and the filter
// installed. Warm: the pause lets the pool start the next init and its
// pasta ahead of the run; cold: every run starts both (taps in a burst).
func BenchmarkStartLatencyNetwork(b *testing.B) {
	needPasta(b)
	b.Run("warm", func(b *testing.B) { startLatency(b, true, time.Second) })
	b.Run("cold", func(b *testing.B) { startLatency(b, true, 0) })
}

func startLatency(b *testing.B, network bool, pause time.Duration) {
	s := benchSandbox(b)
	ds := make([]time.Duration, 0, b.N)
	exits := make([]time.Duration, 0, b.N)
	for b.Loop() {
		b.StopTimer()
		time.Sleep(pause)
		b.StartTimer()
		t0 := time.Now()
		res, err := s.Run(context.Background(), core.ExecRequest{Argv: []string{"date", "+%s%N"}, Network: network})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("run: %v exit %d %s", err, res.ExitCode, res.Stderr)
		}
		ns, err := strconv.ParseInt(strings.TrimSpace(string(res.Stdout)), 10, 64)
		if err != nil {
			b.Fatalf("date output %q", res.Stdout)
		}
		exits = append(exits, time.Since(t0))
		ds = append(ds, time.Unix(0, ns).Sub(t0))
		_ = s.Cleanup(res.Dir)
	}
	reportPercentiles(b, ds, "start-")
	reportPercentiles(b, exits, "exit-")
}

func benchSandbox(b *testing.B) *Subprocess {
	s, err := New(Config{BaseDir: filepath.Join(b.TempDir(), "base")})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

func reportPercentiles(b *testing.B, ds []time.Duration, prefix string) {
	b.StopTimer()
	slices.Sort(ds)
	if len(ds) > 0 {
		b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, prefix+"p50-ms")
		b.ReportMetric(float64(ds[len(ds)*99/100].Microseconds())/1000, prefix+"p99-ms")
	}
}
