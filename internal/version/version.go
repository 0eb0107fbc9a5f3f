// Package version holds kdefer's release version, the one value every binary
// and the default stage image tag share.
//
// It imports nothing, so that kdefer-stage can name its version without
// linking the Kubernetes API types, and api/v1alpha1 can tag the default
// stage image without a cycle. It must stay that way: a leaf.
package version

// Version of kdefer, stamped at build time with
// -ldflags "-X github.com/kdefer/kdefer/internal/version.Version=vX.Y.Z".
var Version = "v0.1.0"
