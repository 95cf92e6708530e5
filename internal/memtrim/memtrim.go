// Package memtrim gives back the executable's pages that start-up touched
// and serving does not use, so that the gateway's resident set is what it
// works with rather than everything its start-up ran once.
//
// Why: a Go program runs every linked package's initialisation before
// main (Silas links some 380 packages: each platform's SDK, the model
// client, protobuf registries), and the kernel maps the executable's
// code and read-only data around every page those touch (64 kB at a
// time). Half the gateway's peak resident set was such clean pages of its
// own binary, most of them never used again (BENCHMARKS.md "Issue 26 —
// RSS (this session)"). Dropped, they stay in the page cache: what is used
// again maps back with a minor fault. ExecutableUncached, for a process
// past its start-up, also takes the binary's pages that no process maps
// out of the page cache, so that what maps back is what is used, not its
// cached neighbours.
//
// It must never drop a page whose contents differ from the file: it
// touches only the executable's read-only mappings, and only those
// without a private (copied-on-write) page — a debugger's breakpoint, or
// relocations of a position-independent build. It never touches a
// writable mapping, the heap, or another file's mappings.
package memtrim
