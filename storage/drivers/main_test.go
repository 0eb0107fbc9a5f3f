package drivers_test

import (
	"os"
	"testing"

	"github.com/kdefer/kdefer/test/s3server"
)

// TestMain removes the embedded S3 gateway's directory after the tests.
func TestMain(m *testing.M) { os.Exit(s3server.RunTests(m)) }
