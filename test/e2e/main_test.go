//go:build e2e

package e2e

import (
	"os"
	"testing"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

func TestMain(m *testing.M) {
	// controller-runtime's client logs a stack trace when no logger is set.
	ctrllog.SetLogger(logr.Discard())
	os.Exit(m.Run())
}
