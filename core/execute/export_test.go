package execute

// IdleRunners is how many goroutines wait for a run to be handed to them
// (goRun).
func IdleRunners(x *Executor) int { return int(x.bg.idlers.Load()) }
