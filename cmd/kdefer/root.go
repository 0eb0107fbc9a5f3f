package main

import (
	"github.com/spf13/cobra"
)

// rootCmd is the kdefer command. Subcommands add themselves with
// rootCmd.AddCommand in their file's init function.
var rootCmd = &cobra.Command{
	Use:   "kdefer",
	Short: "Run work after a Kubernetes Job's pods end, whatever ended them",
	Long: `kdefer renders Jobs for kdefer (offline, for clusters without its webhook),
checks them, and inspects and steers the defer runs of managed pods.`,
	Version:       clientVersion(),
	SilenceUsage:  true,
	SilenceErrors: true,
}

// exitError ends the command with a given exit code; msg (if any) goes to
// stderr. Exit codes: 1 the input has problems, 2 usage or I/O errors.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }
