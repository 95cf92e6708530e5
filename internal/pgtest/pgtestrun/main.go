// Command pgtestrun runs a command with one throwaway PostgreSQL cluster
// shared by every test binary it starts (pgtest.RunShared). `make test` runs
//
//	go run ./internal/pgtest/pgtestrun go test -race ./...
//
// so that the packages' tests create their databases on one cluster instead
// of each test binary running initdb and starting a server of its own.
package main

import (
	"os"

	"github.com/silas-gateway/silas/internal/pgtest"
)

func main() { os.Exit(pgtest.RunShared(os.Args[1:])) }
