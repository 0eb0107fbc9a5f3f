// Package version holds kdefer's release version and where its images are
// published: the values every binary and the default stage image share.
//
// It imports nothing, so that kdefer-stage can name its version without
// linking the Kubernetes API types, and api/v1alpha1 can name the default
// stage image without a cycle. It must stay that way: a leaf.
package version

// Version of kdefer, stamped at build time with
// -ldflags "-X github.com/kdefer/kdefer/internal/version.Version=vX.Y.Z".
// It is also the tag of the images a release publishes.
var Version = "v0.2.0"

// Registry is where kdefer's images are published (REGISTRY/kdefer-stage:
// Version is the default stage image), stamped at build time with
// -X github.com/kdefer/kdefer/internal/version.Registry=HOST[/PATH]: the
// image builder stamps the registry it pushes to, so a controller built for
// another registry names its own stage image there without a flag.
var Registry = "ghcr.io/kdefer"
