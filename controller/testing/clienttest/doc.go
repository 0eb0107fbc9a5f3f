// Package clienttest holds the test helpers that work through a
// controller-runtime client: a write counter (WriteCounter) and the kubelet's
// status writes (SetRunning). They live apart from package testing's
// builders so that the builders stay light: pure-logic tests and fuzz
// targets (controller/podstate) use the builders without compiling
// controller-runtime, which the fuzz tier would otherwise instrument.
// Only tests and test/ import it; production code never does.
package clienttest
