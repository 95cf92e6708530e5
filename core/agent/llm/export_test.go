package llm

// HistoryMessage exposes historyMessage to the fuzz target in history_test.go.
var HistoryMessage = historyMessage
