package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/kdefer/kdefer/api/scheme"
	v1 "github.com/kdefer/kdefer/api/v1alpha1"
)

// outputFlags are kubectl's -o of the commands that print DeferRuns (status,
// wait): cli-runtime's printers for yaml, json, name, jsonpath and
// templates, and kdefer's table, with more columns for wide.
type outputFlags struct {
	print *genericclioptions.PrintFlags
}

func (o *outputFlags) add(cmd *cobra.Command) {
	o.print = genericclioptions.NewPrintFlags("").WithTypeSetter(scheme.New())
	o.print.AddFlags(cmd)
	cmd.Flags().Lookup("output").Usage = "output format: wide, or one of " + strings.Join(o.print.AllowedFormats(), "|") + " (default: a table)"
}

// printRuns prints the runs of a Job (job set, a DeferRunList with -o) or
// one run (the DeferRun itself).
func (o *outputFlags) printRuns(w io.Writer, runs []v1.DeferRun, job *batchv1.Job) error {
	format := ""
	if o.print != nil && o.print.OutputFormat != nil {
		format = *o.print.OutputFormat
	}
	switch format {
	case "", "wide":
		printRuns(w, runs, job, format == "wide")
		return nil
	}
	p, err := o.print.ToPrinter()
	if err != nil {
		return &exitError{code: 2, msg: err.Error()}
	}
	objs := []runtime.Object{&v1.DeferRunList{Items: runs}}
	if (job == nil && len(runs) == 1) || format == "name" { // the name printer takes no typed lists
		objs = objs[:0]
		for i := range runs {
			objs = append(objs, &runs[i])
		}
	}
	for _, obj := range objs {
		if err := p.PrintObj(obj, w); err != nil {
			return &exitError{code: 2, msg: fmt.Sprintf("printing: %v", err)}
		}
	}
	return nil
}
