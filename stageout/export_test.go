package stageout

// SetMaxHoles sets the sparse-file limit for a test and returns a func that
// restores it.
func SetMaxHoles(n int64) func() {
	old := maxHoles
	maxHoles = n
	return func() { maxHoles = old }
}

// SummaryLogWarnings is summaryLogWarnings.
var SummaryLogWarnings = summaryLogWarnings
