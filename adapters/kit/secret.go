package kit

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// ReadSecret returns v trimmed, or the trimmed content of the file when v is
// "file:/path". key is the configuration key as the operator writes it
// ("telegram.token"); errors name the key and the path, never the value.
func ReadSecret(key, v string) (string, error) {
	path, ok := strings.CutPrefix(v, "file:")
	if !ok {
		return strings.TrimSpace(v), nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			// The bare cause: PathError repeats the path we name anyway.
			err = pe.Err
		}
		return "", fmt.Errorf("%s: cannot read %s: %v", key, path, err)
	}
	return strings.TrimSpace(string(b)), nil
}
