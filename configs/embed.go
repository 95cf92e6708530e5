// Package configs embeds the example configuration, which documents every
// key (`silas config example` prints it).
package configs

import "embed"

// Example is configs/silas.example.yaml.
//
//go:embed silas.example.yaml
var Example string

// Flows holds the example flows (configs/flows/*.yaml), listed by
// `silas flow list` next to the operator's flows.dir.
//
//go:embed flows/*.yaml
var Flows embed.FS
