// Package commands is the chat command table and its handlers: /help,
// /whoami, /pending, /audit, /output, /secret, /secrets, /tasks, /stop
// and /pair. The engine asks it two things: how a message's command may be
// answered (Parse: inline from memory, or for a stranger under the
// pairing policy), and to answer it (Table.Answer) into the turn's
// outcome, through Out, an interface this package owns.
//
// A handler reads what it shows before the turn's transaction and writes
// through Out.Write inside it, so its effect commits with the turn or not
// at all. It never decides an approval, never runs or proposes an action
// (/run is the agent's), never sees a secret's value (only names), never
// queues a message itself and never imports the engine, an adapter or a
// platform SDK; the stores it reads and the rooms it asks (the decider's
// checks, secure input, tasks, trust) are small interfaces declared here.
package commands
