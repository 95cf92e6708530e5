package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/silas-gateway/silas/adapters/telegram/telegramtest"
)

// Phases (e) and (f) run the real gateway binary (--silas), not the engine
// in this process: `silas serve` polls the project's Telegram fake (rate
// limits off, and the adapter's own lifted) and answers --chats private chats that each keep
// --chat-window messages in flight, so the gateway runs at saturation.
// (e) uses the command agent, (f) the LLM agent against a model endpoint
// in this process that answers every request at once. What is measured is
// the gateway process alone: its peak RSS (VmHWM), its CPU (user + system,
// from /proc) per answered message, and the PostgreSQL server's CPU per
// message (the same server as the other phases: its other clients are
// idle meanwhile).

// gatewayResult is one gateway phase's figures.
type gatewayResult struct {
	kind        string
	answered    int64
	wall        time.Duration
	cpu, pg     time.Duration // over the measured window
	peakRSS     int64         // bytes, VmHWM at the end
	rssEnd      int64         // bytes, VmRSS at the end
	anon, file  int64         // bytes of rssEnd: heap, stacks (RssAnon); the binary's pages (RssFile)
	binaryBytes int64
	modelCalls  int64
	modelConns  int64
	txns, wal   int64 // the cluster's write transactions and WAL bytes over the window (its other clients idle)
}

// tcleanup is the part of testing.TB the Telegram fake needs.
type tcleanup struct{ fs []func() }

func (c *tcleanup) Cleanup(f func()) { c.fs = append(c.fs, f) }
func (*tcleanup) Helper()            {}
func (c *tcleanup) run() {
	for i := len(c.fs) - 1; i >= 0; i-- {
		c.fs[i]()
	}
}

// modelFake is an OpenAI-compatible endpoint that answers every chat
// completion at once with the same text.
type modelFake struct {
	srv   *http.Server
	url   string
	calls atomic.Int64
	conns atomic.Int64 // TCP connections the gateway opened (keep-alive: few)
}

const modelKey = "sk-silas-load"

func startModelFake() (*modelFake, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	m := &modelFake{url: "http://" + ln.Addr().String() + "/v1"}
	answer, _ := json.Marshal(map[string]any{
		"id": "chatcmpl-load", "object": "chat.completion", "created": 1700000000, "model": "load-model",
		"choices": []map[string]any{{"index": 0, "message": map[string]any{"role": "assistant", "content": "Noted."}, "finish_reason": "stop"}},
		"usage":   map[string]any{"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
	})
	models, _ := json.Marshal(map[string]any{"object": "list", "data": []map[string]any{{"id": "load-model", "object": "model", "created": 0, "owned_by": "silas-load"}}})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(models)
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		m.calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(answer)
	})
	m.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ConnState: func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			m.conns.Add(1)
		}
	}}
	go func() { _ = m.srv.Serve(ln) }()
	return m, nil
}

// createDatabase makes an empty database next to dsn's and returns its URL
// (with DATABASE_URL set, its role needs CREATEDB).
func (h *harness) createDatabase(ctx context.Context, dsn, name string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" {
		return "", fmt.Errorf("the gateway phases need a URL-form database address: %v", err)
	}
	if _, err := h.st.Pool().Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
		return "", err
	}
	if _, err := h.st.Pool().Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	u.Path = "/" + name
	return u.String(), nil
}

// phaseGateway runs one gateway phase: kind "command" or "llm".
func (h *harness) phaseGateway(ctx context.Context, dsn, kind string) (gatewayResult, error) {
	res := gatewayResult{kind: kind}
	if fi, err := os.Stat(h.o.silasBin); err == nil {
		res.binaryBytes = fi.Size()
	}
	name := "silas_load_" + kind
	db, err := h.createDatabase(ctx, dsn, name)
	if err != nil {
		return res, err
	}
	defer func() {
		// Last (after serve stopped): DATABASE_URL may be someone's server.
		if _, err := h.st.Pool().Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			fmt.Fprintf(os.Stderr, "silas-load: drop database %s: %v\n", name, err)
		}
	}()
	var tc tcleanup
	defer tc.run()
	tg := telegramtest.NewServer(&tc, telegramtest.Options{NoRateLimits: true})
	data, err := os.MkdirTemp(h.tmp, "gateway-")
	if err != nil {
		return res, err
	}
	env := append(os.Environ(), "DATABASE_URL="+db, "SILAS_DATA_DIR="+data, "SILAS_HTTP_LISTEN=127.0.0.1:0",
		"SILAS_SECRETS_WEB_ENABLED=false", "SILAS_LOG_LEVEL=warn",
		"SILAS_TELEGRAM_ENABLED=true", "SILAS_TELEGRAM_TOKEN="+tg.Token, "SILAS_TELEGRAM_BASE_URL="+tg.URL,
		"SILAS_TELEGRAM_DM_POLICY=open", "SILAS_TELEGRAM_POLL_TIMEOUT=1s", "SILAS_TELEGRAM_BOT_USERNAME="+tg.BotUsername,
		"SILAS_IDENTITIES_OWNERS=webchat:local",
		// Telegram's own limits (1 message per chat per second, 30 in
		// all) would cap the gateway at 30 answers/s: lifted, so that it
		// runs as fast as it can (the fake's limits are off too).
		"SILAS_TELEGRAM_LIMITS_PER_CHAT_INTERVAL=1ms", "SILAS_TELEGRAM_LIMITS_GLOBAL_PER_SECOND=10000")
	var model *modelFake
	if kind == "llm" {
		if model, err = startModelFake(); err != nil {
			return res, err
		}
		defer model.srv.Close()
		keyFile := filepath.Join(data, "llm.key")
		if err := os.WriteFile(keyFile, []byte(modelKey+"\n"), 0o600); err != nil {
			return res, err
		}
		env = append(env, "SILAS_AGENT_KIND=llm", "SILAS_LLM_BASE_URL="+model.url, "SILAS_LLM_API_KEY=file:"+keyFile,
			"SILAS_LLM_MODELS_PROXY=load-model")
	}
	coldBinary(h.o.silasBin)
	cmd := exec.Command(h.o.silasBin, "serve")
	cmd.Env = env
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return res, err
	}
	logs := &tailBuffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		return res, err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		once := sync.Once{}
		for sc.Scan() {
			if strings.Contains(sc.Text(), "Silas web chat:") {
				once.Do(func() { close(ready) })
			}
		}
	}()
	select {
	case <-ready:
	case <-exited:
		return res, fmt.Errorf("silas serve exited at start:\n%s", logs.String())
	case <-time.After(h.o.timeout):
		return res, fmt.Errorf("silas serve did not start within %s:\n%s", h.o.timeout, logs.String())
	case <-ctx.Done():
		return res, ctx.Err()
	}
	pid := cmd.Process.Pid

	// Each chat keeps chat-window messages in flight: a sender sends when
	// fewer than that are unanswered. answered is read from the fake.
	chats := make([]telegramtest.User, h.o.chats)
	for i := range chats {
		chats[i] = telegramtest.User{ID: int64(5_000_000 + i), FirstName: "Load" + strconv.Itoa(i)}
	}
	sent := make([]int64, len(chats))
	answered := func() int64 {
		var n int64
		for _, u := range chats {
			n += int64(len(tg.Messages(u.ID)))
		}
		return n
	}
	total := func() int64 {
		var n int64
		for _, s := range sent {
			n += s
		}
		return n
	}
	var msgN int64
	drive := func(until time.Time) error {
		for time.Now().Before(until) {
			select {
			case <-exited:
				return fmt.Errorf("silas serve exited:\n%s", logs.String())
			case <-ctx.Done():
				return ctx.Err()
			default:
			}
			for i, u := range chats {
				got := int64(len(tg.Messages(u.ID)))
				for sent[i]-got < int64(h.o.chatWindow) {
					msgN++
					tg.SendMessage(telegramtest.Msg{Chat: telegramtest.Private(u), From: u, NoEntities: true, Text: "hello number " + strconv.FormatInt(msgN, 10)})
					sent[i]++
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
		return nil
	}
	progress("(%s) gateway: silas serve, %d Telegram chats × %d in flight, %s warm-up + %s", phaseLetter(kind), len(chats), h.o.chatWindow, h.o.warmup, h.o.gatewayDuration)
	if err := drive(time.Now().Add(h.o.warmup)); err != nil {
		return res, err
	}
	a0, cpu0, pg0, t0 := answered(), procCPU(pid), h.pgCPU(), time.Now()
	xid0, wal0 := h.xidWAL(ctx)
	calls0, conns0 := int64(0), int64(0)
	if model != nil {
		calls0, conns0 = model.calls.Load(), model.conns.Load()
	}
	if err := drive(time.Now().Add(h.o.gatewayDuration)); err != nil {
		return res, err
	}
	a1, cpu1, pg1, t1 := answered(), procCPU(pid), h.pgCPU(), time.Now()
	xid1, wal1 := h.xidWAL(ctx)
	res.txns, res.wal = xid1-xid0, wal1-wal0
	res.answered, res.cpu, res.pg, res.wall = a1-a0, cpu1-cpu0, pg1-pg0, t1.Sub(t0)
	if model != nil {
		res.modelCalls = model.calls.Load() - calls0
		res.modelConns = model.conns.Load() - conns0
	}
	res.peakRSS, res.rssEnd, res.anon, res.file = procRSS(pid)
	// Let it finish what is in flight before the stop, so that a stop
	// mid-burst is not what the log shows.
	deadline := time.Now().Add(h.o.drainTimeout)
	for answered() < total() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if res.answered == 0 {
		return res, fmt.Errorf("silas serve answered nothing in %s:\n%s", h.o.gatewayDuration, logs.String())
	}
	return res, nil
}

func phaseLetter(kind string) string {
	if kind == "llm" {
		return "f"
	}
	return "e"
}

// xidWAL reads the cluster's next transaction id and WAL position (0, 0
// when it cannot).
func (h *harness) xidWAL(ctx context.Context) (xid, wal int64) {
	_ = h.st.Pool().QueryRow(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint,
		pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint`).Scan(&xid, &wal)
	return xid, wal
}

func (h *harness) pgCPU() time.Duration {
	if h.sm == nil || h.sm.postmaster == 0 {
		return 0
	}
	return serverCPU(h.sm.postmaster)
}

// procCPU is a process's CPU time (user + system, with the children it
// waited for).
func procCPU(pid int) time.Duration {
	_, _, c, ok := procStat(pid)
	if !ok {
		return 0
	}
	return time.Duration((c[0] + c[1] + c[2] + c[3]) * float64(time.Second))
}

// procRSS reads a process's peak and current resident set size, and the
// current one's anonymous and file-backed parts.
func procRSS(pid int) (peak, now, anon, file int64) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, 0, 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		kb, _ := strconv.ParseInt(f[0], 10, 64)
		switch k {
		case "VmHWM":
			peak = kb << 10
		case "VmRSS":
			now = kb << 10
		case "RssAnon":
			anon = kb << 10
		case "RssFile":
			file = kb << 10
		}
	}
	return peak, now, anon, file
}

// tailBuffer keeps the last 64 kB written to it (the gateway's log, shown
// when it fails).
type tailBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - 64<<10; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// gatewayRows adds a gateway phase's figures to the report.
func (r *report) gatewayRows(g gatewayResult) {
	if g.answered == 0 {
		return
	}
	l := phaseLetter(g.kind)
	agent := "command agent"
	if g.kind == "llm" {
		agent = "LLM agent, model answers at once"
	}
	n := time.Duration(g.answered)
	r.add(fmt.Sprintf("(%s) gateway messages answered/s (%s)", l, agent), fmt.Sprintf("%.0f", float64(g.answered)/g.wall.Seconds()),
		fmt.Sprintf("%d answered in %s", g.answered, g.wall.Round(time.Millisecond)))
	r.add(fmt.Sprintf("(%s) gateway CPU per answered message (Go / postgres)", l), fmt.Sprintf("%s / %s", ms(g.cpu/n), ms(g.pg/n)),
		fmt.Sprintf("silas serve process; postgres: the whole server%s", modelNote(g)))
	r.add(fmt.Sprintf("(%s) gateway write transactions / WAL per answered message", l), fmt.Sprintf("%.2f / %.0f B", float64(g.txns)/float64(n), float64(g.wal)/float64(n)),
		"the whole cluster's (its other databases idle meanwhile)")
	r.add(fmt.Sprintf("(%s) gateway peak RSS (VmHWM) / RSS at the end", l), fmt.Sprintf("%.1f / %.1f MB", mb(g.peakRSS), mb(g.rssEnd)),
		fmt.Sprintf("at the end %.1f MB anonymous (heap, stacks) + %.1f MB of the binary's pages; binary %.1f MB", mb(g.anon), mb(g.file), mb(g.binaryBytes)))
}

func modelNote(g gatewayResult) string {
	if g.kind != "llm" {
		return ""
	}
	return fmt.Sprintf("; %d model calls over %d new connections", g.modelCalls, g.modelConns)
}

func mb(b int64) float64 { return float64(b) / (1 << 20) }

// coldBinary writes the binary's dirty pages back and drops it from the page
// cache, so that serve maps it as on a host that reads it from disk. The
// binary's resident pages are part of the peak RSS measured, and how many a
// run maps depended on the file's history: identical bytes gave 18.7 MB of
// them from a file built ten minutes before and 26.6 MB from one just
// written (2026-11-27: a freshly written file sits in the page cache in
// large folios, which a page fault maps whole), which made builds look
// 6–8 MB apart that were not.
func coldBinary(path string) {
	f, err := os.Open(path)
	if err != nil {
		return // exec reports it
	}
	defer f.Close()
	_ = unix.Fdatasync(int(f.Fd()))
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		progress("could not drop %s from the page cache (its RSS may count more of its pages): %v", path, err)
	}
}
