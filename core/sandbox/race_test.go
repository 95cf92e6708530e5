//go:build race

package sandbox

// raceEnabled: built with -race (zygote inits are then whole copies of
// the zygote: see sandboxinit/zygote_clone3_other.go).
const raceEnabled = true
