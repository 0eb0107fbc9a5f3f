// Command kdefer is kdefer's command-line tool, also usable as a kubectl
// plugin (`kubectl kdefer ...` when installed as kubectl-kdefer).
//
// Each subcommand lives in its own file and registers itself on rootCmd in
// an init function, so adding a command means adding a file.
//
// It talks to the cluster as a client only: it must not link the manager,
// the webhooks or the certificate code (package controller and below
// it); the names it shares with the controller (run and defer pod names,
// states, reasons, the release annotation) live in api/v1alpha1.
package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
)

func main() {
	// Installed as kubectl-kdefer (make kubectl-kdefer, or krew), kubectl
	// runs it for `kubectl kdefer`: help and usage say so.
	if strings.HasPrefix(filepath.Base(os.Args[0]), "kubectl-") {
		rootCmd.Use = "kubectl kdefer"
		rootCmd.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl kdefer"}
	}
	if err := rootCmd.Execute(); err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			if ee.msg != "" {
				fmt.Fprintln(os.Stderr, "kdefer:", ee.msg)
			}
			os.Exit(ee.code)
		}
		fmt.Fprintln(os.Stderr, "kdefer:", err)
		os.Exit(2)
	}
}
