package controller_test

import (
	"io"
	"os"
	"testing"

	"github.com/go-logr/zerologr"
	"github.com/rs/zerolog"
	ctrl "sigs.k8s.io/controller-runtime"
)

// TestMain sends the manager's logs nowhere, or to stderr with
// KDEFER_TEST_LOG=1.
func TestMain(m *testing.M) {
	w := io.Discard
	if os.Getenv("KDEFER_TEST_LOG") == "1" {
		w = os.Stderr
	}
	zl := zerolog.New(w).With().Timestamp().Logger()
	ctrl.SetLogger(zerologr.New(&zl))
	os.Exit(m.Run())
}
