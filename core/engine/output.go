package engine

// outputRefPrefix starts the ref under which an execution's full output is
// stored ("out-" + approval id); /output (core/commands) reads it back.
const outputRefPrefix = "out-"
