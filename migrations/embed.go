// Package migrations holds the goose SQL migrations, embedded in the binary.
package migrations

import (
	"embed"
	"io/fs"
)

//go:embed *.sql
var files embed.FS

// FS returns the migrations at the root of an fs.FS, as goose's provider
// expects (it globs the root only).
func FS() fs.FS { return files }
