// Package configs embeds the example configuration, which documents every
// key (`silas config example` prints it).
package configs

import _ "embed"

// Example is configs/silas.example.yaml.
//
//go:embed silas.example.yaml
var Example string
