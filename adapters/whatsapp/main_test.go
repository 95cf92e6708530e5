package whatsapp

import (
	"os"
	"testing"

	"github.com/silas-gateway/silas/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
