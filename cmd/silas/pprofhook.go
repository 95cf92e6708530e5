//go:build pprofhook

package main

// A measuring hook, built only with `-tags pprofhook` (never in a release
// build): GW_CPUPROFILE=file,delay,length writes a CPU profile of this
// process, started delay after start-up and stopped after length (Go
// durations), e.g. GW_CPUPROFILE=/tmp/f.pprof,4s,8s for silas-load's
// phase (f). Used to profile `silas serve` under silas-load, which runs it
// as a separate process.

import (
	"fmt"
	"os"
	"runtime/pprof"
	"strings"
	"time"
)

func init() {
	spec := os.Getenv("GW_CPUPROFILE")
	if spec == "" {
		return
	}
	f := strings.Split(spec, ",")
	if len(f) != 3 {
		fmt.Fprintln(os.Stderr, "GW_CPUPROFILE: want file,delay,length")
		return
	}
	delay, err1 := time.ParseDuration(f[1])
	length, err2 := time.ParseDuration(f[2])
	if err1 != nil || err2 != nil {
		fmt.Fprintln(os.Stderr, "GW_CPUPROFILE: bad duration")
		return
	}
	go func() {
		time.Sleep(delay)
		out, err := os.Create(f[0])
		if err != nil {
			fmt.Fprintln(os.Stderr, "GW_CPUPROFILE:", err)
			return
		}
		if err := pprof.StartCPUProfile(out); err != nil {
			fmt.Fprintln(os.Stderr, "GW_CPUPROFILE:", err)
			return
		}
		time.Sleep(length)
		pprof.StopCPUProfile()
		_ = out.Close()
	}()
}
