// Package podstate is what the controller reads of a managed pod: whether
// its main containers have ended and why (Classify), its work volumes
// (WorkClaims), and the slim copy the controller's cache keeps (StripPod).
//
// It is pure logic over k8s.io/api types, apart from package controller so
// that its tests and fuzz target compile without controller-runtime: the
// fuzz tier instruments a fuzz package's whole dependency tree, and
// controller-runtime's was most of that tier's cold cost.
package podstate
