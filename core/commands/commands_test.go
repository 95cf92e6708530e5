package commands

import "testing"

func TestParseCommand(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, text, cmd, arg string
		ok                   bool
	}{
		{"plain text", "hello there", "", "", false},
		{"command", "/run uname -a", "/run", "uname -a", true},
		{"spaces", "  /audit   5 ", "/audit", "5", true},
		{"addressed in a group", "/pair@silas_bot 123456", "/pair", "123456", true},
		{"longer word is another command", "/pairing 1", "/pairing", "1", true},
		{"bare slash", "/", "/", "", true},
		{"at sign in the argument", "/run echo a@b", "/run", "echo a@b", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd, arg, ok := parseCommand(tt.text)
			if cmd != tt.cmd || arg != tt.arg || ok != tt.ok {
				t.Fatalf("parseCommand(%q) = %q, %q, %v; want %q, %q, %v", tt.text, cmd, arg, ok, tt.cmd, tt.arg, tt.ok)
			}
		})
	}
	stranger := func(text string) bool { return Parse(text).Stranger }
	if !stranger("/pair@silas_bot 1") || stranger("/pairing") || stranger("hello /pair") {
		t.Fatal("the access policy's view of /pair disagrees with parseCommand")
	}
	for cmd, spec := range table {
		if spec.inline && (cmd == "/run" || cmd == "/pair") {
			t.Errorf("%s must not be answered inline", cmd)
		}
		if spec.stranger && cmd != "/pair" {
			t.Errorf("%s must not be answered for a stranger under the pairing policy", cmd)
		}
	}
}
